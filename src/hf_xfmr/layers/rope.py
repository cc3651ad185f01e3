"""Rotary position embeddings (RoPE): Su et al., 2021, "RoFormer", https://arxiv.org/abs/2104.09864.

A pair of dimensions (i, i + D/2) of each query and key is rotated by the angle position * inv_freq[i],
so q.k depends on the positions only through their difference. The "rotate half" pairing (first half
with second half, not adjacent dimensions) is the GPT-NeoX / Llama / ModernBERT layout.
Positions are any integer tensor, so unpadded (N,) tokens and padded (B, T) batches work alike.
"""

import math

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


# RoPE scalings for models trained at one context length and run at a longer one. Each returns the (D/2,)
# inverse frequencies and the factor cos/sin are multiplied by (1.0 for the three below).
ROPE_TYPES = ("default", "linear", "llama3")


def _llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings):
    """Llama 3.1's frequency-dependent scaling (Meta, 2024, "The Llama 3 Herd of Models", section 3.4): rotations
    whose wavelength exceeds the pretraining context / low_freq_factor are slowed by `factor`, those shorter than
    context / high_freq_factor are kept, and the band between is interpolated smoothly."""
    wavelen = 2 * math.pi / inv_freq  # (D/2,)
    low_freq_wavelen = original_max_position_embeddings / low_freq_factor
    high_freq_wavelen = original_max_position_embeddings / high_freq_factor
    smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    interpolated = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, interpolated, scaled)


def scaled_rope_inv_freq(head_dim, rope_parameters, device=None):
    """(inv_freq (D/2,) float32, attention_factor) for a transformers-style `rope_parameters` dict:
    `rope_type` one of ROPE_TYPES and `rope_theta`, plus `factor` (linear: positions divided by it, Chen et
    al., 2023, "Extending Context Window ... via Positional Interpolation") or, for llama3, `factor`,
    `low_freq_factor`, `high_freq_factor` and `original_max_position_embeddings`."""
    rope_type = rope_parameters.get("rope_type", "default")
    inv_freq = rope_inv_freq(head_dim, rope_parameters["rope_theta"], device=device)
    if rope_type == "linear":
        inv_freq = inv_freq / rope_parameters["factor"]
    elif rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, rope_parameters["factor"], rope_parameters["low_freq_factor"],
                                    rope_parameters["high_freq_factor"],
                                    rope_parameters["original_max_position_embeddings"])
    elif rope_type != "default":
        raise ValueError(f"rope_type {rope_type!r} is not supported; valid types: {', '.join(ROPE_TYPES)}.")
    return inv_freq, 1.0
