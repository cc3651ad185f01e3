"""benchmarks/gpu/check.sh in its dry mode (CPU, tiny): the GPU check's code paths, so that it cannot rot
between the sessions that have a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "check.sh"


def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "HF_XFMR_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "results"
    proc = subprocess.run([str(SCRIPT), "--dry-run", "--out", str(out), "--archs", "bert", "t5", "--cases",
                           "bert-mlm-train"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "check.json").read_text())
    assert report["dry_run"] is True and report["passed"] is True
    assert report["machine"]["device"] == "cpu" and report["machine"]["cpu"]["model"]

    # every head of the chosen families, fp32 within 1e-5 of transformers, bf16 within its tolerance
    from hf_xfmr.models import get_architecture

    heads = {(row["arch"], row["task"]) for row in report["parity"]}
    assert heads == {(arch, task) for arch in ("bert", "t5") for task in get_architecture(arch).classes}
    for row in report["parity"]:
        assert row["ok"] and row["fp32_max_err"] <= 2e-5 and row["compared"], row
    assert {(row["arch"], row["attn"]) for row in report["attention"]} == {("bert", "sdpa"), ("t5", "sdpa")}
    assert all(row["ok"] and row["max_err"] <= 2e-5 for row in report["attention"])

    # bench rows in fp32 and bf16 with FLOPs and the fraction of peak; the machine named under the table
    rows = report["bench"]["rows"]
    assert [row["dtype"] for row in rows] == ["fp32", "bf16 autocast"] and not report["bench"]["errors"]
    assert all(row["gflop_per_step"] > 0 and row["peak_fraction"]["ours"] > 0 for row in rows)
    assert json.loads((out / "bench.json").read_text())["machine"]["cpu"]["model"]
    markdown = (out / "check.md").read_text()
    assert "## Parity" in markdown and "| bert | masked-lm | ok |" in markdown and "Machine: CPU:" in markdown
    assert "all checks passed" in proc.stderr
