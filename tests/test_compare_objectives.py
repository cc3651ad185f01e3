"""examples/compare_objectives.py on a token budget of a few steps: every run pretrains, finetunes from its
checkpoint and from random weights, and the table and JSON it writes carry the figures it printed."""

import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_compare_objectives_writes_its_table(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("compare_objectives", None)
    import compare_objectives

    out = tmp_path / "compare"
    rows = compare_objectives.main(["--runs", "gpt:clm", "--pretrain-steps", "3", "--batch-size", "8",
                                    "--finetune-epochs", "0.01", "--vocab-size", "600", "--output", str(out)])
    assert [(r["arch"], r["objective"]) for r in rows] == [("gpt", "clm")]
    for row in rows:
        assert row["parameters"] > 0 and row["pretrain_seconds"] > 0 and row["pretrain_cpu_seconds"] > 0
        assert 0 <= row["eval_accuracy"] <= 1 and 0 <= row["finetuned_accuracy"] <= 1
        assert 0 <= row["scratch_accuracy"] <= 1
    assert json.loads((out / "results.json").read_text()) == rows
    table = (out / "results.md").read_text()
    assert "| CLM (gpt) |" in table
    assert "3 steps x 8 x 64" in table


def test_default_runs_are_one_per_objective_and_all_installed(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("compare_objectives", None)
    import compare_objectives

    runs = compare_objectives.parse_runs(compare_objectives.parse_args([]).runs)  # raises for an unknown one
    assert [objective for _, objective in runs] == ["mlm", "plm", "clm"]
