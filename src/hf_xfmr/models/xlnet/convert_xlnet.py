"""XLNet <-> transformers `XLNet*`: the only place that knows transformers' XLNet key layout.

The reference stores each attention projection as one (d_model, n_head, d_head) parameter used in an
einsum; ours are `nn.Linear` layers. For q, k, v and r, `x @ W.view(C, H*D)` is a Linear whose weight is
the transpose of that view; for the output projection, `sum_hd a[h, d] o[c, h, d]` is a Linear whose
weight is the (C, H*D) view itself. The tensor rules below do those reshapes (the head count comes from
the layer's (H, D) `r_w_bias`); every other key is only renamed.
"""

from ..conversion import Conversion, TensorRule, task_classes
from . import modeling_xlnet


def _heads_view(weight, shape):
    """(C, H*D) -> (C, H, D), with (H, D) = `shape` of the layer's r_w_bias."""
    return weight.reshape(weight.shape[0], *shape)


def _projection_rule(name: str) -> TensorRule:
    ours = f"layers.{{i}}.attn.{name}_proj.weight"
    theirs = f"layer.{{i}}.rel_attn.{name}"
    bias = "layers.{i}.attn.r_w_bias"
    if name == "o":  # Linear(H*D -> C): weight (C, H*D) is the reference's (C, H, D) flattened
        return TensorRule(ours=ours, theirs=theirs, to_hf=lambda w, shape: _heads_view(w, shape),
                          from_hf=lambda p: (p.reshape(p.shape[0], -1),), to_hf_shape_from=bias)
    # Linear(C -> H*D): weight (H*D, C) is the transpose of the reference's flattened (C, H, D)
    return TensorRule(ours=ours, theirs=theirs, to_hf=lambda w, shape: _heads_view(w.t(), shape),
                      from_hf=lambda p: (p.reshape(p.shape[0], -1).t(),), to_hf_shape_from=bias)


TENSOR_RULES = tuple(_projection_rule(name) for name in ("q", "k", "v", "o", "r"))

# (ours, transformers) key prefixes of what is only renamed.
BODY_RULES = (
    ("embeddings.word_embeddings.", "word_embedding."),
    ("embeddings.mask_emb", "mask_emb"),
    ("layers.{i}.attn.r_w_bias", "layer.{i}.rel_attn.r_w_bias"),
    ("layers.{i}.attn.r_r_bias", "layer.{i}.rel_attn.r_r_bias"),
    ("layers.{i}.attn.r_s_bias", "layer.{i}.rel_attn.r_s_bias"),
    ("layers.{i}.attn.seg_embed", "layer.{i}.rel_attn.seg_embed"),
    ("layers.{i}.attn_norm.", "layer.{i}.rel_attn.layer_norm."),
    ("layers.{i}.mlp.up_proj.", "layer.{i}.ff.layer_1."),
    ("layers.{i}.mlp.down_proj.", "layer.{i}.ff.layer_2."),
    ("layers.{i}.mlp.norm.", "layer.{i}.ff.layer_norm."),
)

HEAD_RULES = (
    ("lm_head.", "lm_loss."),
    ("classifier.summary.", "sequence_summary.summary."),
    ("classifier.out_proj.", "logits_proj."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    if getattr(config, "summary_type", "last") not in ("last", "first", "mean"):
        raise ValueError(f"summary_type={config.summary_type!r} is not supported by hf_xfmr's XLNet heads; "
                         f"use 'last' (XLNet's own), 'first' or 'mean'.")
    if getattr(config, "summary_proj_to_labels", False) or getattr(config, "summary_first_dropout", 0):
        raise ValueError("summary_proj_to_labels / summary_first_dropout are not supported by hf_xfmr's XLNet "
                         "sequence summary; XLNet checkpoints do not use them.")
    if callable(getattr(config, "ff_activation", None)):
        raise ValueError("ff_activation must be a name (e.g. 'gelu'), not a function.")


CONVERSION = Conversion(
    hf_model_type="xlnet",
    tasks=task_classes(modeling_xlnet, ("base", "causal-lm", "sequence-classification", "token-classification",
                                        "question-answering", "multiple-choice"),
                       ours="XLNet",
                       suffixes={"causal-lm": "LMHeadModel", "question-answering": "ForQuestionAnsweringSimple"}),
    hf_base_prefix="transformer",
    body_rules=BODY_RULES,
    head_rules=HEAD_RULES,
    tensor_rules=TENSOR_RULES,
    check_hf_config=check_hf_config,
)
