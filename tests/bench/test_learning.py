"""The learning-parity benchmark (`hf_xfmr.bench.learning`, `benchmarks/learning_parity.py`): its structure on
a tiny run of every case (both sides, both evaluation sets, the reports), the evaluation sets it builds, and
scoring with memory. No learning thresholds here: the figures are in docs/learning_parity.md."""

import json
import math

import pytest
import torch

from hf_xfmr.bench import learning
from hf_xfmr.bench.learning import CASES, EVAL_SETS, EvalSet, LearningSettings

TINY = LearningSettings(steps=2, batch_size=4, seq_len=32, hidden=32, layers=1, heads=2, ffn=64, vocab_size=400,
                        eval_at=(1, 2), max_documents=30, max_eval_examples=8)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return learning.run_benchmark(list(CASES), TINY, tmp_path_factory.mktemp("learning"), seeds=(0,),
                                  log=lambda *_: None)


def test_every_case_runs_both_sides_on_both_evaluation_sets(results):
    assert [c["case"] for c in results["cases"]] == ["mlm", "plm", "clm"]
    assert results["settings"]["steps"] == 2 and results["seeds"] == [0]
    for case in results["cases"]:
        assert sorted(r["side"] for r in case["runs"]) == ["ours", "reference"]
        assert set(case["eval_targets"]) == set(EVAL_SETS) and min(case["eval_targets"].values()) > 0
        for run in case["runs"]:
            assert run["steps"] == [1, 2] and run["seed"] == 0
            assert set(run["eval_loss"]) == set(EVAL_SETS)
            for losses in run["eval_loss"].values():
                assert len(losses) == 2 and all(math.isfinite(v) and v > 0 for v in losses)
            assert run["train_loss"] and run["seconds"] > 0
        last = {r["side"]: r["eval_loss"]["reference"][-1] for r in case["runs"]}
        assert learning.gaps(case, "reference") == {0: pytest.approx(last["ours"] - last["reference"])}


def test_reports_hold_the_table_the_plot_and_the_json(results, tmp_path):
    paths = learning.write_reports(results, tmp_path)
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(results))
    table = paths["markdown"].read_text()
    for case in ("MLM", "PLM", "CLM"):
        assert f"**{case}**" in table
    assert table.count("\n| 1 |") == 3 and table.count("\n| 2 |") == 3
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def plm_data(tmp_path_factory):
    return learning.prepare(CASES["plm"], TINY, tmp_path_factory.mktemp("plm"))


def test_evaluation_sets_are_each_pipelines_own_batches(plm_data):
    """reference: transformers' collator on run_plm blocks (identity target_mapping, <mask> at the targets);
    ours: `pretrain`'s held-out examples and masks, expanded to perm_mask / target_mapping."""
    from hf_xfmr.training import get_objective
    from hf_xfmr.training.objectives import ObjectiveSettings

    tok, L = plm_data.tokenizer, TINY.seq_len
    ref = plm_data.eval_sets["reference"][0]
    assert ref["target_mapping"].shape[1:] == (L, L) and torch.equal(ref["target_mapping"][0], torch.eye(L))
    assert (ref["input_ids"][ref["labels"] != -100] == tok.mask_token_id).all()
    ours = plm_data.eval_sets["ours"][0]
    assert ours["perm_mask"].shape[1:] == (L, L) and "perm_ranks" not in ours
    # the same draws as the compact batches `pretrain` evaluates with
    objective = get_objective("plm")
    compact = objective.make_collator(tok, ObjectiveSettings(max_seq_length=L))
    from datasets import Dataset

    from hf_xfmr.training.batches import build_examples, eval_batches

    examples = build_examples(objective, tok, Dataset.from_dict({"text": plm_data.eval_texts}),
                              ObjectiveSettings(max_seq_length=L))
    first, _ = eval_batches(examples, TINY.batch_size, 1, 0, compact, TINY.eval_seed, TINY.max_eval_examples)[0]
    assert torch.equal(first["labels"], ours["labels"]) and torch.equal(first["input_ids"], ours["input_ids"])
    assert torch.equal(first["target_positions"], ours["target_mapping"].argmax(-1).masked_fill(
        ours["target_mapping"].sum(-1) == 0, -1))


def test_memory_evaluation_carries_each_rows_memory(plm_data):
    """`stream_batches` lays the held-out examples out as per-row streams; an `EvalSet` with memory passes
    each batch the `mems` of the one before, as the model returned them."""
    from hf_xfmr.models.xlnet import XfmrXLNetConfig, XfmrXLNetLMHeadModel
    from hf_xfmr.training import get_objective

    L, R = TINY.seq_len, TINY.seq_len // 2
    batches = learning.our_eval_set(plm_data, get_objective("plm-mem"), streams=True)
    assert len(batches) >= 2
    for prev, cur in zip(batches, batches[1:]):  # row s of batch j + 1 starts reuse_len tokens after row s of j
        assert torch.equal(cur["input_ids"][:, :4], prev["input_ids"][:, R:R + 4])
    torch.manual_seed(0)
    model = XfmrXLNetLMHeadModel(XfmrXLNetConfig(vocab_size=len(plm_data.tokenizer), d_model=32, n_layer=1, n_head=2,
                                                 d_inner=64, reuse_len=R, mem_len=R, pad_token_id=0)).eval()
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("mems")), with_kwargs=True)
    with_memory = learning.held_out_loss(model, EvalSet(batches, memory=True))
    assert seen[0] is None and all(m is not None and m[0].shape == (R, TINY.batch_size, 32) for m in seen[1:])
    seen.clear()
    without = learning.held_out_loss(model, batches)
    assert all(m is None for m in seen) and with_memory != without
    with torch.no_grad():  # the weighted mean of the batch losses, memory carried by hand
        total, n, mems = 0.0, 0, None
        for batch in batches:
            out = model(**batch, mems=mems, use_mems=True)
            k = int((batch["labels"] != -100).sum())
            total, n, mems = total + float(out.loss) * k, n + k, out.mems
    assert with_memory == pytest.approx(total / n)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="eval_at must name steps in"):
        LearningSettings(steps=10, eval_at=(20,))
    with pytest.raises(ValueError, match="Unknown learning case"):
        learning.run_benchmark(["xlm"], TINY, "unused")
