"""Freed memory kept for reuse while a model trains on the CPU, instead of returned to the OS at every free.

torch allocates CPU tensors with the C library's `malloc`. glibc serves a large block (128 KiB at first, at
most 32 MiB under its own rules) with a fresh `mmap` and unmaps it when it is freed, so every large tensor
of a training step (a (B, H, T, T) attention tensor at 8 x 12 x 512 x 512 is 100 MB, several per layer)
starts as untouched pages: the kernel zeroes each 4 KiB page on first touch. Measured on a 2-core AMD EPYC
(torch 2.13, 2 threads): a softmax into a fresh 100 MB tensor takes 50 ms against 15 ms into a reused one,
and a BERT-base MLM training step at 8 x 512 runs in 1,131 ms against 1,334 ms, for 9% more peak memory
(the freed blocks held between uses). The usual cure for CPU training is an allocator that keeps freed
memory (jemalloc or tcmalloc preloaded; what `torch.backends.xeon.run_cpu` sets up); glibc does the same
when told to (`mallopt`), which needs no preloading:

- `M_MMAP_THRESHOLD` = 1 GiB: blocks below it come from the heap, and a freed one is reused by the next
  allocation that fits;
- `M_TRIM_THRESHOLD` = 1 GiB: the free top of the heap goes back to the OS only beyond that.

hf_xfmr does this once per process, at the first forward of an hf_xfmr model that trains on the CPU
(`model.training` and gradients enabled): `XfmrPreTrainedModel` wraps every model class's forward, which calls
`on_training_forward`. A
process that only runs inference is left alone, and so is one whose first training model was set up to save
memory (gradient checkpointing on, or quantized weights as in QLoRA): there the heap's fragmentation costs
more than such a run saves (a Llama QLoRA step, `llama-sft-qlora-padded`: process peak 343 MB above the
import baseline under glibc's rules, 623 MB with freed memory kept). The switch is the environment variable `HF_XFMR_MALLOC`:
`reuse` (the default) or `system` (leave the allocator as the process has it: glibc's own rules, or
whatever allocator was preloaded). Where the C library is not glibc, nothing changes.
"""

import ctypes
import functools
import os
import sys

import torch

MALLOC_ENV = "HF_XFMR_MALLOC"
CHOICES = ("reuse", "system")
KEEP_BYTES = 1 << 30  # blocks up to 1 GiB come from the heap; up to 1 GiB of free heap top is kept
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)

_first_training_seen = False


def malloc_choice() -> str:
    """`HF_XFMR_MALLOC` (`reuse` or `system`), checked."""
    choice = os.environ.get(MALLOC_ENV, "reuse").strip().lower() or "reuse"
    if choice not in CHOICES:
        raise ValueError(f"{MALLOC_ENV}={choice!r} is not a choice: use reuse (the default: keep freed memory for "
                         f"the next tensors while training on CPU) or system (the C library's own rules).")
    return choice


@functools.cache
def _glibc():
    """glibc as a ctypes library, or None (another C library, or another OS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc has it; musl does not)
        return libc
    except (OSError, AttributeError):
        return None


def reuse_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to `KEEP_BYTES` for reuse (see the module docstring). True when it
    took effect; False where the C library is not glibc or refused the values. Idempotent."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, KEEP_BYTES)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES))


def return_freed_memory() -> bool:
    """The opposite of `reuse_freed_memory`: every block of 128 KiB or more mmapped and unmapped when freed (a fixed
    threshold, which glibc then never raises), so the resident size follows the live tensors; for measuring memory
    (the benchmark's memory child). True when it took effect."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024))


def release_freed_memory() -> bool:
    """Give the heap's free memory back to the OS now (`malloc_trim(0)`), e.g. before reading the resident size
    as the memory a process holds. True where glibc released something."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def saves_memory(model) -> bool:
    """Whether `model` was set up to save memory: gradient checkpointing on, or quantized weights (QLoRA)."""
    return bool(getattr(model, "is_gradient_checkpointing", False) or getattr(model, "is_quantized", False)
                or getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False))


def on_training_forward(model) -> None:
    """The first time a model trains in this process: `reuse_freed_memory()` if it trains on the CPU, unless
    `HF_XFMR_MALLOC=system` or `model` saves memory (`saves_memory`)."""
    global _first_training_seen
    if _first_training_seen:
        return
    _first_training_seen = True
    on_cpu = getattr(model, "device", torch.device("cpu")).type == "cpu"
    if malloc_choice() == "reuse" and on_cpu and not saves_memory(model):
        reuse_freed_memory()
