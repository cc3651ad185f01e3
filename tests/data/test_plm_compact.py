"""PLM collator: per-row target budgets and the compact output (perm_ranks + target_positions) that
hf_xfmr's XLNet turns into the same masks as the expanded perm_mask / target_mapping."""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.data import DataCollatorForPLM
from hf_xfmr.layers.relative_xl import permutation_hidden

from .test_plm import make_examples


def test_each_row_gets_its_own_budget(xlnet_tok, texts):
    """511, 300 and 37 real tokens padded to 512: 85, 50 and 6 targets (not 85 for every row)."""
    collator = DataCollatorForPLM(xlnet_tok, seq_len=512, return_is_masked=True, seed=0)
    for draw in range(5):
        batch = collator(make_examples(xlnet_tok, texts, [511, 300, 37], seed=draw))
        counts = (batch["labels"] != -100).sum(1).tolist()
        assert counts == [85, 50, 6]
        assert batch["is_masked"].sum(1).tolist() == counts
        assert batch["labels"].shape == (3, 85)
        assert (batch["target_mapping"].sum((1, 2)) == torch.tensor(counts, dtype=torch.float32)).all()


def test_explicit_num_predict_is_the_cap(xlnet_tok, texts):
    collator = DataCollatorForPLM(xlnet_tok, seq_len=128, num_predict=12, return_is_masked=True, seed=1)
    batch = collator(make_examples(xlnet_tok, texts, [128, 90, 20], seed=0))
    assert batch["labels"].shape == (3, 12)
    assert (batch["labels"] != -100).sum(1).tolist() == [12, 12, 3]  # 128 // 6 = 21 capped; 90 // 6 = 15 capped


@pytest.mark.parametrize("settings", [dict(), dict(reuse_len=24), dict(reuse_len=24, perm_size=8),
                                      dict(bi_data=True)])
def test_compact_matches_expanded_masks(xlnet_tok, texts, settings):
    """The masks the model builds from the compact output equal the expanded perm_mask on every real row."""
    lengths = [64, 50, 64, 41]
    expanded = DataCollatorForPLM(xlnet_tok, seq_len=64, seed=7, **settings)
    compact = DataCollatorForPLM(xlnet_tok, seq_len=64, seed=7, compact=True, **settings)
    for draw in range(6):
        examples = make_examples(xlnet_tok, texts, lengths, seed=draw)
        e, c = expanded(examples), compact(examples)
        assert "perm_mask" not in c and "target_mapping" not in c
        for key in ("input_ids", "labels", "token_type_ids", "attention_mask"):
            assert torch.equal(e[key], c[key]), key
        ranks, positions = c["perm_ranks"], c["target_positions"]
        assert ranks.shape == (4, 64) and positions.shape == e["labels"].shape
        assert torch.equal(positions >= 0, e["labels"] != -100)
        assert torch.equal(e["target_mapping"].argmax(-1)[positions >= 0], positions[positions >= 0])
        hidden = permutation_hidden(ranks, ranks)  # (B, L, L)
        reuse = settings.get("reuse_len")
        if reuse:
            pos = torch.arange(64)
            hidden = hidden | ((pos < reuse)[:, None] & (pos >= reuse)[None, :])
        real = e["attention_mask"].bool()
        pad = ~real[:, None, :]
        for b in range(4):
            rows = real[b]
            assert torch.equal((hidden | pad)[b][rows], e["perm_mask"][b][rows]), b


def _lm_pair(vocab, **overrides):
    config = transformers.XLNetConfig(vocab_size=vocab, d_model=32, n_layer=2, n_head=4, d_inner=48, dropout=0.0,
                                      mem_len=None, pad_token_id=0, **overrides)
    torch.manual_seed(0)
    ref = transformers.XLNetLMHeadModel(config)
    return ref, hf_xfmr.from_transformers(ref)


@pytest.mark.parametrize("settings", [dict(), dict(reuse_len=24), dict(bi_data=True)])
def test_compact_gives_the_same_loss_and_grads_as_expanded(xlnet_tok, texts, settings):
    overrides = {k: v for k, v in settings.items() if k in ("reuse_len", "bi_data")}
    ref, ours = _lm_pair(len(xlnet_tok), **overrides)
    expanded = DataCollatorForPLM(xlnet_tok, seq_len=64, seed=3, **settings)
    compact = DataCollatorForPLM(xlnet_tok, seq_len=64, seed=3, compact=True, **settings)
    examples = make_examples(xlnet_tok, texts, [64, 45, 64, 30], seed=1)
    e, c = expanded(examples), compact(examples)
    ref.train(), ours.train()
    loss_ref = ref(**e).loss
    loss_e = ours(**e).loss
    ours_c = hf_xfmr.from_transformers(ref).train()
    loss_c = ours_c(**c).loss
    assert_close(loss_e, loss_ref, atol=1e-5, rtol=1e-5)
    assert_close(loss_c, loss_e, atol=1e-6, rtol=1e-6)
    loss_e.backward()
    loss_c.backward()
    for (name, p), (_, q) in zip(ours.named_parameters(), ours_c.named_parameters()):
        if p.grad is not None:
            assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_compact_needs_no_quadratic_tensor(xlnet_tok, texts):
    batch = DataCollatorForPLM(xlnet_tok, seq_len=512, compact=True, seed=0)(
        make_examples(xlnet_tok, texts, [512] * 8))
    assert max(t.numel() for t in batch.values()) <= 8 * 512


@pytest.mark.parametrize("missing", ["sep_token", "cls_token", "pad_token"])
def test_a_tokenizer_without_a_needed_special_token_is_named(xlnet_tok, missing):
    import copy

    tok = copy.deepcopy(xlnet_tok)
    setattr(tok, missing, None)
    assert getattr(tok, f"{missing}_id") is None
    with pytest.raises(ValueError, match=rf"needs a {missing} .*tokenizer\.add_special_tokens"):
        DataCollatorForPLM(tok)


def test_no_mask_token_is_needed(xlnet_tok, texts):
    """XLNet never replaces input tokens (the query stream starts from the learned mask embedding), so
    unlike transformers' collator ours does not ask for a mask token."""
    import copy

    tok = copy.deepcopy(xlnet_tok)
    tok.mask_token = None
    examples = make_examples(tok, texts, [64, 40])
    batch = DataCollatorForPLM(tok, seq_len=64, compact=True, seed=0)(examples)
    expected = DataCollatorForPLM(xlnet_tok, seq_len=64, compact=True, seed=0)(examples)
    for key in expected:
        assert torch.equal(batch[key], expected[key]), key


def _blocks(tok, texts, length, count):
    """Rows of `length` tokens cut from documents each followed by <sep> <cls> (run_plm's layout: the
    special tokens fall anywhere in a row)."""
    stream = []
    for text in texts:
        stream += tok(text, add_special_tokens=False)["input_ids"] + [tok.sep_token_id, tok.cls_token_id]
    return [{"input_ids": stream[i * length:(i + 1) * length]} for i in range(count)]


def test_random_budget_rounding_keeps_the_expected_rate(xlnet_tok, texts):
    """64 real tokens: "floor" always gives int(64 / 6) = 10 targets; "random" 10 or 11, 64 / 6 = 10.67 on
    average (what transformers' collator averages), in an output 11 wide; the masks stay leak-free."""
    floor = DataCollatorForPLM(xlnet_tok, seq_len=64, return_is_masked=True, seed=0)
    rounded = DataCollatorForPLM(xlnet_tok, seq_len=64, budget_rounding="random", return_is_masked=True, seed=0)
    counts = []
    for draw in range(40):
        examples = make_examples(xlnet_tok, texts, [64] * 8, seed=draw)
        f, r = floor(examples), rounded(examples)
        assert f["labels"].shape == (8, 10) and r["labels"].shape == (8, 11)
        assert (f["labels"] != -100).sum(1).tolist() == [10] * 8
        counts += (r["labels"] != -100).sum(1).tolist()
        assert torch.equal(r["is_masked"].sum(1), (r["labels"] != -100).sum(1))
        for b in range(8):  # no position sees a target's token, except later targets in the order
            t = r["is_masked"][b]
            assert r["perm_mask"][b][~t][:, t].all() and r["perm_mask"][b][t][:, t].diagonal().all()
    assert set(counts) == {10, 11}
    assert abs(sum(counts) / len(counts) - 64 / 6) < 0.1


def test_budget_rounding_is_checked(xlnet_tok):
    with pytest.raises(ValueError, match=r"budget_rounding must be one of \('floor', 'random'\), got 'up'"):
        DataCollatorForPLM(xlnet_tok, budget_rounding="up")


@pytest.mark.parametrize("compact", [False, True])
def test_without_token_type_ids_rows_are_one_segment(xlnet_tok, texts, compact):
    """return_token_type_ids=False: the same batch without `token_type_ids`, on rows whose <sep> <cls> fall
    anywhere; XLNet's loss is then the same as with all-zero segment ids (the segment term is constant
    along each attention row), and as transformers' XLNet without segment ids."""
    rows = _blocks(xlnet_tok, [t[:200] for t in texts], 64, 4)
    assert any(xlnet_tok.cls_token_id in r["input_ids"][:-1] for r in rows)
    with_types = DataCollatorForPLM(xlnet_tok, seq_len=64, compact=compact, seed=3)(rows)
    batch = DataCollatorForPLM(xlnet_tok, seq_len=64, compact=compact, return_token_type_ids=False, seed=3)(rows)
    assert "token_type_ids" not in batch and set(with_types) == set(batch) | {"token_type_ids"}
    for key in batch:
        assert torch.equal(batch[key], with_types[key]), key
    ref, ours = _lm_pair(len(xlnet_tok))
    ours.eval(), ref.eval()
    with torch.no_grad():
        loss = ours(**batch).loss
        zeros = ours(**batch, token_type_ids=torch.zeros_like(batch["input_ids"])).loss
        assert_close(zeros, loss, atol=1e-5, rtol=1e-5)
        if not compact:
            assert_close(ref(**batch).loss, loss, atol=1e-5, rtol=1e-5)
