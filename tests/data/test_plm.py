"""XLNet PLM collator: leak-freedom of perm_mask and the other invariants, on many seeded draws."""

import inspect

import pytest
import torch

from hf_xfmr.data import DataCollatorForPLM


def make_examples(tok, texts, lengths, seed=0):
    """XLNet pair examples `[A, <sep>, B, <sep>, <cls>]` of the given token lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = [i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"]]
    out, start = [], 0
    for n in lengths:
        body = n - 3
        start = int(torch.randint(0, len(ids) - body - 1, (1,), generator=g))
        chunk = ids[start:start + body]
        cut = int(torch.randint(1, body, (1,), generator=g)) if body > 1 else 1
        a, b = chunk[:cut], chunk[cut:]
        out.append({"input_ids": a + [tok.sep_token_id] + b + [tok.sep_token_id, tok.cls_token_id]})
    return out


def check_invariants(batch, num_predict, reuse_len=None, perm_dtype=torch.bool):
    ids, perm, tm, labels = batch["input_ids"], batch["perm_mask"], batch["target_mapping"], batch["labels"]
    real = batch["attention_mask"].bool()
    tgt = batch["is_masked"]
    B, L = ids.shape
    assert perm.shape == (B, L, L) and perm.dtype == perm_dtype
    assert tm.dtype == torch.float32
    assert tm.shape == (B, num_predict, L) and labels.shape == (B, num_predict)
    special = (ids[..., None] == torch.tensor([4, 5, 0])).any(-1)  # <cls>, <sep>, <pad> ids of our tokenizer
    assert not (tgt & special).any(), "special or pad tokens became targets"
    assert not (tgt & ~real).any()
    for b in range(B):
        t = torch.nonzero(tgt[b]).flatten()
        k = t.numel()
        cand = int((real[b] & ~special[b]).sum())
        budget = min(num_predict, max(1, int(real[b].sum()) // 6))  # each row's own budget (mask_alpha 6, beta 1)
        assert k == min(budget, cand)
        # target_mapping: one-hot rows at the targets in position order, then zero rows with label -100
        assert torch.equal(tm[b, :k].argmax(1), t)
        assert torch.equal(tm[b, :k].sum(1), torch.ones(k))
        assert tm[b, k:].abs().sum() == 0 and (labels[b, k:] == -100).all()
        assert torch.equal(labels[b, :k], ids[b, t])
        visible = perm[b] == 0  # (L, L): i may see j
        # nobody attends to padding
        assert not visible[:, ~real[b]].any()
        nontarget = real[b] & ~tgt[b]
        for i in torch.nonzero(real[b] & ~tgt[b]).flatten().tolist():
            if reuse_len is None or i >= reuse_len:
                assert torch.equal(visible[i], nontarget), "a non-target must see exactly the non-targets"
            else:
                assert torch.equal(visible[i], nontarget & (torch.arange(L) < reuse_len))
        # Among targets, 'i sees j' must be a strict total order: derive each target's rank from it.
        sub = visible[t][:, t]  # (k, k)
        assert not sub.diagonal().any(), "a target sees itself in the query stream"
        assert torch.equal(sub | sub.T, ~torch.eye(k, dtype=torch.bool)), "order must be total and antisymmetric"
        rank = sub.sum(1)  # number of earlier targets
        assert torch.equal(rank.sort().values, torch.arange(k)), "visibility among targets is not an order"
        for n, i in enumerate(t.tolist()):
            earlier = torch.zeros(L, dtype=torch.bool)
            earlier[t[rank < rank[n]]] = True
            expect = nontarget | earlier
            if reuse_len is not None and i < reuse_len:
                expect &= torch.arange(L) < reuse_len
            assert torch.equal(visible[i], expect), "visible set != non-targets + earlier targets"
        if reuse_len is not None:
            # every target of the reused block comes before every target of the second block
            first = t < reuse_len
            if first.any() and (~first).any():
                assert rank[first].max() < rank[~first].min()
            assert (perm[b, :reuse_len, reuse_len:] == 1).all(), "memory block must not see the next block"


@pytest.mark.parametrize("lengths,num_predict", [([64] * 4, 10), ([37, 37, 37], 6), ([101, 60, 23, 80], 16)])
def test_invariants_many_draws(xlnet_tok, texts, lengths, num_predict):
    assert xlnet_tok.convert_tokens_to_ids(["<pad>", "<cls>", "<sep>"]) == [0, 4, 5]
    collator = DataCollatorForPLM(xlnet_tok, num_predict=num_predict, return_is_masked=True, seed=1)
    for draw in range(15):
        batch = collator(make_examples(xlnet_tok, texts, lengths, seed=draw))
        check_invariants(batch, num_predict)


@pytest.mark.parametrize("perm_size", [None, 8])
def test_reuse_split_never_leaks(xlnet_tok, texts, perm_size):
    collator = DataCollatorForPLM(xlnet_tok, seq_len=64, num_predict=11, reuse_len=24, perm_size=perm_size,
                                  return_is_masked=True, seed=3)
    for draw in range(12):
        batch = collator(make_examples(xlnet_tok, texts, [64, 64, 50], seed=draw))
        check_invariants(batch, 11, reuse_len=24)
        # full rows: a budget of 64 // 6 = 10 (num_predict 11 is only the cap), split 10 * 24 // 64 / rest
        tgt = batch["is_masked"][:2]
        assert (tgt[:, :24].sum(1) == 3).all() and (tgt[:, 24:].sum(1) == 7).all()


def test_perm_size_chunks_keep_order(xlnet_tok, texts):
    collator = DataCollatorForPLM(xlnet_tok, num_predict=20, perm_size=16, return_is_masked=True, seed=0)
    for draw in range(10):
        batch = collator(make_examples(xlnet_tok, texts, [64, 64], seed=draw))
        check_invariants(batch, 20)
        for b in range(2):
            t = torch.nonzero(batch["is_masked"][b]).flatten()
            sub = batch["perm_mask"][b][t][:, t] == 0
            rank = sub.sum(1)
            chunk = t // 16
            for x in range(len(t)):
                for y in range(len(t)):
                    if chunk[x] < chunk[y]:
                        assert rank[x] < rank[y]


def test_exactly_num_predict_and_span_structure(xlnet_tok, texts):
    collator = DataCollatorForPLM(xlnet_tok, seq_len=512, num_predict=85, return_is_masked=True, seed=0)
    batch = collator(make_examples(xlnet_tok, texts, [512] * 8))
    assert ((batch["labels"] != -100).sum(1) == 85).all()
    assert batch["target_mapping"].shape == (8, 85, 512)
    tgt = batch["is_masked"]
    # Spans: many targets have a target neighbour (single random positions alone would rarely do).
    neighbour = tgt[:, 1:] & tgt[:, :-1]
    assert neighbour.sum() > 0.3 * tgt.sum()
    # Spans start at word starts: a run of targets rarely begins inside a word ('▁' marks a start).
    pieces = [xlnet_tok.convert_ids_to_tokens(r) for r in batch["input_ids"].tolist()]
    run_starts = tgt.clone()
    run_starts[:, 1:] &= ~tgt[:, :-1]
    at_word = sum(pieces[b][i].startswith("▁") for b, i in torch.nonzero(run_starts).tolist())
    runs = int(run_starts.sum())
    assert at_word > 0.6 * runs


def test_real_tokens_and_segments(xlnet_tok, texts):
    collator = DataCollatorForPLM(xlnet_tok, num_predict=8, seed=0)
    examples = make_examples(xlnet_tok, texts, [40, 33])
    batch = collator(examples)
    # content stream gets the real tokens (left padding, as XLNet's tokenizer pads)
    assert batch["input_ids"][0].tolist() == examples[0]["input_ids"]
    assert batch["input_ids"][1, 7:].tolist() == examples[1]["input_ids"]
    assert (batch["input_ids"] != xlnet_tok.mask_token_id).all()
    # token types as XLNet builds them: A + <sep> -> 0, B + <sep> -> 1, <cls> -> 2
    row = examples[0]["input_ids"]
    first_sep = row.index(xlnet_tok.sep_token_id)
    tt = batch["token_type_ids"][0].tolist()
    assert tt == [0] * (first_sep + 1) + [1] * (len(row) - first_sep - 2) + [2]
    enc = xlnet_tok("Hello world. More text", "Second part")
    b2 = collator([{"input_ids": enc["input_ids"]}])
    assert b2["token_type_ids"][0].tolist() == enc["token_type_ids"]


def test_seed_reproduces_and_differs(xlnet_tok, texts):
    ex = make_examples(xlnet_tok, texts, [64, 51, 64])
    a = DataCollatorForPLM(xlnet_tok, num_predict=10, seed=7)(ex)
    b = DataCollatorForPLM(xlnet_tok, num_predict=10, seed=7)(ex)
    c = DataCollatorForPLM(xlnet_tok, num_predict=10, seed=8)(ex)
    g = DataCollatorForPLM(xlnet_tok, num_predict=10, generator=torch.Generator().manual_seed(7))(ex)
    for k in a:
        assert torch.equal(a[k], b[k]) and torch.equal(a[k], g[k])
    assert not torch.equal(a["perm_mask"], c["perm_mask"])


def test_bi_data_reverses_second_half(xlnet_tok, texts):
    ex = make_examples(xlnet_tok, texts, [40])
    collator = DataCollatorForPLM(xlnet_tok, num_predict=6, bi_data=True, return_is_masked=True, seed=0)
    batch = collator(ex + ex)
    row = ex[0]["input_ids"]
    sep = row.index(xlnet_tok.sep_token_id)
    a, b = row[:sep], row[sep + 1:-2]
    assert batch["input_ids"][1].tolist() == a[::-1] + [row[sep]] + b[::-1] + row[-2:]
    assert batch["input_ids"][0].tolist() == row
    check_invariants(batch, 6)
    with pytest.raises(ValueError, match="even batch"):
        collator(ex)


def test_model_consumes_batch_without_leaks(xlnet_tok, texts):
    """Functional leak test on transformers' XLNetLMHeadModel: changing a target's token changes
    no prediction of itself or of targets earlier in the order, and no pad token matters."""
    from transformers import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(0)
    cfg = XLNetConfig(vocab_size=len(xlnet_tok), d_model=32, n_layer=2, n_head=2, d_inner=64,
                      pad_token_id=xlnet_tok.pad_token_id)
    model = XLNetLMHeadModel(cfg).eval()
    accepted = set(inspect.signature(model.forward).parameters)
    collator = DataCollatorForPLM(xlnet_tok, num_predict=6, return_is_masked=True, seed=5)
    batch = collator(make_examples(xlnet_tok, texts, [30, 24]))
    inputs = {k: v for k, v in batch.items() if k != "is_masked"}
    assert set(inputs) <= accepted
    with torch.no_grad():
        out = model(**inputs)
        assert torch.isfinite(out.loss)
        base = out.logits
        for b in range(2):
            t = torch.nonzero(batch["is_masked"][b]).flatten()
            sub = batch["perm_mask"][b][t][:, t] == 0
            rank = sub.sum(1)
            for n, pos in enumerate(t.tolist()):
                changed = {k: v.clone() for k, v in inputs.items()}
                changed["input_ids"][b, pos] = (changed["input_ids"][b, pos] + 17) % len(xlnet_tok)
                logits = model(**changed).logits
                same = rank <= rank[n]  # itself and every earlier target
                k = len(t)  # the row's own budget: slots k.. are unused
                torch.testing.assert_close(logits[b, :k][same], base[b, :k][same])
                assert not torch.allclose(logits[b, :k][~same], base[b, :k][~same]) or (~same).sum() == 0
        pads = batch["attention_mask"] == 0
        changed = {k: v.clone() for k, v in inputs.items()}
        changed["input_ids"][pads] = 7
        torch.testing.assert_close(model(**changed).logits, base)


def test_dataloader_over_datasets(xlnet_tok, texts):
    import datasets

    ex = make_examples(xlnet_tok, texts, [40, 31, 25, 40, 19, 33])
    ds = datasets.Dataset.from_list(ex)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=DataCollatorForPLM(xlnet_tok, seed=0))
    batches = list(loader)
    assert len(batches) == 2 and batches[0]["perm_mask"].shape[0] == 3


def test_bad_inputs(xlnet_tok, gpt_tok, texts):
    with pytest.raises(ValueError, match="num_predict=300 is larger than possible"):
        DataCollatorForPLM(xlnet_tok, seq_len=128, num_predict=300)
    with pytest.raises(ValueError, match="sep_token"):
        DataCollatorForPLM(gpt_tok)
    collator = DataCollatorForPLM(xlnet_tok, num_predict=50)
    with pytest.raises(ValueError, match="larger than possible"):
        collator(make_examples(xlnet_tok, texts, [20]))
    with pytest.raises(ValueError, match="too short"):
        DataCollatorForPLM(xlnet_tok, num_predict=1)([{"input_ids": [xlnet_tok.sep_token_id, xlnet_tok.cls_token_id]}])
    with pytest.raises(ValueError, match="empty batch"):
        collator([])
    with pytest.raises(ValueError, match="perm_size"):
        DataCollatorForPLM(xlnet_tok, seq_len=64, reuse_len=32, perm_size=48)
    with pytest.raises(ValueError, match="reuse_len"):
        DataCollatorForPLM(xlnet_tok, seq_len=64, reuse_len=64)
    with pytest.raises(ValueError, match="fixed length"):
        DataCollatorForPLM(xlnet_tok, seq_len=16, num_predict=2)(make_examples(xlnet_tok, texts, [20]))


def test_perm_mask_dtype_bool_default_float_option(xlnet_tok, texts):
    ex = make_examples(xlnet_tok, texts, [64, 51, 64])
    a = DataCollatorForPLM(xlnet_tok, num_predict=10, reuse_len=32, return_is_masked=True, seed=4)(ex)
    f = DataCollatorForPLM(xlnet_tok, num_predict=10, reuse_len=32, return_is_masked=True, seed=4,
                           perm_mask_dtype=torch.float32)(ex)
    assert a["perm_mask"].dtype == torch.bool and f["perm_mask"].dtype == torch.float32
    assert torch.equal(a["perm_mask"].float(), f["perm_mask"])
    for k in a:
        if k != "perm_mask":
            assert torch.equal(a[k], f[k])
    check_invariants(f, 10, reuse_len=32, perm_dtype=torch.float32)
    with pytest.raises(ValueError, match="perm_mask_dtype"):
        DataCollatorForPLM(xlnet_tok, perm_mask_dtype=torch.long)


@pytest.mark.parametrize("lengths", [[64, 64, 64], [64, 37, 51]])
def test_input_kinds_give_identical_batches(xlnet_tok, texts, lengths):
    """Lists (struct fast path / ragged padding), tuples, numpy arrays, tensors and bare id rows: same batch."""
    import numpy as np

    ex = make_examples(xlnet_tok, texts, lengths, seed=2)
    ids = [e["input_ids"] for e in ex]
    variants = {
        "lists": [{"input_ids": r} for r in ids],
        "tuples": [{"input_ids": tuple(r)} for r in ids],
        "numpy": [{"input_ids": np.array(r)} for r in ids],
        "numpy32": [{"input_ids": np.array(r, dtype=np.int32)} for r in ids],
        "tensors": [{"input_ids": torch.tensor(r)} for r in ids],
        "bare": [list(r) for r in ids],
    }
    out = {k: DataCollatorForPLM(xlnet_tok, num_predict=9, return_is_masked=True, seed=11)(v)
           for k, v in variants.items()}
    for k, batch in out.items():
        for key in out["lists"]:
            assert torch.equal(batch[key], out["lists"][key]), (k, key)
    check_invariants(out["lists"], 9)


def test_pad_ragged_numpy_paths_agree():
    import numpy as np

    from hf_xfmr.data.collation import _list_rows_to_array, pad_ragged, pad_ragged_numpy

    rows = [[5, 6, 7, 2**40], [1, 2, 3, 4]]
    assert np.array_equal(_list_rows_to_array(rows, 2, 4, np.int64), np.array(rows))
    assert np.array_equal(_list_rows_to_array([[1.0, 2.7]], 1, 2, np.int64), np.array([[1, 2]]))  # numpy fallback
    with pytest.raises(TypeError):
        _list_rows_to_array([[1, None]], 1, 2, np.int64)
    for left in (False, True):
        ragged = [[1, 2, 3], [4], [5, 6]]
        out, real = pad_ragged_numpy(ragged, 0, length=4, left=left)
        expect = [[0] * (4 - len(r)) + r if left else r + [0] * (4 - len(r)) for r in ragged]
        assert out.tolist() == expect and real.tolist() == [[v != 0 for v in r] for r in expect]
        t, tr = pad_ragged([torch.tensor(r) for r in ragged], 0, length=4, left=left)
        assert t.tolist() == expect and torch.equal(tr, torch.from_numpy(real))


def test_bool_perm_mask_is_bit_identical_in_xlnet(xlnet_tok, texts):
    from transformers import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(0)
    cfg = XLNetConfig(vocab_size=len(xlnet_tok), d_model=32, n_layer=2, n_head=2, d_inner=64,
                      pad_token_id=xlnet_tok.pad_token_id)
    model = XLNetLMHeadModel(cfg).eval()
    batch = DataCollatorForPLM(xlnet_tok, num_predict=6, seed=5)(make_examples(xlnet_tok, texts, [30, 24]))
    with torch.no_grad():
        a = model(**batch).logits
        b = model(**{**batch, "perm_mask": batch["perm_mask"].float()}).logits
    assert torch.equal(a, b)
