"""The side-by-side benchmark harness: timing structure, statistics, reports, memory in a child process,
the case registry, and every registered model case run at tiny sizes."""

import json
import math
import os

import pytest
import torch

from hf_xfmr import bench
from hf_xfmr.bench import (
    SIDES,
    BenchCase,
    SideStats,
    make_case,
    measure_case,
    peak_memory,
    time_case,
    to_json,
    to_markdown,
)
from hf_xfmr.bench.toy import ToyMLP

def _counting_case(repeats_ours=1, repeats_ref=1, mode="train"):
    """A toy case that keeps its two models, so tests can look at them after timing."""
    built = {}

    def build_pair():
        ours, ref = ToyMLP(16, repeats_ours), ToyMLP(16, repeats_ref)
        ref.load_state_dict(ours.state_dict())
        built.update(ours=ours, ref=ref, initial=ours.proj.weight.detach().clone())
        return ours, ref

    case = BenchCase("counting", build_pair, lambda: {"x": torch.randn(4, 16)}, mode=mode)
    return case, built


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_time_case_interleaves_and_excludes_warmup(mode):
    case, built = _counting_case(mode=mode)
    result = time_case(case, repeats=4, warmup=3, threads=1)
    assert result.order == ["ours", "ref"] * 4
    assert len(result.ours.times_ms) == len(result.ref.times_ms) == 4
    assert result.warmup == 3 and result.repeats == 4 and result.threads == 1
    # every step (warm-up included) ran once per side; only the timed ones are in the statistics. Ours ran one
    # more, untimed, after them: the step whose FLOPs are counted
    assert built["ours"].calls == 3 + 4 + 1 and built["ref"].calls == 3 + 4
    assert result.flops > 0
    assert time_case(_counting_case(mode=mode)[0], repeats=1, warmup=0, threads=1, count_flops=False).flops is None


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_time_case_restores_threads_and_steps_the_optimizer(mode):
    case, built = _counting_case(mode=mode)
    before = torch.get_num_threads()
    time_case(case, repeats=2, warmup=1, threads=1)
    assert torch.get_num_threads() == before
    ours = built["ours"]
    assert ours.proj.weight.grad is None  # train: zero_grad(set_to_none=True) after each step
    changed = not torch.equal(ours.proj.weight, built["initial"])
    assert changed is (mode == "train")


@pytest.mark.parametrize("slow_side", ["ours", "ref"])
def test_speed_ratio_direction(slow_side):
    # One side applies the same Linear 8 times, the other once: no timing threshold beyond the direction.
    repeats = {"ours_repeat": 8, "ref_repeat": 1} if slow_side == "ours" else {"ours_repeat": 1, "ref_repeat": 8}
    case = make_case("toy-mlp", dim=256, batch=256, **repeats)
    result = time_case(case, repeats=5, warmup=1, threads=1)
    assert math.isfinite(result.speed_ratio) and result.speed_ratio > 0
    assert result.speed_ratio == pytest.approx(result.ref.median_ms / result.ours.median_ms)
    assert (result.speed_ratio < 1) if slow_side == "ours" else (result.speed_ratio > 1)


def test_side_stats():
    stats = SideStats.from_seconds([0.001, 0.002, 0.003, 0.004, 0.010])
    assert stats.median_ms == pytest.approx(3.0)
    assert (stats.min_ms, stats.max_ms) == pytest.approx((1.0, 10.0))
    assert stats.iqr_ms == pytest.approx(4.0 - 2.0)
    assert stats.mean_ms == pytest.approx(4.0)
    single = SideStats.from_seconds([0.005])
    assert single.iqr_ms == single.stdev_ms == 0.0 and single.median_ms == pytest.approx(5.0)


def test_bench_case_validates_mode():
    with pytest.raises(ValueError, match="mode"):
        BenchCase("bad", lambda: None, dict, mode="eval")


def test_make_case_unknown_name():
    with pytest.raises(KeyError, match="unknown benchmark case 'nope'"):
        make_case("nope")


def test_markdown_and_json(tmp_path):
    result = time_case(make_case("toy-mlp", dtype="bf16"), repeats=2, warmup=0, threads=1)
    result.memory = {"ours": {"peak_mb": 50.0}, "ref": {"peak_mb": 100.0}}
    table = to_markdown([result])
    header = table.splitlines()[0]
    for column in ["case", "mode", "dtype", "ours ms", "ref ms", "speed ratio", "ours peak MB", "ref peak MB", "memory ratio"]:
        assert f" {column} " in header
    row = table.splitlines()[2]
    assert row.startswith("| toy-mlp | train | bf16 autocast |")
    assert f"| {result.speed_ratio:.2f}x |" in row and row.endswith("| 50 | 100 | 2.00x | — |")
    result.memory = {"ours": {"peak_mb": 50.0, "process_peak_mb": 300.0},
                     "ref": {"peak_mb": 100.0, "process_peak_mb": 600.0}}
    assert result.process_memory_ratio == 0.5
    assert to_markdown([result]).splitlines()[2].endswith("| 50 | 100 | 2.00x | 300 / 600 (0.50x) |")
    result.memory = {"ours": {"peak_mb": 50.0}, "ref": {"peak_mb": 100.0}}
    assert "ref / ours" in table  # the legend says which way the ratios go

    payload = to_json([result], tmp_path / "out" / "models.json", suite="quick")
    on_disk = json.loads((tmp_path / "out" / "models.json").read_text())
    assert on_disk == json.loads(json.dumps(payload))
    env = on_disk["environment"]
    assert env["torch"] == torch.__version__
    assert env["transformers"] and env["timestamp"] and env["threads"] == 1
    assert on_disk["suite"] == "quick"
    (row,) = on_disk["results"]
    assert row["case"] == "toy-mlp" and row["memory_ratio"] == 2.0 and len(row["ours"]["times_ms"]) == 2
    assert row["params"] == {"dtype": "bf16"}
    assert not list((tmp_path / "out").glob("*.tmp"))
    # rows may also be given as the dicts read back from JSON
    assert to_markdown(on_disk["results"]) == table


def test_markdown_without_memory():
    result = time_case(make_case("toy-mlp"), repeats=1, warmup=0, threads=1)
    assert to_markdown([result]).splitlines()[2].endswith("| — | — | — |")


@pytest.mark.parametrize("process", ["forkserver", "subprocess"])
def test_peak_memory_in_separate_processes(process):
    # ours keeps 8 activations of 512 x 1024 floats (2 MiB each) for backward, ref keeps 2.
    case = make_case("toy-mlp", dim=1024, batch=512, ours_repeat=4, ref_repeat=1)
    results = {side: peak_memory(case, side, threads=1, process=process) for side in SIDES}
    assert results["ours"].pid != os.getpid() != results["ref"].pid
    assert results["ours"].pid != results["ref"].pid
    for side, result in results.items():
        assert result.side == side and result.peak_mb > 0 and result.baseline_mb > 0
        if os.path.exists("/proc/self/clear_refs"):
            assert result.method == "rss-hwm (clear_refs)"
            # the process peak holds the step's peak plus the shared 1024 x 1024 weight (4 MiB) and AdamW's
            # two states of it (8 MiB), which the step's growth does not count
            assert result.process_peak_mb > result.peak_mb + 8
            assert result.import_mb > 0
    assert results["ours"].peak_mb > results["ref"].peak_mb


def test_peak_memory_needs_a_registered_case():
    case, _ = _counting_case()
    with pytest.raises(ValueError, match="make_case"):
        peak_memory(case, "ours")


def test_peak_memory_reports_child_errors():
    case = make_case("toy-mlp", dim=8)
    case.factory_kwargs = {"no_such_option": 1}
    with pytest.raises(RuntimeError, match="no_such_option"):
        peak_memory(case, "ref", threads=1)


def test_suites_reference_registered_public_cases():
    suites = bench.suites()
    assert suites["all"] and suites["quick"]
    assert [name for name, _ in suites["all"]] == [name for name, _ in suites["quick"]]
    for suite in suites.values():
        for name, overrides in suite:
            assert name in bench.public_cases()
            json.dumps(overrides)  # must travel to a child process
    for name, overrides in suites["quick"]:
        assert overrides == bench.CASES[name].tiny and overrides, name


def test_test_only_cases_are_hidden():
    assert "toy-mlp" in bench.CASES and "toy-mlp" not in bench.public_cases()
    assert "toy-mlp" not in [name for name, _ in bench.suites()["all"]]
    assert make_case("toy-mlp", tiny=True).factory_kwargs == {"dim": 16, "batch": 4}


def test_headline_case_defaults():
    # Only builds the BenchCase (cheap): sizes and flags of the headline comparison.
    case = make_case("bert-mlm-train")
    assert case.mode == "train" and case.autocast_dtype is None
    assert "hidden 256, 4 layers, 4 heads, FFN 1024, vocab 30522; batch 8 x 512" in case.description
    batch = case.make_batch()
    assert batch["input_ids"].shape == (8, 512)
    assert bool((batch["attention_mask"] == 1).all())
    labelled = batch["labels"] != -100
    assert 0.13 < labelled.float().mean().item() < 0.17
    assert torch.equal(batch["labels"][labelled], batch["input_ids"][labelled])
    assert torch.equal(case.make_batch()["labels"], batch["labels"])  # seeded
    assert make_case("bert-mlm-train-bf16").autocast_dtype is torch.bfloat16
    assert "labels" not in make_case("bert-mlm-infer", tiny=True).make_batch()


def _model_name(model) -> str:
    """The class name of the model under a PEFT wrapper (LoRA cases), else of the model."""
    return type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__


# Cases whose reference column is another of our models, not transformers' (no shared weights to compare).
OWN_REFERENCE = {"bigbird-vs-bert-mlm-train"}


def test_bigbird_against_bert_compares_equal_sizes():
    """The reason-to-use case: our block-sparse BigBird against our full-attention BERT of the same size, one batch."""
    case = make_case("bigbird-vs-bert-mlm-train", tiny=True)
    bigbird, bert = case.build_pair()
    assert (type(bigbird).__name__, type(bert).__name__) == ("XfmrBigBirdForMaskedLM", "XfmrBertForMaskedLM")
    assert bigbird.config.attention_type == "block_sparse"
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        assert getattr(bigbird.config, field) == getattr(bert.config, field), field
    batch = case.make_batch()
    assert torch.isfinite(bigbird(**batch).loss) and torch.isfinite(bert(**batch).loss)


@pytest.mark.parametrize("name", [n for n in bench.public_cases() if n not in OWN_REFERENCE])
def test_model_case_pairs_match(name):
    """The two sides of every public case start from identical weights: same loss / logits in eval mode."""
    case = make_case(name, tiny=True)
    torch.manual_seed(0)
    ours, ref = case.build_pair()
    unwrap = lambda model: getattr(model, "wrapped", model)  # noqa: E731  (cases timing e.g. generate())
    assert _model_name(unwrap(ours)).startswith("Xfmr") and not _model_name(unwrap(ref)).startswith("Xfmr")
    batch = case.make_batch()
    if hasattr(ref, "collate"):  # each side collates the raw rows its own way: compare the models on one batch
        batch = ref.collate(**batch)
        ours, ref = unwrap(ours), unwrap(ref)
    ours.eval(), ref.eval()
    outputs = []
    for model in (ours, ref):
        torch.manual_seed(1)  # the same RNG state for each side (ELECTRA's RTD step samples tokens)
        with torch.no_grad():
            outputs.append(model(**batch))
    out_ours, out_ref = outputs
    if isinstance(out_ref, torch.Tensor):  # e.g. generated token ids
        assert torch.equal(out_ours, out_ref)
    elif "labels" in batch:
        torch.testing.assert_close(out_ours.loss, out_ref.loss, atol=1e-5, rtol=1e-5)
    elif hasattr(out_ref, "logits"):
        torch.testing.assert_close(out_ours.logits, out_ref.logits, atol=1e-5, rtol=1e-5)
    else:  # a base model's features: equal at real positions (padding positions may be skipped)
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(out_ours.last_hidden_state[real], out_ref.last_hidden_state[real],
                                   atol=1e-5, rtol=1e-5)


def test_quick_bert_case_end_to_end():
    result = measure_case(make_case("bert-mlm-train", tiny=True), repeats=2, warmup=1, threads=1, memory=True)
    assert result.case == "bert-mlm-train" and result.mode == "train" and result.dtype == "fp32"
    assert math.isfinite(result.speed_ratio) and result.speed_ratio > 0
    assert result.memory["ours"]["peak_mb"] >= 0 and result.memory["ref"]["peak_mb"] >= 0
    assert "| bert-mlm-train | train | fp32 |" in to_markdown([result])


def test_profile_case_reports_both_sides():
    tables = bench.profile_case(make_case("toy-mlp", dim=32), steps=1, warmup=0, threads=1, top=5)
    assert set(tables) == set(SIDES)
    for table in tables.values():
        assert "aten::" in table and "Self CPU" in table


def test_sweep_table_and_plot(tmp_path):
    from hf_xfmr.bench.sweep import plot_sweep, run_sweep, sweep_markdown

    rows = run_sweep("toy-mlp", "dim", [8, 16], repeats=1, warmup=0, threads=1, memory=False, batch=4)
    assert [row["dim"] for row in rows] == [8, 16] and all(row["speed_ratio"] > 0 for row in rows)
    rows.append({"case": "toy-mlp", "dim": 32, "error": "out of memory"})
    table = sweep_markdown(rows, "dim")
    assert table.splitlines()[0].startswith("| dim | ours ms") and "out of memory" in table
    png = plot_sweep(rows, "dim", tmp_path / "sweep.png", title="toy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_measures_only_our_side_above_ref_up_to(tmp_path):
    from hf_xfmr.bench.sweep import plot_sweep, run_sweep, sweep_markdown

    rows = run_sweep("toy-mlp", "dim", [8, 16], repeats=1, warmup=0, threads=1, memory=False, batch=4,
                     ref_up_to=8)
    assert rows[0]["ref"] is not None and rows[0]["speed_ratio"] > 0
    assert rows[1]["ref"] is None and rows[1]["speed_ratio"] is None and rows[1]["ours"]["median_ms"] > 0
    last = sweep_markdown(rows, "dim").splitlines()[-1]
    assert last.startswith("| 16 |") and "not run" in last
    assert plot_sweep(rows, "dim", tmp_path / "sweep.png").exists()


def test_xlnet_sweep_merges_runs_by_seq(tmp_path):
    import json

    from hf_xfmr.bench.xlnet import main

    common = ["--tiny", "--batch", "2", "--repeats", "1", "--threads", "1", "--no-memory", "--cases", "xlnet-plm-train",
              "--out", str(tmp_path)]
    main(["--seqs", "16", *common])
    main(["--seqs", "32", "--ref-up-to", "16", *common])
    rows = json.loads((tmp_path / "xlnet-plm-train_seq.json").read_text())
    assert [row["seq"] for row in rows] == [16, 32]
    assert rows[0]["ref"] is not None and rows[1]["ref"] is None
    table = (tmp_path / "xlnet-plm-train_seq.md").read_text()
    assert "| 16 |" in table and "| 32 |" in table and "not run" in table
    assert (tmp_path / "xlnet-plm-train_seq.png").exists()
