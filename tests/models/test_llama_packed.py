"""Padding-free batches on the Llama family, CPU, sdpa and eager, unpadded and padded: a flattened batch equals
its sequences run one by one, in all three ways the ecosystem passes one (transformers' `DataCollatorWithFlattening`
with restarting `position_ids` alone or with its `cu_seq_lens_*` keywords, and hf_xfmr's `collate_packed` with
`cu_seqlens`); Mistral's sliding window (4) applies within each sequence; the LM loss and every gradient of the
packed batch equal those of the sequences run alone. The variants' transformers twins would attend across the
packed sequences here (they keep them apart only under FlashAttention)."""

import pytest
import torch
from torch.testing import assert_close
from transformers import DataCollatorWithFlattening

from hf_xfmr.data import collate_packed, pack_documents

from ._llama import PAD, padded_batch, pair

LENGTHS = (7, 4, 9, 3, 5)
ATOL = 1e-5
SOURCES = ["position_ids", "flash_kwargs", "collate_packed"]


def sequences(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 99, (n,), generator=g).tolist() for n in LENGTHS]


def packed_batch(source, seqs):
    """(batch, places): `seqs` packed in the form `source` names, and where each sits: (row, start, index)."""
    if source == "collate_packed":
        rows = pack_documents(seqs, 16)
        places = []
        for r, row in enumerate(rows):
            starts = [sum(row["seq_lens"][:k]) for k in range(len(row["seq_lens"]))]
            places += [(r, start, index) for start, index in zip(starts, row["doc_index"])]
        batch = collate_packed(rows, PAD)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        batch["labels"][batch["position_ids"] == 0] = -100  # no sequence predicts the next one's first token
        return batch, places
    options = {"position_ids": {}, "flash_kwargs": dict(return_flash_attn_kwargs=True)}[source]
    batch = DataCollatorWithFlattening(**options)([{"input_ids": s} for s in seqs])
    starts = [sum(len(s) for s in seqs[:k]) for k in range(len(seqs))]
    return batch, [(0, start, index) for index, start in enumerate(starts)]


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("variant", ["llama-gqa", "mistral"])
def test_a_flattened_batch_equals_its_sequences_alone(variant, source, attn, unpad):
    _, model = pair(variant, attn=attn)
    model.config.unpad_inputs = unpad
    seqs = sequences()
    batch, places = packed_batch(source, seqs)
    batch.pop("labels")
    with torch.no_grad():
        out = model(**batch).logits
        expected = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
    for row, start, index in places:
        assert_close(out[row, start:start + len(seqs[index])], expected[index], atol=ATOL, rtol=0)


def test_the_reference_attends_across_packed_sequences_which_ours_does_not():
    """What the tests above guard against: transformers' SDPA Mistral mixes the packed sequences."""
    ref, ours = pair("mistral")
    seqs = sequences()
    batch, places = packed_batch("position_ids", seqs)
    batch.pop("labels")
    with torch.no_grad():
        theirs = ref(**batch).logits
        alone = ref(input_ids=torch.tensor([seqs[1]])).logits[0]
        assert_close(ours(**batch).logits[0, 7:11], alone, atol=ATOL, rtol=0)
    assert not torch.allclose(theirs[0, 7:11], alone, atol=1e-3)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("variant", ["llama-gqa", "mistral", "qwen2"])
def test_packed_lm_loss_and_gradients_equal_the_sequences_run_alone(variant, source):
    _, packed = pair(variant)
    _, single = pair(variant)
    packed.train(), single.train()
    seqs = sequences()
    batch, _ = packed_batch(source, seqs)
    packed(**batch).loss.backward()
    # the mean over every predicted token of every sequence: summed losses over their count
    total = sum(single(input_ids=torch.tensor([s]), labels=torch.tensor([s])).loss * (len(s) - 1) for s in seqs)
    count = sum(len(s) - 1 for s in seqs)
    (total / count).backward()
    with torch.no_grad():
        assert_close(packed(**batch).loss, (total / count).detach(), atol=ATOL, rtol=ATOL)
    for (name, p), q in zip(packed.named_parameters(), single.parameters()):
        assert_close(p.grad, q.grad, atol=ATOL, rtol=ATOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("variant", ["llama-gqa", "mistral"])
def test_the_gpu_layout_gives_the_same_outputs(variant, monkeypatch):
    """Off the CPU the unpadded sequences go through attention as one masked call over the sequences padded to
    the longest (`VarlenBatch.dense_index`); forced here on the CPU: the causal window mask is ANDed into its mask."""
    from functools import partial

    from hf_xfmr.models.llama import modeling_llama

    _, model = pair(variant)
    ids, mask = padded_batch(left=True)
    batch, _ = packed_batch("flash_kwargs", sequences())
    batch.pop("labels")
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits, model(**batch).logits
        monkeypatch.setattr(modeling_llama, "encoder_padding", partial(modeling_llama.encoder_padding, dense=True))
        got = model(input_ids=ids, attention_mask=mask).logits, model(**batch).logits
    for a, b in zip(got, expected):
        assert_close(a, b, atol=ATOL, rtol=0)
