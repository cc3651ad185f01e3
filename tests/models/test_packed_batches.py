"""Hardening 3, points 1-3: packed batches and ready-made 4-D masks, on every architecture (and every one added later:
the tests are parametrised over the registry).

1. transformers' `DataCollatorWithFlattening` output (with or without its `cu_seq_lens_*` keywords, with `seq_idx`
   instead of positions) keeps its sequences apart on every attention backend, unpadded and padded: each
   sequence's outputs equal those of the sequence run alone. With `config.packed_position_ids=False` a batch of
   restarting positions alone attends across sequences again, as transformers' own SDPA / eager models do.
2. A 4-D mask (bool, additive float, integer 0/1) gives the outputs of the 2-D mask it expands, wherever
   transformers takes one (not XLNet: a clear error).
3. Our own packed batches (`collate_packed(pack_documents(...))`) go straight into every model and keep the
   documents apart; the LM losses and gradients of a packed batch are those of its sequences run one by one.
Encoder-decoders keep packed sequences apart in their encoder; their decoder reads one target per row, so the
full models refuse packed inputs with a clear error.
"""

import pytest
import torch
from torch.testing import assert_close
from transformers import DataCollatorWithFlattening

import hf_xfmr
from hf_xfmr.data import collate_packed, pack_documents
from hf_xfmr.models import architectures, get_architecture

from ..doc_snippets import run_checking_comments, snippet

ARCHS = [arch.name for arch in architectures()]
CAUSAL_DECODERS = ("gpt", "llama", "mixtral")  # a 4-D mask is used as given: it must say causal itself
LM_TASKS = [(arch.name, task) for arch in architectures() for task in ("masked-lm", "causal-lm") if task in arch.classes]
LENGTHS = (7, 4, 9, 3, 5)
ATOL = 1e-5


def tiny(arch, task="base", attn="sdpa", **overrides):
    torch.manual_seed(0)
    config = get_architecture(arch).config_class.from_preset("tiny", **overrides)
    return get_architecture(arch).model_class(task)._from_config(config, attn_implementation=attn).eval()


def encoder_of(model):
    """What takes packed sequences: the model, or an encoder-decoder's encoder."""
    return model.get_encoder() if model.config.is_encoder_decoder else model


def first_position(model):
    """The position a sequence starts at (RoBERTa: pad_token_id + 1)."""
    return getattr(getattr(model, "embeddings", None), "first_position", 0)


def sequences(model, lengths=LENGTHS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, model.config.vocab_size, (n,), generator=g).tolist() for n in lengths]


def packed_batch(source, seqs, model):
    """(batch, places): a packed batch of `seqs` in the form `source` names, and where each sequence sits in it
    as (row, start, index)."""
    first = first_position(model)
    if source == "collate_packed":
        rows = pack_documents(seqs, 16, first_position=first)
        places = []
        for r, row in enumerate(rows):
            starts = [sum(row["seq_lens"][:k]) for k in range(len(row["seq_lens"]))]
            places += [(r, start, index) for start, index in zip(starts, row["doc_index"])]
        return collate_packed(rows, model.config.pad_token_id or 0), places
    options = {"flash_kwargs": dict(return_flash_attn_kwargs=True), "position_ids": {},
               "seq_idx": dict(return_seq_idx=True, return_position_ids=False)}[source]
    batch = DataCollatorWithFlattening(position_ids_start=first, **options)([{"input_ids": s} for s in seqs])
    batch.pop("labels")
    starts = [sum(len(s) for s in seqs[:k]) for k in range(len(seqs))]
    return batch, [(0, start, index) for index, start in enumerate(starts)]


def alone(model, seqs):
    with torch.no_grad():
        return [model(input_ids=torch.tensor([s])).last_hidden_state[0] for s in seqs]


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("source", ["flash_kwargs", "position_ids", "seq_idx", "collate_packed"])
@pytest.mark.parametrize("arch", ARCHS)
def test_packed_sequences_equal_the_sequences_run_alone(arch, source, attn, unpad):
    model = tiny(arch, attn=attn, unpad_inputs=unpad) if arch != "xlnet" else tiny(arch, attn=attn)
    run = encoder_of(model)
    seqs = sequences(model)
    batch, places = packed_batch(source, seqs, model)
    with torch.no_grad():
        out = run(**batch).last_hidden_state
    expected = alone(run, seqs)
    for row, start, index in places:
        assert_close(out[row, start:start + len(seqs[index])], expected[index], atol=ATOL, rtol=0,
                     msg=lambda m: f"sequence {index}: {m}")


# BART's reference takes no `position_ids` (it numbers every row 0..T-1); ours reads them as positions, so the
# packed row's outputs with the switch off have no transformers counterpart to compare with.
@pytest.mark.parametrize("arch", [a for a in ARCHS if a not in ("bart", "bigbird_pegasus")])
def test_restarting_positions_attend_across_with_the_switch_off_as_transformers_does(arch):
    """`packed_position_ids=False`: restarting positions without boundaries are only positions, and the outputs
    are transformers' own (the reference's SDPA / eager path attends across the sequences); on, they differ."""
    ours = tiny(arch, attn="eager")
    ref = hf_xfmr.to_transformers(ours).eval()
    seqs = sequences(ours)
    batch, places = packed_batch("position_ids", seqs, ours)
    extra = {"decoder_input_ids": batch["input_ids"][:, :2]} if ours.config.is_encoder_decoder else {}
    with torch.no_grad():
        expected = ref(**batch, **extra)
        expected = expected.encoder_last_hidden_state if extra else expected.last_hidden_state
        split = encoder_of(ours)(**batch).last_hidden_state
        ours.config.packed_position_ids = False
        across = encoder_of(ours)(**batch).last_hidden_state
    assert_close(across, expected, atol=ATOL, rtol=0)
    assert (split - expected).abs().max() > 1e-3  # the deviation the switch turns off is real


@pytest.mark.parametrize("arch,task", LM_TASKS)
def test_packed_lm_loss_and_gradients_are_those_of_the_sequences(arch, task):
    """transformers' flattening collator labels every sequence's first token -100: the summed loss of the packed
    row and its gradients equal the sums over the sequences run alone."""
    model = tiny(arch, task)
    seqs = sequences(model)
    batch = DataCollatorWithFlattening(return_flash_attn_kwargs=True, position_ids_start=first_position(model.model))(
        [{"input_ids": s} for s in seqs])
    model(**batch, num_items_in_batch=1).loss.backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    packed_loss = model(**batch, num_items_in_batch=1).loss.item()
    model.zero_grad()
    total = 0.0
    for s in seqs:
        ids = torch.tensor([s])
        labels = ids.clone()
        labels[0, 0] = -100
        loss = model(input_ids=ids, labels=labels, num_items_in_batch=1).loss
        loss.backward()
        total += loss.item()
    assert packed_loss == pytest.approx(total, rel=1e-5)
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert_close(packed[name], p.grad, atol=ATOL, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_the_issue_example_bert_takes_collate_packed_output():
    """The report: `XfmrBertModel(...)(**collate_packed(pack_documents(docs, 128), 0))` raised on `doc_ids`, and
    given only `position_ids` and the mask, BERT attended across documents."""
    model = tiny("bert")
    docs = sequences(model, lengths=(40, 70, 25, 90))
    rows = pack_documents(docs, 128)
    batch = collate_packed(rows, 0)
    assert {"doc_ids", "cu_seqlens", "max_seqlen"} <= set(batch)
    with torch.no_grad():
        full = model(**batch).last_hidden_state
        positions_only = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               position_ids=batch["position_ids"]).last_hidden_state
    expected = alone(model, docs)
    for r, row in enumerate(rows):
        start = 0
        for index, n in zip(row["doc_index"], row["seq_lens"]):
            assert_close(full[r, start:start + n], expected[index], atol=ATOL, rtol=0)
            assert_close(positions_only[r, start:start + n], expected[index], atol=ATOL, rtol=0)
            start += n


# -- 4-D masks ------------------------------------------------------------------------------------------
def four_d(mask, kind, causal):
    """(B, T) 0/1 -> (B, 1, T, T) as `kind` (bool, additive float or integer 0/1), causal for decoders."""
    allowed = mask.bool()[:, None, None, :].expand(-1, 1, mask.shape[1], -1)
    if causal:
        allowed = allowed & torch.tril(torch.ones(mask.shape[1], mask.shape[1], dtype=torch.bool))
    if kind == "additive":
        return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return allowed.long() if kind == "integer" else allowed


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["bool", "additive", "integer"])
@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "xlnet"])
def test_a_4d_mask_gives_the_outputs_of_the_2d_mask_it_expands(arch, kind, attn):
    model = tiny(arch, attn=attn)
    ids = torch.randint(10, model.config.vocab_size, (3, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    causal = arch in CAUSAL_DECODERS
    extra = {"decoder_input_ids": ids[:, :4]} if model.config.is_encoder_decoder else {}
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, **extra)
        out = model(input_ids=ids, attention_mask=four_d(mask, kind, causal), **extra)
    keep = mask.bool()
    if extra:
        assert_close(out.encoder_last_hidden_state[keep], expected.encoder_last_hidden_state[keep], atol=ATOL, rtol=0)
        assert_close(out.last_hidden_state, expected.last_hidden_state, atol=ATOL, rtol=0)
    else:
        assert_close(out.last_hidden_state[keep], expected.last_hidden_state[keep], atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", [a for a in ARCHS if a not in ("xlnet", "t5", "bart", "bigbird_pegasus")])
def test_a_block_diagonal_4d_mask_keeps_packed_sequences_apart(arch):
    """The usual way to keep packed sequences apart under SDPA: a block-diagonal 4-D mask (with the restarting
    positions), used as given."""
    model = tiny(arch)
    seqs = sequences(model)
    batch, places = packed_batch("position_ids", seqs, model)
    doc = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor([len(s) for s in seqs]))
    allowed = doc[:, None] == doc[None, :]
    if arch in CAUSAL_DECODERS:
        allowed &= torch.tril(torch.ones_like(allowed))
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                    attention_mask=allowed[None, None]).last_hidden_state
    expected = alone(model, seqs)
    for row, start, index in places:
        assert_close(out[row, start:start + len(seqs[index])], expected[index], atol=ATOL, rtol=0)


# -- clear errors -----------------------------------------------------------------------------------------
def test_xlnet_refuses_a_4d_mask_as_transformers_cannot_take_one():
    model = tiny("xlnet")
    ids = torch.randint(10, 90, (2, 6))
    with pytest.raises(ValueError, match="XLNet takes a \\(batch, seq_len\\) `attention_mask`.*cu_seq_lens_q"):
        model(input_ids=ids, attention_mask=torch.ones(2, 1, 6, 6, dtype=torch.bool))


def test_a_4d_mask_of_the_wrong_shape_is_refused():
    model = tiny("bert")
    with pytest.raises(ValueError, match=r"4-D `attention_mask` must have shape \(2, 1, 6, 6\)"):
        model(input_ids=torch.randint(10, 90, (2, 6)), attention_mask=torch.ones(2, 1, 6, 5, dtype=torch.bool))


@pytest.mark.parametrize("arch", ARCHS)
def test_an_unknown_keyword_names_the_public_class(arch):
    """The report: `PooledEncoderStack.forward() got an unexpected keyword argument`, an internal class."""
    model = tiny(arch, "sequence-classification")
    ids = torch.randint(10, 90, (1, 6))
    with pytest.raises(ValueError, match=rf"{type(model.model).__name__} does not take `cu_seq_len_q`"):
        model(input_ids=ids, cu_seq_len_q=torch.tensor([0, 6]))
    backbone = encoder_of(tiny(arch))
    with pytest.raises(TypeError, match=r"Xfmr\w+\.forward\(\) got unexpected keyword argument\(s\) `cu_seq_len_q`"):
        backbone(input_ids=ids, cu_seq_len_q=torch.tensor([0, 6]))


def test_bad_boundaries_are_refused_with_advice():
    model = tiny("bert")
    ids = torch.randint(10, 90, (1, 8))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="`cu_seq_lens_q` and `cu_seq_lens_k` differ"):
        model(input_ids=ids, cu_seq_lens_q=cu, cu_seq_lens_k=torch.tensor([0, 4, 8], dtype=torch.int32))
    with pytest.raises(ValueError, match="cu_seq_lens_q .* does not match the batch.*real tokens, 8"):
        model(input_ids=ids, cu_seq_lens_q=torch.tensor([0, 3, 7], dtype=torch.int32))
    with pytest.raises(ValueError, match="either a 4-D `attention_mask` or the boundaries"):
        model(input_ids=ids, cu_seqlens=cu, attention_mask=torch.ones(1, 1, 8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"`doc_ids` must be an integer tensor of shape \(1, 8\)"):
        model(input_ids=ids, doc_ids=torch.zeros(1, 7, dtype=torch.long))


def test_roberta_refuses_packed_positions_counted_from_0():
    """RoBERTa numbers positions from pad_token_id + 1: a packed batch numbered from 0 would shift every position
    embedding (transformers' own warning in DataCollatorWithFlattening's docs), so it is an error with the fix."""
    model = tiny("roberta")
    batch, _ = packed_batch("position_ids", sequences(model), tiny("bert"))  # numbered from 0
    with pytest.raises(ValueError, match="starts at position 0.*numbers positions from 2.*position_ids_start=2"):
        model(**batch)


@pytest.mark.parametrize("arch", [a.name for a in architectures() if a.config_class().is_encoder_decoder])
def test_encoder_decoders_refuse_packed_inputs_for_their_decoder(arch):
    model = tiny(arch, "seq2seq-lm")
    seqs = sequences(model)
    batch, _ = packed_batch("flash_kwargs", seqs, model)
    with pytest.raises(ValueError, match="got packed sequences.*decoder reads one target.*get_encoder"):
        model(**batch, labels=batch["input_ids"])


def test_xlnet_refuses_memory_with_packed_sequences():
    model = tiny("xlnet")
    batch, _ = packed_batch("flash_kwargs", sequences(model), model)
    mems = tuple(torch.zeros(3, 1, model.config.d_model) for _ in range(model.config.n_layer))
    with pytest.raises(ValueError, match="Packed sequences cannot read `mems`"):
        model(**batch, mems=mems)


def test_the_models_page_snippet_runs():
    run_checking_comments(snippet("DataCollatorWithFlattening(return_flash_attn_kwargs=True)", "docs/models.md"))
