"""Machine facts and MFU in benchmark results: FLOPs counted once per case, the fraction of the machine's peak,
the machine recorded in every JSON and named under every table."""

import json

import pytest
import torch

from hf_xfmr import machine
from hf_xfmr.bench import make_case, measure_case, time_case, to_json, to_markdown
from hf_xfmr.bench.harness import build_runners, step_flops


@pytest.fixture
def fixed_peak(tmp_path, monkeypatch):
    """A stated peak (no probe) and a cache folder of the test's own."""
    monkeypatch.setenv("HF_XFMR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(machine.PEAK_ENV, "fp32=50,bf16=25")


@pytest.mark.parametrize("mode, repeat", [("train", 1), ("train", 3), ("infer", 2)])
def test_step_flops_counts_the_matrix_products(mode, repeat):
    # ToyMLP: one shared Linear (D x D) applied `repeat` times to a (B, D) batch. Forward: 2*B*D*D per
    # application; backward: the weight's gradient per application, the input's for all but the first.
    batch, dim = 8, 16
    runner = build_runners(make_case("toy-mlp", dim=dim, batch=batch, ours_repeat=repeat, mode=mode), 0)["ours"]
    product = 2 * batch * dim * dim
    expected = repeat * product + ((repeat + repeat - 1) * product if mode == "train" else 0)
    assert step_flops(runner) == expected


def test_step_flops_counts_cpu_attention():
    # torch's counter knows the CUDA attention kernels only: the CPU one is counted with the same formula.
    from torch.utils.flop_counter import sdpa_flop_count

    class Attend(torch.nn.Module):
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    q = torch.randn(2, 4, 64, 16)
    runner = type("Runner", (), {"step": lambda self: Attend()(q)})()
    assert step_flops(runner) == sdpa_flop_count(q.shape, q.shape, q.shape) > 0


def test_measure_case_reports_flops_and_fraction_of_peak(fixed_peak):
    result = measure_case(make_case("toy-mlp", dim=32, batch=8), repeats=2, warmup=0, threads=1, memory=False)
    assert result.flops == 3 * 2 * 8 * 32 * 32 - 2 * 8 * 32 * 32  # forward + weight grad (input needs none)
    assert result.peak == {"gflops": 50.0, "source": "given", "dtype": "fp32"}
    for side in ("ours", "ref"):
        seconds = getattr(result, side).median_ms / 1e3
        assert result.peak_fraction(side) == pytest.approx(result.flops / seconds / 50e9)
    row = result.as_dict()
    assert row["gflop_per_step"] == pytest.approx(result.flops / 1e9)
    assert set(row["peak_fraction"]) == {"ours", "ref"}
    bf16 = measure_case(make_case("toy-mlp", dim=32, batch=8, dtype="bf16"), repeats=1, warmup=0, threads=1,
                        memory=False)
    assert bf16.peak["gflops"] == 25.0 and bf16.peak["dtype"] == "bf16"  # the peak of the case's dtype


def test_time_case_alone_counts_flops_but_has_no_peak():
    result = time_case(make_case("toy-mlp", dim=16, batch=4), repeats=1, warmup=0, threads=1)
    assert result.flops > 0 and result.peak is None and result.peak_fraction("ours") is None
    assert time_case(make_case("toy-mlp"), repeats=1, warmup=0, threads=1, count_flops=False).flops is None


def test_mfu_columns_and_machine_at_tiny_size(fixed_peak, tmp_path):
    result = measure_case(make_case("bert-mlm-train", tiny=True), repeats=1, warmup=0, threads=1, memory=False)
    assert result.flops > 0
    table = to_markdown([result])
    header, _, row = table.splitlines()[:3]
    assert "| speed ratio | GFLOP/step | % of peak ours / ref |" in header
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[6] == f"{result.flops / 1e9:.3g}"
    assert cells[7] == f"{result.peak_fraction('ours'):.0%} / {result.peak_fraction('ref'):.0%}"
    info = machine.cpu_info()
    last = table.strip().splitlines()[-1]
    assert last.startswith("Machine: CPU: " + info["model"]) and "AMX-BF16:" in last and "AVX512-BF16:" in last
    assert "fp32 on cpu 50 GFLOP/s (given)" in last

    payload = to_json([result], tmp_path / "models.json")
    on_disk = json.loads((tmp_path / "models.json").read_text())
    assert on_disk["machine"] == json.loads(json.dumps(payload["machine"]))
    assert on_disk["machine"]["cpu"]["model"] == info["model"]
    assert set(on_disk["machine"]["cpu"]["flags"]) == set(machine.CPU_FLAGS)
    assert "gpu" not in on_disk["machine"]  # CPU rows only
    (row,) = on_disk["results"]
    assert row["gflop_per_step"] == pytest.approx(result.flops / 1e9) and row["peak"]["source"] == "given"
    assert to_markdown(on_disk["results"]) == table  # the table reads back from the JSON rows


def test_bench_cli_writes_machine_and_mfu(fixed_peak, tmp_path, capsys):
    from hf_xfmr.cli import main

    argv = ["bench", "--cases", "gpt-clm-train", "--tiny", "--repeats", "1", "--warmup", "0", "--no-memory",
            "--output", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "GFLOP/step" in out and "Machine: CPU:" in out
    payload = json.loads((tmp_path / "out" / "models.json").read_text())
    assert payload["machine"]["cpu"]["model"] and payload["results"][0]["gflop_per_step"] > 0
    assert payload["results"][0]["peak_fraction"]["ours"] > 0


def test_bench_cli_device_cuda_without_a_gpu(capsys, monkeypatch):
    from hf_xfmr.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--cases", "bert-mlm-train", "--tiny", "--device", "cuda"]) == 2
    assert "--device cuda: no CUDA device" in capsys.readouterr().err
