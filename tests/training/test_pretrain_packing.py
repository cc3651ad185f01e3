"""`hf-xfmr pretrain --packing` (hardening 3, point 3): the mlm / wwm windows are packed whole into rows of
--max_seq_length, the collator passes their boundaries (`cu_seqlens`) on, and the model keeps every window
apart: the loss of a packed batch is the loss of its windows run one by one."""

import pytest
import torch
from torch.testing import assert_close

import hf_xfmr  # noqa: F401
from hf_xfmr.data.corpus import document_text
from hf_xfmr.models import get_architecture
from hf_xfmr.training import ObjectiveSettings, PretrainArguments, PretrainCallback, get_objective, pretrain
from hf_xfmr.training.objectives import chunk_documents


@pytest.fixture(scope="module")
def texts():
    from hf_xfmr.data import default_corpus

    return [document_text(d) for d in default_corpus(max_documents=30)]


@pytest.mark.parametrize("name", ["mlm", "wwm"])
def test_packed_rows_hold_whole_windows_with_their_fields(bert_tok, texts, name):
    settings = ObjectiveSettings(max_seq_length=64, packing=True)
    windows = chunk_documents(bert_tok, texts[:12], settings, word_ids=name == "wwm")
    rows = get_objective(name).build_examples(bert_tok, texts[:12], settings)
    assert len(rows) < len(windows)  # several windows share a row
    assert sorted(n for row in rows for n in row["seq_lens"]) == sorted(len(w["input_ids"]) for w in windows)
    for row in rows:
        assert len(row["input_ids"]) == sum(row["seq_lens"]) <= 64
        assert len(row["special_tokens_mask"]) == len(row["input_ids"])
        assert "position_ids" not in row  # the model numbers each window from its own first position
        assert (name == "wwm") == ("word_ids" in row)
    filled = sum(len(r["input_ids"]) for r in rows) / (64 * len(rows))
    assert filled > 0.9


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_a_packed_batch_has_the_loss_of_its_windows_run_one_by_one(bert_tok, texts, arch):
    objective = get_objective("mlm")
    settings = ObjectiveSettings(max_seq_length=48, packing=True)
    rows = objective.build_examples(bert_tok, texts[:6], settings)[:4]
    batch = objective.make_collator(bert_tok, settings)(rows, generator=torch.Generator().manual_seed(0))
    assert batch["cu_seqlens"].tolist()[-1] == int(batch["attention_mask"].sum())
    torch.manual_seed(0)
    a = get_architecture(arch)
    config = a.config_class.from_preset("tiny", vocab_size=len(bert_tok), pad_token_id=bert_tok.pad_token_id)
    model = a.model_class("masked-lm")(config).eval()
    packed = model(**batch, num_items_in_batch=1).loss
    total, cu = 0.0, batch["cu_seqlens"].tolist()
    ids, labels = (batch[k][batch["attention_mask"].bool()] for k in ("input_ids", "labels"))  # (N,) row by row
    for start, end in zip(cu[:-1], cu[1:]):
        window = dict(input_ids=ids[None, start:end], labels=labels[None, start:end])
        if (window["labels"] != -100).any():
            total = total + model(**window, num_items_in_batch=1).loss
    assert_close(packed, torch.as_tensor(total), atol=1e-4, rtol=1e-5)


class _Batches(PretrainCallback):
    def __init__(self):
        self.batches = []

    def on_micro_batch(self, run, batch):
        self.batches.append(batch)


def test_pretrain_with_packing_feeds_the_model_the_boundaries(saved_tokenizer, texts, tmp_path):
    seen = _Batches()
    corpus = tmp_path / "short.txt"  # one short document per line: many windows share a row
    corpus.write_text("\n".join(" ".join(t.split()[:12]) for t in texts * 4) + "\n")
    args = PretrainArguments(arch="bert", objective="mlm", packing=True, tokenizer=str(saved_tokenizer),
                             dataset=str(corpus), max_steps=2, max_seq_length=64, per_device_train_batch_size=4,
                             output_dir=str(tmp_path / "out"), progress_bar=False, save_steps=0)
    result = pretrain(args, callbacks=[seen])
    assert result.final_loss == result.final_loss  # a number, not NaN
    assert all("cu_seqlens" in batch and "position_ids" not in batch for batch in seen.batches)
    assert any(len(batch["cu_seqlens"]) - 1 > batch["input_ids"].shape[0] for batch in seen.batches)  # shared rows


def test_packing_an_objective_that_builds_its_own_rows_is_refused(tmp_path):
    args = PretrainArguments(arch="bert", objective="mlm+nsp", packing=True, output_dir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="--packing: the 'mlm\\+nsp' objective .* bert packs with mlm, wwm"):
        pretrain(args)
