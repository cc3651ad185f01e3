"""GPT <-> transformers `GPT2*`: the only place that knows transformers' GPT-2 key layout.

GPT-2 stores its projections as Conv1D, whose weight is the transpose of `nn.Linear`'s, and fuses
the attention input projection: `c_attn.weight` (C, 3C) holds q, k and v side by side. The tensor
rules below transpose, split and concatenate them; every other key is only renamed.
"""

import torch

from ..conversion import Conversion, TensorRule, task_classes, transpose
from . import modeling_gpt


def fuse_qkv(q, k, v):
    """Our three (C, C) Linear weights (or (C,) biases) -> GPT-2's Conv1D c_attn (C, 3C) (or (3C,))."""
    return torch.cat([transpose(q), transpose(k), transpose(v)], dim=-1)


def split_qkv(c_attn):
    """GPT-2's fused c_attn (C, 3C) weight or (3C,) bias -> our q, k, v (Linear layout)."""
    return tuple(transpose(part) for part in c_attn.chunk(3, dim=-1))


def _qkv_rule(param: str) -> TensorRule:
    ours = tuple(f"layers.{{i}}.attn.{name}_proj.{param}" for name in ("q", "k", "v"))
    return TensorRule(ours=ours, theirs=f"h.{{i}}.attn.c_attn.{param}", to_hf=fuse_qkv, from_hf=split_qkv)


def _transposed(ours: str, theirs: str) -> TensorRule:
    return TensorRule(ours=ours, theirs=theirs, to_hf=transpose, from_hf=lambda w: (transpose(w),))


TENSOR_RULES = (
    _qkv_rule("weight"),
    _qkv_rule("bias"),
    _transposed("layers.{i}.attn.o_proj.weight", "h.{i}.attn.c_proj.weight"),
    _transposed("layers.{i}.mlp.up_proj.weight", "h.{i}.mlp.c_fc.weight"),
    _transposed("layers.{i}.mlp.down_proj.weight", "h.{i}.mlp.c_proj.weight"),
)

# (ours, transformers) key prefixes of what is only renamed (biases of the transposed Conv1Ds included).
BODY_RULES = (
    ("embeddings.word_embeddings.", "wte."),
    ("embeddings.position_embeddings.", "wpe."),
    ("layers.{i}.attn_norm.", "h.{i}.ln_1."),
    ("layers.{i}.attn.o_proj.", "h.{i}.attn.c_proj."),
    ("layers.{i}.mlp_norm.", "h.{i}.ln_2."),
    ("layers.{i}.mlp.up_proj.", "h.{i}.mlp.c_fc."),
    ("layers.{i}.mlp.down_proj.", "h.{i}.mlp.c_proj."),
    ("norm.", "ln_f."),
)

HEAD_RULES = (
    ("lm_head.", "lm_head."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    if getattr(config, "add_cross_attention", False):
        raise ValueError(
            "hf_xfmr's GPT is decoder-only: GPT-2 checkpoints with cross-attention (add_cross_attention=True, "
            "used inside EncoderDecoderModel) are not supported."
        )
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        raise ValueError(f"eos_token_id={eos!r}: hf_xfmr's GPT takes a single end-of-sequence id; set one "
                         f"(the generation config may still list several).")


CONVERSION = Conversion(
    hf_model_type="gpt2",
    tasks=task_classes(modeling_gpt, ("base", "causal-lm", "sequence-classification", "token-classification",
                                      "question-answering"),
                       ours="GPT", theirs="GPT2", hf_names={"causal-lm": "GPT2LMHeadModel"}),
    hf_base_prefix="transformer",
    body_rules=BODY_RULES,
    head_rules=HEAD_RULES,
    task_head_rules={"sequence-classification": (("classifier.", "score."),)},
    tensor_rules=TENSOR_RULES,
    config_extras=("classifier_dropout",),
    check_hf_config=check_hf_config,
)
