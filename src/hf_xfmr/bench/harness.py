"""The side-by-side benchmark harness: an hf_xfmr model against its transformers reference.

This module knows no architecture: the cases live in one module per architecture in this package
(`bench/bert.py`, ...), each registering its factories with `register_case`.

A `BenchCase` names a pair of models with identical weights ("ours", "ref") and one batch that both
accept. `time_case` builds the pair once, runs warm-up steps on each (not timed), then alternates the
two sides step by step (ours, ref, ours, ref, ...) so that slow drifts of the machine (thermal state,
other processes, page cache) hit both sides alike, and reports per-side statistics of the step times
and the speed ratio `ref median / ours median` (> 1 means ours is faster).

`peak_memory` measures one side in its own child process (forked from a forkserver that has only
imported hf_xfmr, or `python -m hf_xfmr.bench --memory ...`), so the two sides never share an
allocator or its cached blocks. What it reports is the growth of the
memory in use during ONE steady-state step over the memory held right before it (weights, optimizer
state, batch): i.e. activations, gradients and temporaries.

- CUDA: `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()`, minus
  `memory_allocated()` before the step.
- CPU on Linux: the kernel's RSS high-water mark. Writing "5" to `/proc/self/clear_refs` resets
  `VmHWM` to the current RSS; after the step `VmHWM - VmRSS(before)` is the step's peak growth.
  The child sets glibc's mmap threshold to a fixed 128 KiB (`malloc.return_freed_memory`) so
  tensor-sized blocks are mmapped and returned on free: RSS then follows the live tensors instead
  of whatever the heap kept from earlier steps. An hf_xfmr model that trains replaces that setting
  with the one it runs under by default (`hf_xfmr.malloc`: freed blocks kept for reuse), so ours is
  measured as users run it; the heap's free memory is released (`malloc_trim`) before the step, so
  `VmRSS(before)` is the memory held, not what the warm-up steps left free.
- Elsewhere (no `/proc`, or `clear_refs` not writable): `resource.getrusage(...).ru_maxrss` growth
  across the step. This is a lower bound, since a higher earlier peak (model construction) hides
  the step's; the method used is recorded with every measurement.

Cases are built by name from the `CASES` registry (a child process can only rebuild a case by name).
Case factories take JSON-friendly keyword overrides (sizes, dtype names); each registration also names
the overrides that shrink the case to "tiny" sizes, which the quick suite and the tests use.
"""

import argparse
import contextlib
import datetime
import gc
import importlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ..malloc import release_freed_memory, return_freed_memory

Batch = dict[str, torch.Tensor]
SIDES = ("ours", "ref")
MODES = ("train", "infer")
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------------------------------------
# Cases and the registry
# ----------------------------------------------------------------------------------------------


@dataclass
class BenchCase:
    """One side-by-side comparison.

    Attributes:
        name: short identifier shown in tables (usually the registry key).
        build_pair: returns `(ours, ref)`, two models with identical weights.
        make_batch: returns the keyword inputs given to both models (the same tensors).
        mode: "train" (forward + backward + AdamW step, one optimizer per model created once) or
            "infer" (forward under `torch.inference_mode`).
        autocast_dtype: run the forward (and loss) under `torch.autocast(device, dtype)`; None = off.
        device: "cpu" or "cuda".
        lr: AdamW learning rate in train mode (small: the point is the cost of the step).
        loss_fn: maps a model output to the scalar to backpropagate; default `output.loss`, or the
            mean square of a plain tensor output.
        description: one line saying what is compared (sizes, flags).
        factory / factory_kwargs: registry key and overrides that rebuild this case in another
            process; filled in by `make_case`.
        factory_module: module to import in the child so that `factory` is registered.
    """

    name: str
    build_pair: Callable[[], tuple[nn.Module, nn.Module]]
    make_batch: Callable[[], Batch]
    mode: str = "train"
    autocast_dtype: torch.dtype | None = None
    device: str = "cpu"
    lr: float = 1e-5
    loss_fn: Callable[[Any], torch.Tensor] | None = None
    description: str = ""
    factory: str | None = None
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    factory_module: str | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"BenchCase {self.name!r}: mode must be one of {MODES}, got {self.mode!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"BenchCase {self.name!r}: device must be 'cpu' or 'cuda', got {self.device!r}")

    @property
    def dtype_label(self) -> str:
        if self.autocast_dtype is None:
            return "fp32"
        short = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.autocast_dtype, str(self.autocast_dtype))
        return f"{short} autocast"


CaseFactory = Callable[..., BenchCase]


@dataclass(frozen=True)
class CaseSpec:
    """A registered case: its factory, the overrides that make it tiny, and where it is listed."""

    factory: CaseFactory
    tiny: dict[str, Any]
    in_suites: bool  # part of the "all" (full size) and "quick" (tiny) suites
    hidden: bool  # harness self-checks: not listed, not offered on the command line


CASES: dict[str, CaseSpec] = {}


def register_case(name: str, *, tiny: dict[str, Any] | None = None, in_suites: bool = True,
                  hidden: bool = False) -> Callable[[CaseFactory], CaseFactory]:
    """Decorator: register `factory(**overrides) -> BenchCase` under `name`.

    `tiny` holds the overrides that shrink the case to a smoke-test size (`--tiny`, the quick suite).
    """

    def decorator(factory: CaseFactory) -> CaseFactory:
        if name in CASES:
            raise ValueError(f"benchmark case {name!r} is already registered")
        CASES[name] = CaseSpec(factory, dict(tiny or {}), in_suites and not hidden, hidden)
        return factory

    return decorator


def public_cases() -> list[str]:
    """Names of the cases offered to users (sorted)."""
    return sorted(name for name, spec in CASES.items() if not spec.hidden)


def suites() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Named suites as (case name, overrides): "all" at full size, "quick" at each case's tiny size."""
    names = [name for name, spec in CASES.items() if spec.in_suites]
    return {"all": [(name, {}) for name in names], "quick": [(name, dict(CASES[name].tiny)) for name in names]}


def make_case(name: str, *, tiny: bool = False, **overrides: Any) -> BenchCase:
    """Build the registered case `name`; `tiny` applies its tiny sizes, then `overrides` (JSON-friendly)."""
    if name not in CASES:
        known = ", ".join(public_cases())
        raise KeyError(f"unknown benchmark case {name!r}; known cases: {known}")
    spec = CASES[name]
    kwargs = {**(spec.tiny if tiny else {}), **overrides}
    case = spec.factory(**kwargs)
    case.factory = name
    case.factory_kwargs = kwargs
    case.factory_module = spec.factory.__module__
    return case


def case_sizes(name: str, defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`defaults` updated with a factory's keyword `overrides`: the sizes and settings of case `name`.

    Factories that share their keywords (the sizes of one architecture) take `**overrides` and resolve them
    here, instead of each repeating a long keyword signature; an unknown keyword is a TypeError, as it
    would be for a factory with an explicit signature.
    """
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise TypeError(f"benchmark case {name!r} got unexpected keyword(s) {unknown}; it takes {sorted(defaults)}")
    return {**defaults, **overrides}


def case_summary(name: str) -> str:
    """First line of a registered factory's docstring."""
    doc = (CASES[name].factory.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def dtype_from_name(name: str) -> torch.dtype | None:
    """"fp32" -> None (no autocast), "bf16" / "fp16" -> the autocast dtype."""
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


# ----------------------------------------------------------------------------------------------
# Running one side
# ----------------------------------------------------------------------------------------------


def _default_loss(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss
    if isinstance(output, torch.Tensor):
        return output.float().pow(2).mean()
    raise TypeError(
        f"cannot derive a loss from a {type(output).__name__}: give the model labels "
        "or set BenchCase.loss_fn"
    )


def _move(batch: Batch, device: str) -> Batch:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class SideRunner:
    """A model with its optimizer and a `step()` that runs one train or inference step."""

    def __init__(self, model: nn.Module, case: BenchCase, batch: Batch):
        self.model = model.to(case.device)
        self.model.train(case.mode == "train")
        self.case = case
        self.batch = batch
        self.loss_fn = case.loss_fn or _default_loss
        self.optimizer = (
            torch.optim.AdamW(self.model.parameters(), lr=case.lr) if case.mode == "train" else None
        )

    def _autocast(self):
        if self.case.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.case.device, dtype=self.case.autocast_dtype)

    def step(self) -> None:
        if self.optimizer is None:
            with torch.inference_mode(), self._autocast():
                self.model(**self.batch)
        else:
            with self._autocast():
                loss = self.loss_fn(self.model(**self.batch))
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        _sync(self.case.device)


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """Run with `threads` torch intra-op threads (None: unchanged), yielding the count in effect; restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or previous)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)


def build_runners(case: BenchCase, seed: int, sides=SIDES) -> dict[str, SideRunner]:
    """One `SideRunner` per side in `sides`, on one batch: the pair built under `seed`, the batch under `seed + 1`."""
    torch.manual_seed(seed)
    ours, ref = case.build_pair()
    models = {"ours": ours, "ref": ref}
    for side in SIDES:
        if side not in sides:
            models.pop(side)
    del ours, ref
    gc.collect()
    torch.manual_seed(seed + 1)
    batch = _move(case.make_batch(), case.device)
    return {side: SideRunner(models[side], case, batch) for side in sides}


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


@dataclass
class SideStats:
    """Step-time statistics of one side, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    stdev_ms: float
    iqr_ms: float
    times_ms: list[float]

    @classmethod
    def from_seconds(cls, times: list[float]) -> "SideStats":
        ms = [t * 1e3 for t in times]
        if len(ms) >= 2:
            q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
            stdev = statistics.stdev(ms)
        else:
            q1 = q3 = stdev = 0.0
        return cls(
            median_ms=statistics.median(ms),
            min_ms=min(ms),
            max_ms=max(ms),
            mean_ms=statistics.fmean(ms),
            stdev_ms=stdev,
            iqr_ms=q3 - q1,
            times_ms=ms,
        )


@dataclass
class CaseResult:
    """Timing (and optionally memory) of one case; `as_dict()` is the JSON row."""

    case: str
    mode: str
    dtype: str
    device: str
    threads: int
    repeats: int
    warmup: int
    ours: SideStats
    ref: SideStats
    speed_ratio: float
    order: list[str]
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, dict[str, Any]] | None = None
    flops: float | None = None  # matrix-product and attention FLOPs of one step of ours (the work the step needs)
    peak: dict[str, Any] | None = None  # the machine's peak for the dtype: {"gflops", "source"} (hf_xfmr.machine)

    @property
    def memory_ratio(self) -> float | None:
        if not self.memory:
            return None
        ours, ref = self.memory["ours"]["peak_mb"], self.memory["ref"]["peak_mb"]
        return ref / ours if ours > 0 else None  # below the RSS page granularity: undefined

    @property
    def process_memory_ratio(self) -> float | None:
        """ours / ref peak process memory above the import-only baseline (< 1: ours uses less)."""
        if not self.memory:
            return None
        ours, ref = (self.memory[side].get("process_peak_mb") for side in SIDES)
        return ours / ref if ours is not None and ref else None

    def peak_fraction(self, side: str) -> float | None:
        """Model FLOPs per step over (`side`'s median step time x the machine's peak): 0.33 = 33% of peak."""
        if not self.flops or not self.peak or not self.peak.get("gflops"):
            return None
        seconds = getattr(self, side).median_ms / 1e3
        return self.flops / seconds / (self.peak["gflops"] * 1e9) if seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["memory_ratio"] = self.memory_ratio
        row["process_memory_ratio"] = self.process_memory_ratio
        row["gflop_per_step"] = None if self.flops is None else self.flops / 1e9
        row["peak_fraction"] = {side: self.peak_fraction(side) for side in SIDES}
        return row


def time_case(
    case: BenchCase,
    *,
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    seed: int = 0,
    progress: bool = False,
    count_flops: bool = True,
) -> CaseResult:
    """Time `case`: build both sides once, `warmup` untimed steps each, then `repeats` timed steps
    each, interleaved ours, ref, ours, ref, ... Each step is timed alone with `time.perf_counter`
    (CUDA is synchronized inside the step). `threads` defaults to `torch.get_num_threads()`.
    `count_flops`: after the timed steps, one more untimed step of ours counts the step's FLOPs (`step_flops`)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    counted: dict[str, float] = {}
    after = (lambda runners: counted.update(flops=step_flops(runners["ours"]))) if count_flops else None
    with torch_threads(threads) as n_threads:
        times, order = time_steps(case, SIDES, repeats=repeats, warmup=warmup, seed=seed, progress=progress,
                                  after=after)
    ours, ref = SideStats.from_seconds(times["ours"]), SideStats.from_seconds(times["ref"])
    return CaseResult(
        case=case.name,
        mode=case.mode,
        dtype=case.dtype_label,
        device=case.device,
        threads=n_threads,
        repeats=repeats,
        warmup=warmup,
        ours=ours,
        ref=ref,
        speed_ratio=ref.median_ms / ours.median_ms if ours.median_ms > 0 else math.inf,
        order=order,
        description=case.description,
        params=dict(case.factory_kwargs),
        flops=counted.get("flops"),
    )


def step_flops(runner: "SideRunner") -> float:
    """FLOPs of one step of `runner` (forward, and backward in train mode), counted by
    `torch.utils.flop_counter.FlopCounterMode`: matrix products and attention, not elementwise work or the
    optimizer. The step is run for real (untimed)."""
    from ..machine import flop_counter

    with flop_counter() as counter:
        runner.step()
    return float(counter.get_total_flops())


def time_steps(case: BenchCase, sides=SIDES, *, repeats: int, warmup: int, seed: int = 0,
               progress: bool = False, after: Callable[[dict[str, "SideRunner"]], None] | None = None,
               ) -> tuple[dict[str, list[float]], list[str]]:
    """Seconds of each of `repeats` steps per side, the sides interleaved, after `warmup` untimed rounds.

    Builds the runners of `sides` (see `build_runners`) and frees them afterwards; `after(runners)`, if given,
    runs once the timed steps are done (e.g. to count FLOPs). Returns (side -> step seconds, the order in
    which the steps ran).
    """
    runners = build_runners(case, seed, sides=tuple(sides))
    for _ in range(warmup):
        for side in sides:
            runners[side].step()
    times: dict[str, list[float]] = {side: [] for side in sides}
    order: list[str] = []
    steps = _progress(range(repeats), enabled=progress, desc=f"{case.name} ({case.dtype_label})", unit="pair")
    for _ in steps:
        for side in sides:
            start = time.perf_counter()
            runners[side].step()
            times[side].append(time.perf_counter() - start)
            order.append(side)
    if after is not None:
        after(runners)
    del runners
    gc.collect()
    return times, order


def _progress(iterable, *, enabled: bool, **kwargs):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, file=sys.stderr, leave=False, **kwargs)


# ----------------------------------------------------------------------------------------------
# Memory (measured in a child process)
# ----------------------------------------------------------------------------------------------


@dataclass
class MemoryResult:
    """Peak memory of one side, in MiB, and how it was measured.

    `peak_mb` is the growth during ONE steady-state step over the memory held right before it (activations,
    gradients, temporaries). `process_peak_mb` is the whole process's peak over its training, from the
    model built to the end of the measured step, above the memory the process held with hf_xfmr imported and
    no model built (`import_mb`): weights, optimizer state and the step's peak together, what a user sees
    in `top`. It is measured on CPU with the RSS high-water mark (None elsewhere).
    """

    side: str
    peak_mb: float
    baseline_mb: float
    method: str
    pid: int = field(default_factory=os.getpid)  # the process that measured
    process_peak_mb: float | None = None
    import_mb: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def proc_status_kb(field_name: str) -> int | None:
    """A KiB field of /proc/self/status (`VmRSS`, `VmHWM`); None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Linux: reset the resident-memory high-water mark (VmHWM) to the current resident size; False elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return proc_status_kb("VmHWM") is not None


def maxrss_kb() -> int:
    """The process's peak resident size in KiB (`getrusage`), where /proc has no resettable one."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss  # bytes on macOS, KiB on Linux


def measure_memory_here(case: BenchCase, side: str, *, warmup: int = 1, seed: int = 0,
                        import_kb: int | None = None) -> MemoryResult:
    """Measure `side` of `case` in THIS process (call it in a fresh process: see `peak_memory`).

    `import_kb`: the process's RSS before any model was built (default: read now); the process peak
    is measured above it."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    import_kb = import_kb if import_kb is not None else proc_status_kb("VmRSS")
    runner = build_runners(case, seed, sides=(side,))[side]
    # Building one side may build both (ours is converted from the reference): the other side is freed
    # by now, so the process peak starts here, with this side's weights alone in memory.
    process_hwm = case.device == "cpu" and import_kb is not None and reset_peak_rss()
    for _ in range(max(warmup, 1)):  # the first step allocates optimizer state and lazy caches
        runner.step()
    gc.collect()
    if case.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        runner.step()
        peak = torch.cuda.max_memory_allocated()
        return MemoryResult(side, (peak - before) / 2**20, before / 2**20, "cuda.max_memory_allocated")
    process_kb = proc_status_kb("VmHWM") if process_hwm else None  # the warm-up steps' peak
    release_freed_memory()  # what the warm-up steps freed but the heap kept is not memory held
    if reset_peak_rss():
        before_kb = proc_status_kb("VmRSS")
        runner.step()
        peak_kb = proc_status_kb("VmHWM")
        process_mb = None if process_kb is None else (max(process_kb, peak_kb) - import_kb) / 1024
        return MemoryResult(side, (peak_kb - before_kb) / 1024, before_kb / 1024, "rss-hwm (clear_refs)",
                            process_peak_mb=process_mb, import_mb=None if import_kb is None else import_kb / 1024)
    before_kb = proc_status_kb("VmRSS") or maxrss_kb()
    runner.step()
    return MemoryResult(side, max(maxrss_kb() - before_kb, 0) / 1024, before_kb / 1024, "ru_maxrss (lower bound)")


def _memory_child(conn, factory: str, kwargs: dict, module: str | None, side: str, threads, warmup, seed) -> None:
    """Body of the child process of `peak_memory`: rebuild the case by name, measure, send the result."""
    try:
        return_freed_memory()
        if module:
            importlib.import_module(module)
        torch.set_num_threads(threads)
        import_kb = proc_status_kb("VmRSS")  # hf_xfmr imported, no model built
        case = make_case(factory, **kwargs)
        conn.send(("ok", measure_memory_here(case, side, warmup=warmup, seed=seed, import_kb=import_kb).as_dict()))
    except BaseException:  # report anything (even SystemExit) to the parent instead of dying silently
        import traceback

        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


_FORKSERVER_PRELOAD = ["hf_xfmr", "hf_xfmr.bench"]


def peak_memory(
    case: BenchCase,
    side: str,
    *,
    threads: int | None = None,
    warmup: int = 1,
    seed: int = 0,
    timeout: float | None = 900,
    process: str = "forkserver",
) -> MemoryResult:
    """Peak memory growth of one step of `side` ("ours" or "ref"), measured in its own process.

    The child rebuilds the case from the registry (`case.factory`, `case.factory_kwargs`), so `case`
    must come from `make_case`. `process="forkserver"` forks each child from a server process that has
    imported hf_xfmr once and never built a model (fast: importing hf_xfmr takes seconds);
    `process="subprocess"` starts `python -m hf_xfmr.bench --memory ...` instead."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    if case.factory is None:
        raise ValueError(
            f"case {case.name!r} was not built by make_case(): a child process can only rebuild "
            "registered cases (register a factory with @register_case and use make_case)"
        )
    threads = threads or torch.get_num_threads()
    module = case.factory_module if case.factory_module != __name__ else None
    if process == "subprocess":
        return _peak_memory_subprocess(case, side, module, threads, warmup, seed, timeout)
    if process != "forkserver":
        raise ValueError(f"process must be 'forkserver' or 'subprocess', got {process!r}")
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_FORKSERVER_PRELOAD + ([module] if module else []))
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_memory_child,
        args=(child_conn, case.factory, case.factory_kwargs, module, side, threads, warmup, seed),
        name=f"hf-xfmr-memory-{case.name}-{side}",
    )
    child.start()
    child_conn.close()
    try:
        if not parent_conn.poll(timeout):
            raise TimeoutError(f"memory measurement of {case.name}/{side} took longer than {timeout} s")
        status, payload = parent_conn.recv()
    except EOFError:
        status, payload = "error", f"the child process died (exit code {child.join(5) or child.exitcode})"
    finally:
        if child.is_alive():
            child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        parent_conn.close()
    if status != "ok":
        raise RuntimeError(f"memory measurement of {case.name}/{side} failed:\n{payload}")
    return MemoryResult(**payload)


def _peak_memory_subprocess(case, side, module, threads, warmup, seed, timeout) -> MemoryResult:
    cmd = [
        sys.executable, "-m", "hf_xfmr.bench", "--memory", case.factory,
        "--side", side,
        "--kwargs", json.dumps(case.factory_kwargs),
        "--threads", str(threads),
        "--warmup", str(warmup),
        "--seed", str(seed),
    ]  # fmt: skip
    if module:
        cmd += ["--import", module]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"memory measurement of {case.name}/{side} failed (exit {proc.returncode}):\n{tail}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"memory measurement of {case.name}/{side} printed no result:\n{proc.stdout[-2000:]}")
    return MemoryResult(**json.loads(lines[-1]))


def measure_case(
    case: BenchCase,
    *,
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    seed: int = 0,
    memory: bool = True,
    progress: bool = False,
    mfu: bool = True,
) -> CaseResult:
    """`time_case` plus, if `memory`, `peak_memory` of both sides (two child processes), and, if `mfu`, the
    machine's peak for the case's dtype (`machine_peak`), against which the step's FLOPs are reported."""
    result = time_case(case, repeats=repeats, warmup=warmup, threads=threads, seed=seed, progress=progress,
                       count_flops=mfu)
    if mfu:
        result.peak = machine_peak(case.device, case.autocast_dtype, result.threads)
    if memory:
        result.memory = {
            side: peak_memory(case, side, threads=result.threads, seed=seed).as_dict() for side in SIDES
        }
    return result


def machine_peak(device: str, dtype: torch.dtype | None, threads: int) -> dict[str, Any] | None:
    """The peak GFLOP/s of `device` for `dtype` (None: fp32) with `threads` CPU threads: the user's
    (`HF_XFMR_PEAK_GFLOPS`) or the cached matmul probe's (`hf_xfmr.machine.peak_gflops`), with its dtype; None
    (and a note on stderr) when it cannot be had, so that a benchmark never fails for want of it."""
    from hf_xfmr import machine

    name = "fp32" if dtype is None else {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype)
    if name is None:
        return None
    try:
        return {**machine.peak_gflops(device, name, threads), "dtype": name}
    except (RuntimeError, ValueError) as err:
        print(f"note: no {name} peak for {device}, MFU not reported: {err}", file=sys.stderr)
        return None


def profile_case(
    case: BenchCase,
    *,
    sides=SIDES,
    steps: int = 1,
    warmup: int = 1,
    threads: int | None = None,
    top: int = 15,
    seed: int = 0,
    sort_by: str = "self_cpu_time_total",
) -> dict[str, str]:
    """`torch.profiler` tables (top `top` ops by `sort_by`) of `steps` steps of each side, after
    `warmup` steps: where the time of each side goes."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if case.device == "cuda" else [])
    tables = {}
    with torch_threads(threads):
        runners = build_runners(case, seed, sides=tuple(sides))
        for side, runner in runners.items():
            for _ in range(warmup):
                runner.step()
            with profile(activities=activities) as prof:
                for _ in range(steps):
                    runner.step()
            tables[side] = prof.key_averages().table(sort_by=sort_by, row_limit=top)
    return tables


# ----------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------


def table_lines(header: list[str], align: str, rows: list[list[Any]]) -> list[str]:
    """A markdown table as lines: the `header` cells, an alignment line (`align`: one letter per column, "l"
    left or "r" right) and a line per row of (already formatted) cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _as_row(row: CaseResult | dict[str, Any]) -> dict[str, Any]:
    return row.as_dict() if isinstance(row, CaseResult) else row


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return "inf"
    return f"{value:{spec}}{suffix}"


def _fmt_mb(value: float | None) -> str:
    return _fmt(value, ".0f" if value is not None and abs(value) >= 10 else ".1f")


def to_markdown(rows: list[CaseResult | dict[str, Any]]) -> str:
    """A markdown table of results, with a legend line under it."""
    header = ["case", "mode", "dtype", "ours ms", "ref ms", "speed ratio", "GFLOP/step", "% of peak ours / ref",
              "ours peak MB", "ref peak MB", "memory ratio", "process MB ours / ref"]
    cells = []
    rows = list(map(_as_row, rows))
    for row in rows:
        mem = row.get("memory") or {}
        ours_mb = mem.get("ours", {}).get("peak_mb")
        ref_mb = mem.get("ref", {}).get("peak_mb")
        process = [mem.get(side, {}).get("process_peak_mb") for side in SIDES]
        process_text = "—" if None in process else (
            f"{_fmt_mb(process[0])} / {_fmt_mb(process[1])} ({_fmt(row.get('process_memory_ratio'), '.2f', 'x')})")
        cells.append([row["case"], row["mode"], row["dtype"], _fmt(row["ours"]["median_ms"], ".1f"),
                      _fmt(row["ref"]["median_ms"], ".1f"), _fmt(row["speed_ratio"], ".2f", "x"),
                      _fmt_gflop(row.get("gflop_per_step")), _peak_text(row), _fmt_mb(ours_mb),
                      _fmt_mb(ref_mb), _fmt(row.get("memory_ratio"), ".2f", "x"), process_text])
    lines = table_lines(header, "lllrrrrrrrrr", cells)
    legend = (
        "\nms: median step time (train = forward + backward + AdamW step). "
        "speed ratio = ref / ours median (> 1: ours faster). "
        "peak MB: memory growth during one step, each side in its own process. "
        "memory ratio = ref / ours peak (> 1: ours uses less). "
        "process MB: the process's peak RSS above its import-only baseline over warm-up and the measured step "
        "(weights, optimizer state and activations), ours / ref in brackets (< 1: ours uses less). "
        "GFLOP/step: matrix-product and attention FLOPs of one step of ours (FlopCounterMode; the work the step "
        "needs); % of peak: those FLOPs per median step over the machine's peak for the dtype (matmul probe, or "
        "HF_XFMR_PEAK_GFLOPS)."
    )
    return "\n".join(lines) + "\n" + legend + "\n\n" + machine_line(rows) + "\n"


def _fmt_gflop(value: float | None) -> str:
    return _fmt(value, ".3g" if value is not None and value < 10 else ".1f")


def _peak_text(row: dict[str, Any]) -> str:
    fractions = row.get("peak_fraction") or {}
    if fractions.get("ours") is None:
        return "—"
    ref = fractions.get("ref")
    return f"{fractions['ours']:.0%} / " + ("—" if ref is None else f"{ref:.0%}")


def machine_line(rows: list[dict[str, Any]]) -> str:
    """The line under a results table naming the machine: the CPU and its AMX / AVX512-BF16 flags, the GPU
    where a row ran on CUDA, and the peaks the MFU columns divide by."""
    from hf_xfmr import machine

    parts = [machine.cpu_summary()]
    if any(row.get("device") == "cuda" for row in rows) and torch.cuda.is_available():
        parts.append(f"GPU: {torch.cuda.get_device_name()}")
    peaks = {}
    for row in rows:
        peak = row.get("peak") or {}
        if peak.get("gflops"):
            peaks[f"{peak.get('dtype', '?')} on {row.get('device', 'cpu')}"] = (peak["gflops"], peak.get("source"))
    if peaks:
        parts.append("peaks: " + ", ".join(f"{key} {gflops:,.0f} GFLOP/s ({source})"
                                           for key, (gflops, source) in peaks.items()))
    return "Machine: " + "; ".join(parts) + "."


def environment() -> dict[str, Any]:
    """Versions and machine facts recorded with every result file."""
    import transformers

    from hf_xfmr import __version__

    info: dict[str, Any] = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hf_xfmr": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if hasattr(os, "getloadavg"):  # other processes on the machine make timings noisy: record it
        info["loadavg_1m"] = round(os.getloadavg()[0], 2)
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    return info


def to_json(rows: list[CaseResult | dict[str, Any]], path: str | os.PathLike, **extra: Any) -> dict[str, Any]:
    """Write `{"environment": ..., "results": [...]}` to `path` (atomically) and return it.
    `threads` in the environment is the thread count the rows were measured with."""
    rows = [_as_row(row) for row in rows]
    env = environment()
    threads = sorted({row["threads"] for row in rows if "threads" in row})
    if threads:
        env["threads"] = threads[0] if len(threads) == 1 else threads
    from hf_xfmr import machine

    devices = {row.get("device", "cpu") for row in rows}
    payload = {"environment": env, "machine": machine.machine_info("cuda" if "cuda" in devices else "cpu"), **extra,
               "results": rows}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)
    return payload


# ----------------------------------------------------------------------------------------------
# Child-process entry point: python -m hf_xfmr.bench --memory CASE --side ours|ref
# ----------------------------------------------------------------------------------------------


def memory_main(argv: list[str] | None = None) -> int:
    """`python -m hf_xfmr.bench --memory CASE --side ours|ref ...`: one side's memory, one JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m hf_xfmr.bench",
        description="Measure one side of a registered benchmark case in this process and print "
        "one JSON line (used by hf_xfmr.bench.peak_memory; prefer `hf-xfmr bench`).",
    )
    parser.add_argument("--memory", metavar="CASE", required=True, help="registered case name")
    parser.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--kwargs", default="{}", help="JSON object of factory overrides")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        help="module to import first (registers out-of-tree cases)")  # fmt: skip
    args = parser.parse_args(argv)
    return_freed_memory()
    for module in args.imports:
        importlib.import_module(module)
    import_kb = proc_status_kb("VmRSS")  # hf_xfmr imported, no model built
    case = make_case(args.memory, **json.loads(args.kwargs))
    with torch_threads(args.threads):
        result = measure_memory_here(case, args.side, warmup=args.warmup, seed=args.seed, import_kb=import_kb)
    print(json.dumps(result.as_dict()), flush=True)
    return 0

