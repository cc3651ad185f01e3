"""Pure torch math shared by the models: no configs, no architecture names.

Every module here must stay inlinable into a flat Hub export: top-level definitions only,
no import-time side effects, imports limited to the standard library, torch and public transformers.
"""

from .attention import (
    ATTENTION_KERNELS,
    attention_kernel,
    eager_attention_forward,
    flash_attention_forward,
    flash_varlen_attention,
    local_attention,
    resolve_kernel,
    resolve_varlen_kernel,
    sdpa_attention_forward,
    self_attention,
    varlen_attention,
    varlen_attention_reference,
)
from .cross_entropy import linear_cross_entropy
from .init import normal_init_, truncated_normal_init_
from .masks import (
    block_diagonal_mask,
    causal_mask,
    combine_masks,
    decoder_attention_mask,
    document_ids_from_cu_seqlens,
    document_ids_from_position_ids,
    padding_mask,
    sliding_window_mask,
    to_additive_mask,
)
from .mlp import ACTIVATIONS, GLU, MLP, get_activation
from .norms import RMSNorm, layer_norm
from .padding import VarlenBatch, encoder_padding, pad_input, unpad_input, unpad_input_ids, varlen_batch
from .rope import apply_rope, rope_cos_sin, rope_inv_freq, rotate_half
