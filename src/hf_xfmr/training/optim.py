"""Training recipe pieces used by name: optimizers, learning-rate schedules, batch-size warmup.

Optimizers (`build_optimizer(name, ...)`):
    adamw         torch.optim.AdamW (decoupled weight decay, Loshchilov & Hutter 2019), by default its
                  fused kernel (one pass over each tensor) wherever torch has one for the parameters (CPU and
                  GPU): the same update as the per-tensor loop up to fp32 rounding (~1 ulp per step; a weight sum
                  after 8 distillation steps moves by 8e-7 relative) and, on CPU, 6-8x faster (11.1M parameters
                  at 1 thread: 25-37 ms instead of 204-266 ms per step, docs/benchmarks.md "bf16 on CPU"). It is
                  what transformers' Trainer uses by default (`adamw_torch_fused`), and so the default of
                  pretraining and distillation too, which update as finetuning does; `fused=False` gives the loop.
    stable_adamw  AdamW with per-tensor update clipping (Wortsman et al. 2023, "Stable and low-precision
                  training for large-scale vision-language models", sec. 3.4): the step size of each tensor
                  is divided by max(1, RMS(g^2 / v)), which damps the large updates that follow a stale
                  second-moment estimate. ModernBERT pretrains with it.

Schedules (`lr_multiplier(name, step, ...)`): the learning rate at optimizer step `step` (0-based) is
`learning_rate * lr_multiplier(...)`. Every schedule starts with a linear warmup from 0.
    constant      1 after warmup.
    linear        linear decay to `min_lr_ratio` at the last step (BERT).
    cosine        half-cosine decay to `min_lr_ratio` (GPT-3, RoBERTa's successors).
    wsd           warmup-stable-decay: constant, then a linear decay over the last `decay_ratio` of the run
                  (Hu et al. 2024, MiniCPM).
    1-sqrt        warmup-stable-decay whose cool-down follows 1 - sqrt(progress) (Hägele et al. 2024,
                  "Scaling laws and compute-optimal training beyond fixed training durations").
Schedules are pure functions of the step: nothing to checkpoint, and the value after a resume is exact.

Batch-size warmup (`micro_batches_per_step`): the number of micro-batches accumulated per optimizer step
ramps linearly from 1 to `gradient_accumulation_steps` over the first `warmup_steps` steps, so the
effective batch grows from `per_device_batch * world` to its full size (ModernBERT warms its batch size
up the same way; here it is built from whole micro-batches so no data is dropped).
"""

import math
from collections.abc import Iterable

import torch

from .arguments import OPTIMIZERS, SCHEDULES  # the names --optimizer and --lr_scheduler accept


class StableAdamW(torch.optim.Optimizer):
    """AdamW whose per-tensor step is divided by max(1, RMS(g_t^2 / v_t)) (Wortsman et al. 2023).

    Args:
        params: parameters or parameter groups.
        lr, betas, eps, weight_decay: as in `torch.optim.AdamW` (decoupled weight decay, scaled by lr).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-6,
                 weight_decay: float = 0.0):
        if lr < 0 or eps <= 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"StableAdamW: invalid lr={lr}, betas={betas}, eps={eps} or weight_decay={weight_decay} "
                             "(need lr >= 0, 0 <= betas < 1, eps > 0, weight_decay >= 0).")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = float(state["step"])
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias1, bias2 = 1 - beta1 ** t, 1 - beta2 ** t
                v_hat = exp_avg_sq / bias2
                # Update clipping (sec. 3.4): RMS of g^2 / v over the tensor; eps^2 keeps the ratio finite.
                rms = torch.sqrt(torch.mean(grad * grad / v_hat.clamp_min(eps * eps)))
                step_lr = lr / max(1.0, float(rms))
                if weight_decay:
                    p.mul_(1 - step_lr * weight_decay)
                update = (exp_avg / bias1) / (v_hat.sqrt() + eps)
                p.add_(update.to(p.dtype), alpha=-step_lr)
        return loss


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on matrices (Linear/Embedding weights), none on biases and norm weights.

    Tied parameters appear once (`named_parameters` deduplicates them)."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.ndim >= 2 else no_decay).append(param)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]


def fused_adamw(params: Iterable, **hyperparameters) -> torch.optim.AdamW:
    """`torch.optim.AdamW(params, fused=True, **hyperparameters)`, or the default implementation where torch
    has no fused kernel for these parameters (a device or dtype it does not cover: torch says so with a
    RuntimeError at construction, before any state exists)."""
    params = list(params)  # may be a generator: read once, used by either constructor
    try:
        return torch.optim.AdamW(params, fused=True, **hyperparameters)
    except RuntimeError:
        return torch.optim.AdamW(params, **hyperparameters)


def build_optimizer(name: str, params: Iterable, *, lr: float, betas: tuple[float, float], eps: float,
                    weight_decay: float, fused: bool = True) -> torch.optim.Optimizer:
    """An optimizer by name (`OPTIMIZERS`). `params` may be parameter groups with their own weight decay.
    `fused` (the default of every training loop): AdamW's fused kernel where torch has one (`fused_adamw`);
    False gives the per-tensor loop. stable_adamw has none and ignores it."""
    if name == "adamw":
        hyperparameters = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        return fused_adamw(params, **hyperparameters) if fused else torch.optim.AdamW(params, **hyperparameters)
    if name == "stable_adamw":
        return StableAdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise ValueError(f"Unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}.")


def lr_multiplier(name: str, step: int, total_steps: int, warmup_steps: int = 0, decay_ratio: float = 0.1,
                  min_lr_ratio: float = 0.0) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based) of `total_steps`.

    warmup_steps: linear warmup from 0 (step 0 gets 1 / warmup_steps of the peak).
    decay_ratio: share of `total_steps` spent in the final decay of `wsd` and `1-sqrt`.
    min_lr_ratio: the floor reached at the end of the decay, as a fraction of the peak.
    """
    if name not in SCHEDULES:
        raise ValueError(f"Unknown learning-rate schedule {name!r}; choose one of: {', '.join(SCHEDULES)}.")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if name == "constant":
        return 1.0
    if name in ("linear", "cosine"):
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        shape = 1.0 - progress if name == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_lr_ratio + (1.0 - min_lr_ratio) * shape
    decay_steps = max(1, round(decay_ratio * total_steps))
    decay_start = max(warmup_steps, total_steps - decay_steps)
    if step < decay_start:
        return 1.0
    progress = min(1.0, (step - decay_start + 1) / max(1, total_steps - decay_start))
    shape = 1.0 - progress if name == "wsd" else 1.0 - math.sqrt(progress)
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def micro_batches_per_step(step: int, accumulation_steps: int, warmup_steps: int) -> int:
    """Micro-batches accumulated at optimizer step `step`: 1 rising linearly to `accumulation_steps`
    over `warmup_steps` steps (batch-size warmup), then `accumulation_steps`."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return accumulation_steps
    return 1 + (accumulation_steps - 1) * step // warmup_steps


def micro_batches_before(step: int, accumulation_steps: int, warmup_steps: int) -> int:
    """Micro-batches consumed by optimizer steps 0 .. step-1 (where a resumed run continues reading)."""
    ramp = min(step, max(0, warmup_steps))
    consumed = sum(micro_batches_per_step(s, accumulation_steps, warmup_steps) for s in range(ramp))
    return consumed + (step - ramp) * accumulation_steps
