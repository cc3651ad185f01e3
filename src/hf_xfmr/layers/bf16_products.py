"""bf16 matrix products computed by the fp32 kernels, on CPUs whose bf16 kernels are the slow ones.

Under `torch.autocast("cpu", dtype=torch.bfloat16)` (`--mixed_precision bf16`, `--bf16`, Trainer's `bf16=True`)
every projection, batched product and attention call runs in bf16. On a CPU with AMX that is the fast path.
On one without (AVX2, or AVX512-BF16 alone) torch's bf16 products fall back to slow kernels: 10-30x the fp32
time on a 2-core AMD EPYC (a 4096 x 256 x 1024 linear layer, forward and backward: 2.5 s against 92 ms), and
the whole step slows down accordingly.

A bf16 product is a product of bf16-rounded operands accumulated in fp32 and rounded to bf16 at the end. The
product of two bf16 numbers (8-bit significands) is exact in fp32 (24 bits), so the fp32 kernel given the
same rounded operands computes the same thing, up to the order of the fp32 sums; that is what this module
does on such CPUs, at the fp32 kernels' speed:

    out = bf16(fp32_product(bf16(a).float(), bf16(b).float()))

for `F.linear` (with the backward written out, so that the activations kept for it are bf16, as autocast
keeps them), matmul / mm / bmm / addmm / baddbmm / einsum and `F.scaled_dot_product_attention`. Gradients are
rounded to bf16 where autocast's would be (the products' outputs and inputs). Everything else runs as
autocast runs it.

Which path: `HF_XFMR_BF16_PRODUCTS` = `auto` (the default: the fp32 kernels on a CPU without AMX, the bf16
ones with AMX; on GPUs autocast is never touched), `fp32` (always the fp32 kernels on CPU) or `native`
(torch's bf16 kernels: autocast exactly as torch runs it, the reference's behaviour). It applies to the
forward of every hf_xfmr model (`XfmrPreTrainedModel` runs each model class's forward inside `bf16_products()`,
so inside the autocast of Accelerate and Trainer, which wrap the forward), to its backward, and
to the layers gradient checkpointing replays (`keep_bf16_products`). A compiled graph cannot take this path
(it would run torch's bf16 kernels): `--compile` keeps such bf16 steps eager and says so once.
"""

import functools
import os
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

BF16_PRODUCTS_ENV = "HF_XFMR_BF16_PRODUCTS"
CHOICES = ("auto", "fp32", "native")
CPUINFO = "/proc/cpuinfo"

# The products autocast runs in bf16 on CPU that hf_xfmr models call (as functions or Tensor methods).
_PRODUCTS = {
    torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.mm, torch.Tensor.mm,
    torch.bmm, torch.Tensor.bmm, torch.addmm, torch.baddbmm, torch.einsum, F.scaled_dot_product_attention,
}


def bf16_products_choice() -> str:
    """`HF_XFMR_BF16_PRODUCTS` (`auto`, `fp32` or `native`), checked."""
    choice = os.environ.get(BF16_PRODUCTS_ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{BF16_PRODUCTS_ENV}={choice!r} is not a choice: use auto (the default: bf16 products "
                         f"through the fp32 kernels on CPUs without AMX), fp32 (always on CPU) or native (torch's "
                         f"bf16 kernels).")
    return choice


def proc_cpuinfo() -> tuple[str | None, set[str] | None]:
    """(model name, flags) of the first processor in /proc/cpuinfo; (None, None) where there is none."""
    try:
        with open(CPUINFO) as file:
            text = file.read()
    except OSError:
        return None, None
    model, flags = None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and flags is None:  # x86 / ARM
            flags = set(value.split())
        if model is not None and flags is not None:
            break
    return model, flags


@functools.cache
def _cpu_has_amx() -> bool | None:
    """Whether the CPU has AMX-BF16; None where the OS does not say (then `auto` leaves torch's kernels)."""
    _, flags = proc_cpuinfo()
    return None if flags is None else "amx_bf16" in flags


def products_in_fp32() -> bool:
    """Whether bf16 autocast on the CPU runs its products through the fp32 kernels here (see the module doc)."""
    choice = bf16_products_choice()
    return choice == "fp32" or (choice == "auto" and _cpu_has_amx() is False)


def _cpu_bf16_autocast() -> bool:
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def _round(value):
    """A floating tensor rounded to bf16 and held in fp32 (the operand of an fp32 kernel); anything else as is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.bfloat16).float()
    if isinstance(value, (list, tuple)):
        return type(value)(_round(v) for v in value)
    return value


class _Bf16Linear(torch.autograd.Function):
    """`F.linear` as bf16 autocast computes it, through the fp32 kernel; keeps bf16 operands for the backward."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x16, w16 = x.to(torch.bfloat16), weight.to(torch.bfloat16)
        ctx.save_for_backward(x16, w16)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        with torch.autocast("cpu", enabled=False):
            out = F.linear(x16.float(), w16.float(), _round(bias))  # (..., out)
        return out.to(torch.bfloat16)

    @staticmethod
    def backward(ctx, grad):
        x16, w16 = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        g = grad.to(torch.bfloat16).float()  # (..., out)
        grad_x = grad_w = grad_b = None
        with torch.autocast("cpu", enabled=False):
            if ctx.needs_input_grad[0]:
                grad_x = (g @ w16.float()).to(torch.bfloat16).to(x_dtype)  # (..., in)
            g2 = g.reshape(-1, g.shape[-1])  # (N, out)
            if ctx.needs_input_grad[1]:
                grad_w = (g2.T @ x16.reshape(-1, x16.shape[-1]).float()).to(torch.bfloat16).to(w_dtype)  # (out, in)
            if ctx.needs_input_grad[2]:
                grad_b = g2.sum(0).to(torch.bfloat16).to(b_dtype)
        return grad_x, grad_w, grad_b


class Bf16ProductsInFp32(TorchFunctionMode):
    """While active under CPU bf16 autocast: the products of `_PRODUCTS` and `F.linear` run through the fp32
    kernels on bf16-rounded operands and return bf16, as autocast's would."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # An `out=` product is not autocast's (it runs in the dtype of `out`): as it is.
        if not _cpu_bf16_autocast() or not (func is F.linear or func in _PRODUCTS) or "out" in kwargs or \
                not any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in (*args, *kwargs.values())):
            return func(*args, **kwargs)
        if func is F.linear:
            named = dict(zip(("input", "weight", "bias"), args), **kwargs)
            return _Bf16Linear.apply(named["input"], named["weight"], named.get("bias"))
        with torch.autocast("cpu", enabled=False):
            out = func(*_round(args), **{k: _round(v) for k, v in kwargs.items()})
        return out.to(torch.bfloat16) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


def _active() -> bool:
    from torch.overrides import _get_current_function_mode_stack

    return any(isinstance(mode, Bf16ProductsInFp32) for mode in _get_current_function_mode_stack())


def bf16_products_wanted() -> bool:
    """Whether a forward run now would take the fp32 kernels: CPU bf16 autocast is on, on a CPU where they are
    the faster ones (see the module doc)."""
    return _cpu_bf16_autocast() and products_in_fp32()


def bf16_products():
    """The context a model's forward runs in: `Bf16ProductsInFp32` where `bf16_products_wanted()` (and not yet
    active, and not inside a graph torch.compile traces), else nothing."""
    if not bf16_products_wanted() or torch.compiler.is_compiling() or _active():
        return nullcontext()
    return Bf16ProductsInFp32()


def keep_bf16_products(checkpoint_func):
    """Wrap a gradient-checkpointing function so that the layers it replays in the backward run their products
    as the forward ran them (the replay happens outside the forward's `bf16_products()`)."""

    @functools.wraps(checkpoint_func)
    def run(function, *args, **kwargs):
        if not _active():
            return checkpoint_func(function, *args, **kwargs)

        def in_products(*inner_args, **inner_kwargs):
            with nullcontext() if _active() else Bf16ProductsInFp32():
                return function(*inner_args, **inner_kwargs)

        return checkpoint_func(in_products, *args, **kwargs)

    return run
