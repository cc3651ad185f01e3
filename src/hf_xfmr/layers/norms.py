"""Normalisation layers.

LayerNorm is torch's own (it takes bias=False natively since torch 2.1, as ModernBERT needs), so
checkpoints keep the familiar `weight`/`bias` names; RMSNorm is Zhang & Sennrich 2019,
https://arxiv.org/abs/1910.07467.
"""

import torch
import torch.nn as nn


def layer_norm(hidden_size, eps=1e-5, bias=True):
    """nn.LayerNorm over the last dimension, optionally without bias."""
    return nn.LayerNorm(hidden_size, eps=eps, bias=bias)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, without mean-centring or bias.

    Computed in float32 and cast back: in bf16 the mean of squares loses too much precision.
    """

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"
