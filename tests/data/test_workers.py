"""Seeded collators under DataLoader workers: a fresh stream per epoch and per worker, reproducible.

Every example is the same sequence, so any difference between two batches comes from the masks. Every
collator that draws random numbers is covered: MLM (and whole-word MLM), MLM on SOP/NSP sentence pairs,
PLM, T5 span corruption; CLM draws nothing and must give the same batches every epoch.
"""

import pytest
import torch

from hf_xfmr.data import (
    DataCollatorForCLM,
    DataCollatorForMLM,
    DataCollatorForPLM,
    DataCollatorForSpanCorruption,
    create_nsp_examples,
    create_sop_examples,
    tokenize_documents,
    tokenize_for_mlm,
)

TEXT = "the quick brown fox jumps over the lazy dog and runs far away from home"


def _examples(tok, n=8):
    ids = tok(TEXT)["input_ids"]
    return [{"input_ids": ids} for _ in range(n)]


def _pair_examples(tok, corpus, make, n=8):
    """One sentence-pair example (with token_type_ids and its SOP/NSP label) repeated n times."""
    docs = tokenize_documents(tok, corpus[:6])
    (example, *_) = [ex for ex in make(docs, tok, max_seq_length=48, seed=0) if len(ex["input_ids"]) > 20]
    return [dict(example) for _ in range(n)]


def _wwm_examples(tok, n=8):
    enc = tokenize_for_mlm(tok, [TEXT])
    return [{k: enc[k][0] for k in enc} for _ in range(n)]


SPAN = dict(vocab_size=1000, eos_token_id=1, pad_token_id=0)

# kind -> (a new collator with seed 0, the examples); `toks` holds the session tokenizers and corpus.
COLLATORS = {
    "mlm": lambda toks: (DataCollatorForMLM(toks["bert"], mlm_probability=0.3, seed=0), _examples(toks["bert"])),
    "wwm": lambda toks: (DataCollatorForMLM(toks["bert"], whole_word_mask=True, mlm_probability=0.3, seed=0),
                         _wwm_examples(toks["bert"])),
    "sop": lambda toks: (DataCollatorForMLM(toks["albert"], mlm_probability=0.3, seed=0),
                         _pair_examples(toks["albert"], toks["corpus"], create_sop_examples)),
    "nsp": lambda toks: (DataCollatorForMLM(toks["bert"], mlm_probability=0.3, seed=0),
                         _pair_examples(toks["bert"], toks["corpus"], create_nsp_examples)),
    "plm": lambda toks: (DataCollatorForPLM(toks["xlnet"], num_predict=4, seed=0), _examples(toks["xlnet"])),
    "span": lambda toks: (DataCollatorForSpanCorruption(**SPAN, seed=0), [list(range(10, 50))] * 8),
}


@pytest.fixture(scope="module")
def toks(bert_tok, xlnet_tok, albert_tok, corpus):
    return {"bert": bert_tok, "xlnet": xlnet_tok, "albert": albert_tok, "corpus": corpus}


def _epochs(collator, examples, *, num_workers, loader_seed=None, epochs=2, persistent=False):
    """Per epoch, the (labels, input_ids) of each batch in order; batch b comes from worker b % num_workers."""
    generator = None if loader_seed is None else torch.Generator().manual_seed(loader_seed)
    loader = torch.utils.data.DataLoader(
        examples, batch_size=2, collate_fn=collator, num_workers=num_workers, generator=generator,
        persistent_workers=persistent,
    )  # fmt: skip
    return [[torch.cat([b["labels"].flatten(), b["input_ids"].flatten()]) for b in loader] for _ in range(epochs)]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", list(COLLATORS))
def test_workers_draw_new_masks_every_epoch(kind, toks):
    collator, examples = COLLATORS[kind](toks)
    epoch0, epoch1 = _epochs(collator, examples, num_workers=2, loader_seed=123)
    assert not _same(epoch0, epoch1), "non-persistent workers must not repeat the previous epoch's masks"
    # Batches 0 and 1 come from workers 0 and 1: different streams.
    assert not torch.equal(epoch0[0], epoch0[1]), "two workers must not draw the same masks"
    # The same collator seed and DataLoader generator seed reproduce the stream exactly.
    again = _epochs(COLLATORS[kind](toks)[0], examples, num_workers=2, loader_seed=123)
    assert _same(again[0], epoch0) and _same(again[1], epoch1)
    other = _epochs(COLLATORS[kind](toks)[0], examples, num_workers=2, loader_seed=124)
    assert not _same(other[0], epoch0)


def test_sentence_pair_labels_pass_through_workers(toks):
    collator, examples = COLLATORS["sop"](toks)
    loader = torch.utils.data.DataLoader(examples, batch_size=4, collate_fn=collator, num_workers=2)
    for b in loader:
        assert torch.equal(b["sentence_order_label"], torch.tensor([examples[0]["sentence_order_label"]] * 4))
        assert torch.equal(b["token_type_ids"][0], torch.tensor(examples[0]["token_type_ids"]))


def test_clm_draws_nothing_random(gpt_tok):
    # Causal LM batches are a function of the examples alone: identical in every epoch and worker.
    epochs = _epochs(DataCollatorForCLM(gpt_tok, seed=0), _examples(gpt_tok), num_workers=2, loader_seed=1)
    assert _same(epochs[0], epochs[1]) and torch.equal(epochs[0][0], epochs[0][1])


def test_collator_seed_matters_under_workers(bert_tok):
    examples = _examples(bert_tok)
    a = _epochs(DataCollatorForMLM(bert_tok, seed=0), examples, num_workers=2, loader_seed=5, epochs=1)[0]
    b = _epochs(DataCollatorForMLM(bert_tok, seed=1), examples, num_workers=2, loader_seed=5, epochs=1)[0]
    assert not _same(a, b)


def test_persistent_workers_continue_their_stream(bert_tok):
    examples = _examples(bert_tok)
    collator = DataCollatorForMLM(bert_tok, mlm_probability=0.3, seed=0)
    epoch0, epoch1 = _epochs(collator, examples, num_workers=2, loader_seed=7, persistent=True)
    assert not _same(epoch0, epoch1)


def test_user_generator_under_workers(bert_tok):
    # A generator passed by the user is copied into every worker: it must not repeat either.
    examples = _examples(bert_tok)
    collator = DataCollatorForMLM(bert_tok, mlm_probability=0.3, generator=torch.Generator().manual_seed(3))
    epoch0, epoch1 = _epochs(collator, examples, num_workers=2, loader_seed=9)
    assert not _same(epoch0, epoch1) and not torch.equal(epoch0[0], epoch0[1])


def test_main_process_keeps_one_private_stream(bert_tok):
    # num_workers=0: the collator's private generator from `seed`, continued from batch to batch and epoch to epoch.
    examples = _examples(bert_tok)
    epochs = _epochs(DataCollatorForMLM(bert_tok, mlm_probability=0.3, seed=4), examples, num_workers=0)
    reference = DataCollatorForMLM(bert_tok, mlm_probability=0.3, generator=torch.Generator().manual_seed(4))
    expected = [[torch.cat([b["labels"].flatten(), b["input_ids"].flatten()])
                 for b in (reference(examples[i:i + 2]) for i in range(0, 8, 2))] for _ in range(2)]
    assert _same(epochs[0], expected[0]) and _same(epochs[1], expected[1])
    assert not _same(epochs[0], epochs[1])
