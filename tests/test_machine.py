"""hf_xfmr.machine: CPU facts, the cached matmul probe, the bf16 advice, the user-given peak."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

from hf_xfmr import machine


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_XFMR_CACHE", str(tmp_path))
    monkeypatch.delenv(machine.PEAK_ENV, raising=False)
    return tmp_path


def test_cpu_info_fields():
    info = machine.cpu_info()
    assert info["model"] and isinstance(info["model"], str)
    assert info["cores"] >= 1 and info["threads"] == torch.get_num_threads()
    assert info["torch"] == torch.__version__
    assert set(info["flags"]) == set(machine.CPU_FLAGS)
    assert all(value in (True, False, None) for value in info["flags"].values())
    summary = machine.cpu_summary(info)
    assert info["model"] in summary and "AMX-BF16:" in summary and "AVX512-BF16:" in summary


def test_cpu_info_reads_proc_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile\n")
    monkeypatch.setattr("hf_xfmr.layers.bf16_products.CPUINFO", str(cpuinfo))
    info = machine.cpu_info()
    assert info["model"] == "Example Xeon"
    assert info["flags"] == {"amx_bf16": True, "amx_tile": True, "amx_int8": False, "avx512_bf16": False,
                             "avx512f": True, "avx2": True}
    assert "AMX-BF16: yes, AVX512-BF16: no" in machine.cpu_summary(info)


def test_matmul_peak_is_cached_and_refreshed(cache_dir, monkeypatch):
    calls = []

    def fake_probe(dtype, *, device, size):
        calls.append((dtype, torch.get_num_threads()))
        return {"gflops": 100.0 + len(calls), "size": 256, "seconds": 0.01, "busy": False}

    monkeypatch.setattr(machine, "probe_matmul", fake_probe)
    assert machine.matmul_peak("fp32", 1) == 101.0
    assert machine.matmul_peak(torch.float32, 1) == 101.0  # a torch dtype names the same entry
    assert calls == [(torch.float32, 1)]
    on_disk = json.loads((cache_dir / "machine.json").read_text())
    (key,) = on_disk["peaks"]
    assert key == machine.cache_key("fp32", 1) and "threads=1" in key and torch.__version__ in key
    assert on_disk["peaks"][key]["gflops"] == 101.0 and on_disk["peaks"][key]["measured"]
    assert machine.matmul_peak("bf16", 1) == 102.0  # another dtype: another entry
    assert machine.matmul_peak("fp32", 1, refresh=True) == 103.0
    assert machine.matmul_peak("fp32", 1) == 103.0
    assert len(json.loads((cache_dir / "machine.json").read_text())["peaks"]) == 2
    (cache_dir / "machine.json").write_text("{not json")  # a damaged cache is measured again and rewritten
    assert machine.matmul_peak("fp32", 1) == 104.0
    assert not list(cache_dir.glob("*.tmp"))


def test_probe_measures_a_positive_rate():
    result = machine.probe_matmul(torch.float32, size=256, repeats=1, budget_s=0.2)
    assert result["gflops"] > 0 and result["size"] == 256 and result["busy"] in (True, False)


def test_a_peak_measured_on_a_busy_machine_is_measured_again(cache_dir, monkeypatch):
    # busy: the next call measures again and keeps the higher figure; a quiet measurement is kept for good
    probes = iter([(50.0, True), (40.0, True), (60.0, True), (55.0, False), (99.0, False)])

    def fake_probe(dtype, *, device, size):
        gflops, busy = next(probes)
        return {"gflops": gflops, "size": 256, "seconds": 0.01, "busy": busy}

    monkeypatch.setattr(machine, "probe_matmul", fake_probe)
    assert [machine.matmul_peak("fp32", 1) for _ in range(3)] == [50.0, 50.0, 60.0]
    assert machine.peak_gflops("cpu", "fp32", 1) == {"gflops": 55.0, "source": "matmul probe"}
    assert machine.matmul_peak("fp32", 1) == 55.0  # quiet: cached, the probe not run again
    assert machine.matmul_peak("fp32", 1, refresh=True) == 99.0


@pytest.mark.parametrize("products", ["native", "fp32"])
@pytest.mark.parametrize("fp32, bf16, expect", [(300.0, 150.0, True), (300.0, 2400.0, False), (300.0, 300.0, False)])
def test_bf16_advice(cache_dir, monkeypatch, fp32, bf16, expect, products):
    monkeypatch.setenv("HF_XFMR_BF16_PRODUCTS", products)
    peaks = {"fp32": fp32, "bf16": bf16}
    monkeypatch.setattr(machine, "matmul_peak", lambda dtype, threads=None, **kw: peaks[dtype])
    advice = machine.bf16_advice("cpu", threads=2)
    if expect:
        assert f"{bf16:.1f} GFLOP/s in bf16" in advice and f"{fp32:.1f} GFLOP/s in fp32" in advice
        assert "--mixed_precision bf16" in advice and "--bf16" in advice and "2 thread" in advice
        assert "\n" not in advice
        # With the products through the fp32 kernels (layers.bf16_products), the advice says so and how to undo it.
        assert ("fp32 kernels" in advice and "HF_XFMR_BF16_PRODUCTS=native" in advice) == (products == "fp32")
    else:
        assert advice is None
    assert machine.bf16_advice("cuda") is None  # the probe is for CPUs


def test_warn_if_bf16_slow_warns_once(monkeypatch):
    monkeypatch.setattr(machine, "bf16_advice", lambda device, threads: "slow bf16")
    monkeypatch.setattr(machine, "_WARNED", set())
    with pytest.warns(machine.SlowBf16Warning, match="slow bf16"):
        assert machine.warn_if_bf16_slow("cpu", threads=3) == "slow bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert machine.warn_if_bf16_slow("cpu", threads=3) == "slow bf16"  # said once
        assert machine.warn_if_bf16_slow("cuda") is None


def test_given_peak(cache_dir, monkeypatch):
    assert machine.given_peak("bf16") is None
    assert machine.given_peak("bf16", given=5e5) == 5e5
    monkeypatch.setenv(machine.PEAK_ENV, "bf16=989000, fp32=67000")
    assert machine.given_peak("bf16") == 989000 and machine.given_peak("fp32") == 67000
    assert machine.given_peak("fp16") is None
    assert machine.peak_gflops("cuda", "bf16") == {"gflops": 989000, "source": "given"}
    monkeypatch.setenv(machine.PEAK_ENV, "1234")
    assert machine.given_peak("fp16") == 1234
    monkeypatch.setenv(machine.PEAK_ENV, "fast")
    with pytest.raises(ValueError, match="expected GFLOP/s"):
        machine.given_peak("fp32")
    monkeypatch.setenv(machine.PEAK_ENV, "tf32=5")
    with pytest.raises(ValueError, match="unknown dtype"):
        machine.given_peak("fp32")
    with pytest.raises(ValueError, match="dtype must be one of"):
        machine.matmul_peak("int8")


def test_no_probe_at_import(tmp_path):
    # Any matrix product during import fails the import; and no cache file appears.
    code = ("import torch.nn.functional as F\n"
            "def refuse(*args, **kwargs):\n    raise AssertionError('a probe ran at import')\n"
            "F.linear = refuse\n"
            "import hf_xfmr.machine, hf_xfmr.bench, hf_xfmr.training.pretrain\nprint('ok')\n")
    env = {**os.environ, "HF_XFMR_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok" and not (tmp_path / "machine.json").exists()


def test_benchmarks_doc_snippet(cache_dir, monkeypatch, capsys):
    from .doc_snippets import run_checking_comments, snippet

    def fake_probe(dtype, **kwargs):
        return {"gflops": 90.0 if dtype == torch.float32 else 9.0, "size": 512, "seconds": 0.1, "busy": False}

    monkeypatch.setattr(machine, "probe_matmul", fake_probe)
    run_checking_comments(snippet("from hf_xfmr.machine import bf16_advice", "docs/benchmarks.md"))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(machine.cpu_info()["model"]) and lines[1] == "90.0 9.0"
    assert "9.0 GFLOP/s in bf16 against 90.0 GFLOP/s in fp32" in lines[2]


@pytest.mark.parametrize("mixed_precision", ["bf16", "no"])
def test_pretrain_warns_once_about_slow_bf16_on_cpu(tmp_path, monkeypatch, mixed_precision):
    from hf_xfmr.training import PretrainArguments, pretrain

    asked = []
    monkeypatch.setattr(machine, "bf16_advice", lambda device, threads: asked.append(device) or "bf16 is slower here")
    monkeypatch.setattr(machine, "_WARNED", set())
    args = PretrainArguments(arch="bert", objective="mlm", max_steps=1, max_documents=20, per_device_train_batch_size=2,
                             max_seq_length=16, save_steps=0, eval_fraction=0.0, progress_bar=False,
                             report_to_tensorboard=False, output_dir=str(tmp_path / "run"),
                             mixed_precision=mixed_precision)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pretrain(args)
    slow = [w for w in caught if issubclass(w.category, machine.SlowBf16Warning)]
    if mixed_precision == "bf16" and not torch.cuda.is_available():
        assert asked == ["cpu"] and len(slow) == 1 and str(slow[0].message) == "bf16 is slower here"
    else:
        assert asked == [] and slow == []


def test_a_training_run_uses_a_busy_cached_peak_as_it_is(cache_dir, monkeypatch):
    # remeasure_busy=False (what a training run asks for): the probe runs once per machine, even a busy one
    calls = []

    def fake_probe(dtype, *, device, size):
        calls.append(dtype)
        return {"gflops": 50.0 + len(calls), "size": 256, "seconds": 0.01, "busy": True}

    monkeypatch.setattr(machine, "probe_matmul", fake_probe)
    for _ in range(3):
        assert machine.peak_gflops("cpu", "fp32", 1, remeasure_busy=False) == {
            "gflops": 51.0, "source": "matmul probe, busy machine"}
    assert calls == [torch.float32]
    assert machine.peak_gflops("cpu", "fp32", 1)["gflops"] == 52.0  # the default measures a busy figure again


def test_flop_counter_counts_matrix_products_forward_and_backward():
    linear = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(5, 16, requires_grad=True)
    with machine.flop_counter() as counter:
        linear(x).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * 5 * 16 * 8  # forward, grad of the input, grad of the weight


def test_flop_counter_counts_the_cpu_fused_attention():
    q, k, v = (torch.randn(2, 4, 32, 8) for _ in range(3))  # (B, H, T, D)
    with machine.flop_counter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 2 * (2 * 2 * 4 * 32 * 32 * 8)  # q @ k^T and p @ v


@pytest.mark.parametrize("precision, dtype", [("no", "fp32"), (None, "fp32"), ("bf16", "bf16"), ("fp16", "fp16")])
def test_precision_dtype(precision, dtype):
    assert machine.precision_dtype(precision) == dtype
