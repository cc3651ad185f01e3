"""CLM packing (remainder carried, boundary isolation) and best-fit packing for encoders."""

import pytest
import torch

from hf_xfmr.data import (
    DataCollatorForCLM,
    DataCollatorForMLM,
    PackedCLMDataset,
    best_fit_bins,
    block_diagonal_mask,
    collate_packed,
    pack_documents,
    pack_stream,
    packing_efficiency,
)

EOS = 99


def docs_of(lengths, start=1000):
    out, v = [], start
    for n in lengths:
        out.append(list(range(v, v + n)))
        v += n
    return out


@pytest.mark.parametrize("seq_len", [7, 16, 50])
def test_pack_stream_carries_remainder(seq_len):
    docs = docs_of([3, 20, 1, 9, 0, 33, 5])
    rows = list(pack_stream(docs, seq_len, EOS))
    flat = [t for r in rows for t in r["input_ids"]]
    expected = [t for d in docs for t in d + [EOS]]
    assert flat == expected, "every token, in order, nothing dropped"
    assert all(len(r["input_ids"]) == seq_len for r in rows[:-1]) and 0 < len(rows[-1]["input_ids"]) <= seq_len
    for r in rows:  # positions restart at each row start and after each EOS
        ids, pos = r["input_ids"], r["position_ids"]
        assert pos[0] == 0
        for i in range(1, len(ids)):
            assert pos[i] == (0 if ids[i - 1] == EOS else pos[i - 1] + 1)
    dropped = list(pack_stream(docs, seq_len, EOS, drop_last=True))
    assert all(len(r["input_ids"]) == seq_len for r in dropped) and len(dropped) == len(flat) // seq_len
    with pytest.raises(ValueError, match="empty"):
        list(pack_stream([], 8, EOS))


def test_clm_collator_isolation(gpt_tok):
    docs = docs_of([5, 3, 9, 2], start=10)
    rows = list(pack_stream(docs, 12, gpt_tok.eos_token_id))
    plain = DataCollatorForCLM(gpt_tok)(rows)
    real = plain["attention_mask"].bool()
    assert torch.equal(plain["labels"][real], plain["input_ids"][real]) and (plain["labels"][~real] == -100).all()
    iso = DataCollatorForCLM(gpt_tok, isolate_documents=True, return_cu_seqlens=True)(rows)
    assert torch.equal(iso["position_ids"][real], torch.tensor([p for r in rows for p in r["position_ids"]]))
    mask = iso["attention_mask"][:, 0]  # (B, L, L)
    B, L = iso["input_ids"].shape
    doc = torch.cumsum(iso["position_ids"] == 0, 1)
    for b in range(B):
        for i in range(L):
            for j in range(L):
                if real[b, i] and real[b, j]:
                    assert bool(mask[b, i, j]) == (j <= i and doc[b, i] == doc[b, j])
                elif i != j:
                    assert not mask[b, i, j]
    starts = (iso["position_ids"] == 0) & real
    assert (iso["labels"][starts] == -100).all()
    assert torch.equal(iso["cu_seqlens"][1:] - iso["cu_seqlens"][:-1],
                       torch.tensor([6, 4, 2, 8, 3]).int())  # doc 3 is split 2 + 8 across rows


@pytest.mark.parametrize("attn,mask_dtype", [("sdpa", None), ("eager", torch.float32)])
def test_isolated_rows_match_separate_documents(gpt_tok, attn, mask_dtype):
    """With a block-diagonal mask and reset positions, a packed row gives each document the logits
    it gets alone (transformers GPT2: bool mask for sdpa, additive float mask for eager)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(gpt_tok), n_embd=32, n_layer=2, n_head=2, n_positions=64)).eval()
    model.set_attn_implementation(attn)
    docs = docs_of([5, 7, 4], start=3)
    eos = gpt_tok.eos_token_id
    row = list(pack_stream(docs, 64, eos))
    assert len(row) == 1
    batch = DataCollatorForCLM(gpt_tok, isolate_documents=True, mask_dtype=mask_dtype)(row)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits[0]
        offset = 0
        for d in docs:
            alone = model(input_ids=torch.tensor([d + [eos]])).logits[0]
            torch.testing.assert_close(packed[offset:offset + len(d) + 1], alone, atol=1e-5, rtol=1e-4)
            offset += len(d) + 1


def test_packed_clm_dataset(gpt_tok, texts):
    ds = PackedCLMDataset(texts[:10], gpt_tok, seq_len=64)
    rows = list(ds)
    n_tokens = sum(len(x) + 1 for x in gpt_tok(texts[:10], add_special_tokens=False)["input_ids"])
    assert sum(len(r["input_ids"]) for r in rows) == n_tokens
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=DataCollatorForCLM(gpt_tok))
    assert next(iter(loader))["input_ids"].shape == (4, 64)


def test_best_fit_small_and_no_split():
    assert sorted(map(sorted, best_fit_bins([5, 4, 3, 3, 1], 8))) == [[0, 2], [1, 3, 4]]
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 200, (300,), generator=g).tolist()
    bins = best_fit_bins(lengths, 256)
    members = sorted(i for b in bins for i in b)
    assert members == list(range(300)), "every document exactly once"
    assert all(sum(lengths[i] for i in b) <= 256 for b in bins)
    lower = -(-sum(lengths) // 256)
    assert len(bins) <= lower * 1.06 + 1
    with pytest.raises(ValueError, match="longer than max_len"):
        best_fit_bins([10, 300], 256)


def test_pack_documents_and_collate(bert_tok, texts):
    enc = bert_tok(texts, truncation=True, max_length=128)["input_ids"]
    rows = pack_documents(enc, 128)
    eff = packing_efficiency(rows, 128)
    naive = sum(map(len, enc)) / (len(enc) * 128)
    assert eff > 0.9 and eff > naive
    # no document split: each row is a concatenation of whole documents
    for r in rows:
        assert r["input_ids"] == [t for i in r["doc_index"] for t in enc[i]]
    batch = collate_packed(rows[:4], bert_tok.pad_token_id)
    lens = [n for r in rows[:4] for n in r["seq_lens"]]
    cu = batch["cu_seqlens"]
    assert cu[-1] == batch["attention_mask"].sum() and torch.equal((cu[1:] - cu[:-1]).long(), torch.tensor(lens))
    mask = block_diagonal_mask(batch["doc_ids"])
    assert mask.shape[-1] == batch["input_ids"].shape[1]
    mlm = DataCollatorForMLM(bert_tok, seed=0, return_cu_seqlens=True)(rows[:4])
    assert torch.equal(mlm["cu_seqlens"], cu) and torch.equal(mlm["position_ids"], batch["position_ids"])
    with pytest.raises(ValueError, match="empty"):
        pack_documents([], 128)


def test_clm_bad_inputs(bert_tok):
    class NoTokens:
        pad_token_id = None
        eos_token_id = None

    with pytest.raises(ValueError, match="pad_token or tokenizer.eos_token"):
        DataCollatorForCLM(NoTokens())
    with pytest.raises(ValueError, match="eos_token"):
        DataCollatorForCLM(bert_tok, isolate_documents=True)
