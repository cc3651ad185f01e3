"""Rotary position embeddings (RoPE): Su et al., 2021, "RoFormer", https://arxiv.org/abs/2104.09864.

A pair of dimensions (i, i + D/2) of each query and key is rotated by the angle position * inv_freq[i],
so q.k depends on the positions only through their difference. The "rotate half" pairing (first half
with second half, not adjacent dimensions) is the GPT-NeoX / Llama / ModernBERT layout.
Positions are any integer tensor, so unpadded (N,) tokens and padded (B, T) batches work alike.
"""

import torch


def rope_inv_freq(head_dim, theta, device=None):
    """(D/2,) float32 inverse frequencies theta^(-2i/D), i = 0 .. D/2 - 1."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head size, got {head_dim}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim
    return 1.0 / (theta**exponents)


def rope_cos_sin(position_ids, inv_freq, dtype=torch.float32):
    """Integer positions (...) -> (cos, sin), each (..., D) in `dtype`; angles computed in float32."""
    angles = position_ids[..., None].float() * inv_freq.to(position_ids.device)  # (..., D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (..., D): both halves of a pair share an angle
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x):
    """(..., D) -> (..., D): [x1, x2] -> [-x2, x1] with x1, x2 the two halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """Rotate (..., D) by angles whose cos/sin broadcast against x; in float32, cast back to x's dtype."""
    x32 = x.float()
    return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)
