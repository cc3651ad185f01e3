"""Feed-forward blocks: the classic two-layer MLP (BERT, GPT) and the gated GLU (GeGLU in ModernBERT).

GLU variants: Shazeer 2020, "GLU Variants Improve Transformer", https://arxiv.org/abs/2002.05202.
"""

import torch.nn as nn

from .dropout import Dropout

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


def get_activation(name):
    """Activation module for a config's `hidden_act` name.

    "gelu" is the exact erf form (BERT); "gelu_new" and "gelu_pytorch_tanh" are the tanh
    approximation (GPT-2), which transformers keeps under both names; "swish" is "silu".
    """
    if name == "gelu":
        return nn.GELU()
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")
    if name == "relu":
        return nn.ReLU()
    if name in ("silu", "swish"):
        return nn.SiLU()
    raise ValueError(f"unknown activation {name!r}; valid names are {', '.join(ACTIVATIONS)}")


class MLP(nn.Module):
    """(..., C) -> (..., C): down_proj(act(up_proj(x))), dropout on the output (BERT's hidden dropout)."""

    def __init__(self, hidden_size, intermediate_size, activation="gelu", bias=True, dropout=0.0):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.act = get_activation(activation)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.down_proj(self.act(self.up_proj(x))))


class GLU(nn.Module):
    """(..., C) -> (..., C): down_proj(dropout(act(x_in) * gate)) with [x_in, gate] = up_proj(x).

    One fused up_proj of width 2 * intermediate_size; the activation goes on the FIRST half, as in
    ModernBERT's `Wi` layout, so its checkpoints load without reordering rows.
    """

    def __init__(self, hidden_size, intermediate_size, activation="gelu", bias=False, dropout=0.0):
        super().__init__()
        self.up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.act = get_activation(activation)
        self.dropout = Dropout(dropout)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x):
        x_in, gate = self.up_proj(x).chunk(2, dim=-1)  # 2 x (..., intermediate_size)
        return self.down_proj(self.dropout(self.act(x_in) * gate))


class GatedMLP(nn.Module):
    """(..., C) -> (..., C): down_proj(act(gate_proj(x)) * up_proj(x)), SwiGLU with activation "silu"
    (Shazeer 2020; Llama, Mistral, Qwen2). Separate gate and up projections, as their checkpoints store them,
    so LoRA can target each."""

    def __init__(self, hidden_size, intermediate_size, activation="silu", bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = get_activation(activation)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
