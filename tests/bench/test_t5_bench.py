"""T5 benchmark cases (built cheaply, no timing) and the span-corruption collator benchmark at a tiny size."""

import torch

from hf_xfmr.bench import make_case
from hf_xfmr.bench.t5_collator import benchmark_span_corruption, span_corruption_per_example
from hf_xfmr.data.t5 import compute_input_and_target_lengths, corrupted_lengths


def test_headline_t5_case_defaults():
    case = make_case("t5-span-train")
    assert case.mode == "train" and case.autocast_dtype is None
    assert "d_model 256, 4+4 layers, 4 heads, d_ff 1024, vocab 32128; batch 8 x 462 inputs / 104 targets" in \
        case.description
    batch = case.make_batch()
    assert batch["input_ids"].shape == (8, 462) and batch["labels"].shape == (8, 104)
    assert compute_input_and_target_lengths(462) == (512, 104)  # what a 512-token text corrupts into
    assert make_case("t5-generate").mode == "infer"


def test_per_example_baseline_makes_t5_batches():
    rows = [{"input_ids": list(range(10, 522))} for _ in range(3)]
    batch = span_corruption_per_example(rows, 32128, 1, generator=torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape == (3, 462) and batch["labels"].shape == (3, 104)
    assert (batch["labels"][:, 0] == 32127).all() and (batch["input_ids"][:, -1] == 1).all()
    assert corrupted_lengths(512) == (462, 104)


def test_collator_benchmark_runs():
    row = benchmark_span_corruption(batch_size=2, input_length=40, repeats=1, warmup=0)
    assert row["ours_examples_per_s"] > 0 and row["per-example_examples_per_s"] > 0 and row["speedup"] > 0
