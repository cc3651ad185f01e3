"""Machine facts: which CPU (or GPU) a figure was measured on, and how fast its matrix products run.

Benchmark results record `cpu_info()` (and `gpu_info()` on CUDA) so that figures from different machines are
never mixed, and report model FLOPs as a fraction of `peak_gflops()`, the machine's measured matrix-product
rate for the dtype (MFU). `bf16_advice()` says when bf16 autocast is likely to slow a CPU run down: on CPUs
without AMX (and often without AVX512-BF16) bf16 matrix products run slower than fp32 ones.

The probe (`matmul_peak`) times square products `x @ w.T` (the layout of `nn.Linear`), doubling the size from
256 up to `size` while the next size fits a short time budget (well under 2 s per dtype, even where bf16 runs
at a few GFLOP/s), and keeps the best rate. Results are cached per (device model, dtype, threads, torch
version) in `$HF_XFMR_CACHE/machine.json` (default `~/.cache/hf_xfmr/machine.json`); `refresh=True` measures
again. Nothing is probed at import.

A GPU's peak is given by the user when known (`HF_XFMR_PEAK_GFLOPS`, e.g. `989000` or `bf16=989000,fp32=67000`,
or the `given` argument of `peak_gflops`); otherwise the same probe runs on the GPU (at larger sizes).
"""

import datetime
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from .layers.bf16_products import BF16_PRODUCTS_ENV, proc_cpuinfo, products_in_fp32

CPU_FLAGS = ("amx_bf16", "amx_tile", "amx_int8", "avx512_bf16", "avx512f", "avx2")
DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PEAK_ENV = "HF_XFMR_PEAK_GFLOPS"
CACHE_VERSION = 1


# ----------------------------------------------------------------------------------------------
# What the machine is
# ----------------------------------------------------------------------------------------------


def cpu_info() -> dict[str, Any]:
    """The CPU: model name, logical cores, the flags that decide bf16 speed (True / False; None where the OS
    does not say), torch's vector capability, torch version and intra-op threads."""
    model, flags = proc_cpuinfo()
    return {
        "model": model or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "flags": {name: (name in flags) if flags is not None else None for name in CPU_FLAGS},
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def cpu_summary(info: dict[str, Any] | None = None) -> str:
    """One line naming the CPU and its AMX / AVX512-BF16 flags, e.g. for a results table."""
    info = info or cpu_info()
    flags = info["flags"]

    def said(name: str) -> str:
        return "unknown" if flags.get(name) is None else ("yes" if flags[name] else "no")

    return (f"CPU: {info['model']} ({info['cores']} logical cores, torch {info['torch_capability']}); "
            f"AMX-BF16: {said('amx_bf16')}, AVX512-BF16: {said('avx512_bf16')}")


def gpu_info() -> dict[str, Any] | None:
    """The current CUDA device (name, compute capability, memory in GiB, CUDA version); None without CUDA."""
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "memory_gib": round(props.total_memory / 2**30, 1),
        "count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
        "bf16_supported": torch.cuda.is_bf16_supported(),
    }


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """What a result file records: `{"cpu": cpu_info()}`, plus `"gpu": gpu_info()` for a CUDA device."""
    info: dict[str, Any] = {"cpu": cpu_info()}
    if str(device).startswith("cuda"):
        info["gpu"] = gpu_info()
    return info


# ----------------------------------------------------------------------------------------------
# The matmul probe and its cache
# ----------------------------------------------------------------------------------------------


def cache_path() -> Path:
    """`$HF_XFMR_CACHE/machine.json`, else `$XDG_CACHE_HOME/hf_xfmr/machine.json` (default `~/.cache`)."""
    folder = os.environ.get("HF_XFMR_CACHE")
    if folder:
        return Path(folder).expanduser() / "machine.json"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "hf_xfmr" / "machine.json"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing or unreadable: measure again and rewrite it
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("peaks"), dict):
        return {}
    return data["peaks"]


def _write_cache(path: Path, peaks: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes may write at once: rename is atomic
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "peaks": peaks}, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: the figure is still returned, just measured again next time


def _dtype(dtype: str | torch.dtype) -> tuple[str, torch.dtype]:
    if isinstance(dtype, torch.dtype):
        names = {v: k for k, v in DTYPE_NAMES.items()}
        if dtype not in names:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES)} (or the torch dtypes), got {dtype}")
        return names[dtype], dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_NAMES)}, got {dtype!r}")
    return dtype, DTYPE_NAMES[dtype]


def _device_model(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else cpu_info()["model"]


def cache_key(dtype: str | torch.dtype, threads: int | None = None, device: str = "cpu") -> str:
    """The cache entry of a peak: device model, dtype, threads (CPU only), torch version."""
    name, _ = _dtype(dtype)
    where = f"cuda:{_device_model('cuda')}" if device == "cuda" else \
        f"cpu:{_device_model('cpu')}|threads={threads or torch.get_num_threads()}"
    return f"{where}|{name}|torch {torch.__version__}"


def _time_product(x: torch.Tensor, w: torch.Tensor, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    torch.nn.functional.linear(x, w)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _best_time(x: torch.Tensor, w: torch.Tensor, device: str, repeats: int, seconds: float) -> float:
    """The shortest of at least `repeats` products, more while `seconds` last (at most 50): on a shared
    machine some products stall (threads descheduled mid-product), and the best one is the machine's."""
    best = _time_product(x, w, device)  # warm-up: kernels picked, memory touched
    start, done = time.perf_counter(), 0
    while done < repeats or (time.perf_counter() - start < seconds and done < 50):
        best = min(best, _time_product(x, w, device))
        done += 1
    return best


def _load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def probe_matmul(dtype: torch.dtype, *, device: str = "cpu", size: int = 2048, repeats: int = 3,
                 budget_s: float = 0.6) -> dict[str, Any]:
    """Measure the best GFLOP/s of square products `x @ w.T` in `dtype` on `device` (current torch threads).

    Starts at 256 and doubles the size up to `size` while the next size's products are predicted to fit what
    is left of `budget_s`; each size gets a share of the budget for repeated products, the best kept. Returns
    {"gflops", "size" (where the best was measured), "seconds" (the probe's wall time), "load_1m" (the load
    average before it, None where the OS has none), "busy" (the machine had more runnable tasks than cores: the
    figure may be low)}."""
    load = _load_average()
    start = time.perf_counter()
    best, best_n, n = 0.0, 0, 256
    with torch.no_grad():
        while True:
            x = torch.randn(n, n, device=device).to(dtype)
            w = torch.randn(n, n, device=device).to(dtype)
            seconds = _best_time(x, w, device, repeats, budget_s / 8)
            rate = 2 * n**3 / max(seconds, 1e-9) / 1e9
            if rate > best:
                best, best_n = rate, n
            left = budget_s - (time.perf_counter() - start)
            if n * 2 > size or 8 * seconds * (repeats + 1) > left:
                break
            n *= 2
    busy = device == "cpu" and load is not None and load >= (os.cpu_count() or 1)
    return {"gflops": round(best, 2), "size": best_n, "seconds": round(time.perf_counter() - start, 3),
            "load_1m": None if load is None else round(load, 2), "busy": busy}


def matmul_peak(dtype: str | torch.dtype = "fp32", threads: int | None = None, *, device: str = "cpu",
                refresh: bool = False, size: int | None = None) -> float:
    """The measured matrix-product rate (GFLOP/s) of this machine for `dtype` with `threads` torch threads
    (default: the current count), cached (see the module docstring); `refresh=True` measures again.

    A figure measured on a busy machine (load average >= cores) is kept only until a better one: the next call
    measures again and keeps the higher of the two, and a measurement on a quiet machine replaces it."""
    return float(_peak_entry(dtype, threads, device=device, refresh=refresh, size=size)["gflops"])


def _peak_entry(dtype, threads, *, device: str, refresh: bool, size: int | None,
                remeasure_busy: bool = True) -> dict[str, Any]:
    name, torch_dtype = _dtype(dtype)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("matmul_peak(device='cuda') needs a CUDA device; none is available.")
    key = cache_key(name, threads, device)
    path = cache_path()
    cached = None if refresh else _read_cache(path).get(key)
    if cached is not None and not (cached.get("busy") and remeasure_busy):
        return cached
    previous = torch.get_num_threads()
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    try:
        measured = probe_matmul(torch_dtype, device=device, size=size or (8192 if device == "cuda" else 2048))
    finally:
        torch.set_num_threads(previous)
    measured["measured"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if measured.get("busy") and cached is not None and cached["gflops"] > measured["gflops"]:
        measured = cached  # both on a busy machine: the higher is nearer the truth
    peaks = _read_cache(path)  # another process may have added entries meanwhile
    peaks[key] = measured
    _write_cache(path, peaks)
    return measured


def given_peak(dtype: str | torch.dtype, given: float | str | None = None) -> float | None:
    """A peak the user states (GFLOP/s): `given`, else the `HF_XFMR_PEAK_GFLOPS` environment variable, either
    one number for every dtype or `dtype=value` pairs (`bf16=989000,fp32=67000`). None when not given."""
    name, _ = _dtype(dtype)
    text = given if given is not None else os.environ.get(PEAK_ENV)
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return float(text)
    values: dict[str, float] = {}
    try:
        for part in str(text).split(","):
            key, sep, value = part.partition("=")
            if sep:
                values[key.strip()] = float(value)
            else:
                values["*"] = float(key)
    except ValueError:
        raise ValueError(f"{PEAK_ENV}={text!r}: expected GFLOP/s as a number (e.g. 989000) or dtype=number pairs "
                         "(e.g. bf16=989000,fp32=67000).") from None
    unknown = sorted(set(values) - set(DTYPE_NAMES) - {"*"})
    if unknown:
        raise ValueError(f"{PEAK_ENV}={text!r}: unknown dtype(s) {unknown}; use {sorted(DTYPE_NAMES)}.")
    return values.get(name, values.get("*"))


def peak_gflops(device: str = "cpu", dtype: str | torch.dtype = "fp32", threads: int | None = None, *,
                given: float | str | None = None, remeasure_busy: bool = True) -> dict[str, Any]:
    """The peak to measure MFU against: {"gflops", "source"}; a stated peak (`given` or `HF_XFMR_PEAK_GFLOPS`)
    wins over the probe (`matmul_peak`, cached; "source" says when it was measured on a busy machine, where
    the figure may be low and the fractions of it high). `remeasure_busy=False`: a cached figure measured on a busy
    machine is used as it is (a training run probes at most once per machine, dtype and thread count)."""
    stated = given_peak(dtype, given)
    if stated is not None:
        return {"gflops": stated, "source": "given"}
    # bf16 autocast's products run on the fp32 kernels of a CPU without AMX (layers.bf16_products): their peak.
    on_fp32 = torch.device(device).type == "cpu" and _dtype(dtype)[0] == "bf16" and products_in_fp32()
    entry = _peak_entry("fp32" if on_fp32 else dtype, threads, device=device, refresh=False, size=None,
                        remeasure_busy=remeasure_busy)
    source = "matmul probe" + (", busy machine" if entry.get("busy") else "") + \
        (", fp32: bf16 products run on the fp32 kernels here" if on_fp32 else "")
    return {"gflops": float(entry["gflops"]), "source": source}


# ----------------------------------------------------------------------------------------------
# Advice
# ----------------------------------------------------------------------------------------------


def bf16_advice(device: str | torch.device = "cpu", threads: int | None = None) -> str | None:
    """On a CPU whose bf16 matrix products are slower than its fp32 ones: a one-line message with both measured
    rates and the faster choice. None on other devices, or where bf16 is at least as fast."""
    if torch.device(device).type != "cpu":
        return None
    threads = threads or torch.get_num_threads()
    fp32, bf16 = matmul_peak("fp32", threads), matmul_peak("bf16", threads)
    if bf16 >= fp32:
        return None
    info = cpu_info()
    amx = {True: "has", False: "has no", None: "may lack"}[info["flags"]["amx_bf16"]]
    measured = (f"this CPU ({info['model']}, which {amx} AMX) measured matrix products at {bf16:.1f} GFLOP/s in bf16 "
                f"against {fp32:.1f} GFLOP/s in fp32 with {threads} thread(s)")
    if products_in_fp32():
        return (f"bf16 is not faster than fp32 here: {measured}, so hf_xfmr models run bf16 autocast's products "
                f"through the fp32 kernels (same bf16 results; {BF16_PRODUCTS_ENV}=native for torch's bf16 kernels), "
                "which costs 20-30% over an fp32 step: bf16 saves activation memory only. Keep fp32 for speed: drop "
                "--mixed_precision bf16 (pretrain) / --bf16 (finetune, distill, Trainer's bf16=True).")
    return (f"bf16 is slower than fp32: {measured}. Keep fp32 for speed: drop --mixed_precision bf16 (pretrain) / "
            "--bf16 (finetune, distill, Trainer's bf16=True).")


class SlowBf16Warning(UserWarning):
    """bf16 autocast was asked for on a CPU whose bf16 matrix products are slower than its fp32 ones."""


_WARNED: set[int] = set()


def warn_if_bf16_slow(device: str | torch.device = "cpu", threads: int | None = None) -> str | None:
    """Issue `bf16_advice` as a `SlowBf16Warning`, once per process and thread count; returns the message
    (None when there is nothing to say). For training entry points that were asked for bf16 on `device`."""
    if torch.device(device).type != "cpu":
        return None
    threads = threads or torch.get_num_threads()
    advice = bf16_advice(device, threads)
    if advice is not None and threads not in _WARNED:
        _WARNED.add(threads)
        import warnings

        warnings.warn(advice, SlowBf16Warning, stacklevel=2)
    return advice


# ----------------------------------------------------------------------------------------------
# Model FLOPs (MFU)
# ----------------------------------------------------------------------------------------------


def _cpu_sdpa_flops() -> dict:
    """FLOP formulas for the CPU's fused attention, which `torch.utils.flop_counter` does not know (it maps the
    CUDA kernels only): the formulas of its CUDA sdpa entries (causal masks not discounted)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    def forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_backward_flop_count(grad_out, query, key, value)

    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}


def flop_counter():
    """A `torch.utils.flop_counter.FlopCounterMode` (no table printed) that also counts the CPU's fused
    attention: `with flop_counter() as counter: ...; counter.get_total_flops()`. It counts matrix products and
    attention (what MFU counts), not elementwise work, in whatever runs inside the block, eagerly."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_flops())


def precision_dtype(mixed_precision: str | None) -> str:
    """The dtype name whose peak a run is measured against: "bf16" / "fp16" for that autocast, else "fp32"."""
    return mixed_precision if mixed_precision in ("bf16", "fp16") else "fp32"
