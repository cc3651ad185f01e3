"""BART benchmark cases (built cheaply, no timing) and the text-infilling collator benchmark at a tiny size."""

import torch

from hf_xfmr.bench import make_case
from hf_xfmr.bench.bart_collator import benchmark_text_infilling, text_infilling_per_example


def test_headline_bart_case_defaults():
    case = make_case("bart-infill-train")
    assert case.mode == "train" and case.autocast_dtype is None
    assert "d_model 256, 4+4 layers, 4 heads, ffn 1024, vocab 32000; batch 8 x 418 inputs / 512 targets" in \
        case.description
    batch = case.make_batch()
    assert batch["input_ids"].shape == (8, 418) and batch["labels"].shape == (8, 512)
    assert make_case("bart-generate").mode == "infer"


def test_per_example_baseline_makes_bart_batches():
    rows = [{"input_ids": list(range(10, 520))} for _ in range(3)]
    batch = text_infilling_per_example(rows, 4, 0, 2, 1, generator=torch.Generator().manual_seed(0))
    assert batch["labels"].shape == (3, 512)
    assert (batch["input_ids"] == 4).any() and 380 < batch["input_ids"].shape[1] < 450


def test_collator_benchmark_runs():
    row = benchmark_text_infilling(batch_size=2, text_length=40, repeats=1, warmup=0)
    assert row["ours_examples_per_s"] > 0 and row["per-example_examples_per_s"] > 0 and row["speedup"] > 0
