"""Dropout that is cheaper on CPU than `torch.nn.functional.dropout`, with the same distribution.

On CPU, `F.dropout` draws a float64-backed Bernoulli sample per element and then multiplies twice;
for BERT's attention-probability dropout (B*H*T*T elements per layer) that is ~15% of a training step.
Here the keep mask comes from one 31-bit random integer per element compared with a threshold
(the keep probability is exact to 2^-31), and forward and backward are one `where` each. Off CPU,
under `torch.compile` (dynamo cannot trace `random_()`, and inductor generates its own fused dropout),
and whenever dropout is inactive, this is plain `F.dropout`.
"""

import torch
import torch.nn.functional as F
from torch import nn

_RANDOM_RANGE = 2**31  # int32 random_() draws uniformly from [0, 2^31)


class _CPUDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        threshold = round(p * _RANDOM_RANGE)
        keep = torch.empty(x.shape, dtype=torch.int32, device=x.device).random_() >= threshold  # (...) bool
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, x, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element with probability `p` and scale survivors by 1 / (1 - p) (when training)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    return _CPUDropout.apply(x, p)


class Dropout(nn.Dropout):
    """Drop-in `nn.Dropout` using `dropout` above (same `p`, same state dict: none)."""

    def forward(self, x):
        return dropout(x, self.p, self.training)
