"""Weight initialisation helpers for a model's `_init_weights(module)`.

They go through `transformers.initialization`, whose functions skip tensors already loaded from a
checkpoint (flagged `_is_hf_initialized`): raw `.data` writes would overwrite loaded weights.
`_init_weights` is only called on modules that own parameters, so dispatch is on leaf types.
"""

import torch
import torch.nn as nn
from transformers import initialization as init

from .norms import RMSNorm


def _init_norm_and_padding_(module):
    """Shared tail: norms to identity, the embedding padding row to zero."""
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        # Slicing drops the `_is_hf_initialized` flag, so check it on the whole weight.
        if not getattr(module.weight, "_is_hf_initialized", False):
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, (nn.LayerNorm, RMSNorm)):
        if module.weight is not None:
            init.ones_(module.weight)
        if getattr(module, "bias", None) is not None:
            init.zeros_(module.bias)


def normal_init_(module, std):
    """BERT/GPT init: Linear and Embedding weights ~ N(0, std), biases 0, norms to identity."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        init.zeros_(module.bias)
    _init_norm_and_padding_(module)


def truncated_normal_init_(module, std, cutoff_factor=2.0):
    """ModernBERT init: like normal_init_ but truncated at +-cutoff_factor * std."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        cutoff = cutoff_factor * std
        init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cutoff, b=cutoff)
    if isinstance(module, nn.Linear) and module.bias is not None:
        init.zeros_(module.bias)
    _init_norm_and_padding_(module)
