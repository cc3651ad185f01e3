"""BART <-> transformers `Bart*`: the only place that knows transformers' BART key layout.

transformers stores the shared embedding three times in the encoder-decoder models (`shared`,
`encoder.embed_tokens`, `decoder.embed_tokens`, all tied) and once, as `decoder.embed_tokens`, in
`BartForCausalLM` (whose backbone is `model.decoder`); ours keep one `shared` matrix in both. Per layer
it names the attention `self_attn` / `encoder_attn` with an `out_proj`, the feed-forward `fc1` / `fc2`,
and the norms after the sub-layer they follow (`self_attn_layer_norm`, `encoder_attn_layer_norm`,
`final_layer_norm`); each stack's embedding LayerNorm is `layernorm_embedding`. The sequence classifier
is `classification_head` (ours: `classifier`); `final_logits_bias` is a buffer on both sides.
"""

from ..conversion import SHARED_EMBEDDING_ALIASES, SharedEmbeddingsConversion, task_classes
from . import modeling_bart

_LAYER = (
    ("attn.q_proj.", "self_attn.q_proj."),
    ("attn.k_proj.", "self_attn.k_proj."),
    ("attn.v_proj.", "self_attn.v_proj."),
    ("attn.o_proj.", "self_attn.out_proj."),
    ("attn_norm.", "self_attn_layer_norm."),
    ("cross_attn.q_proj.", "encoder_attn.q_proj."),
    ("cross_attn.k_proj.", "encoder_attn.k_proj."),
    ("cross_attn.v_proj.", "encoder_attn.v_proj."),
    ("cross_attn.o_proj.", "encoder_attn.out_proj."),
    ("cross_attn_norm.", "encoder_attn_layer_norm."),
    ("mlp.up_proj.", "fc1."),
    ("mlp.down_proj.", "fc2."),
    ("mlp_norm.", "final_layer_norm."),
)
BODY_RULES = (
    ("shared.", "shared."),
    *((f"{stack}.{part}", f"{stack}.{part}") for stack in ("encoder", "decoder") for part in ("embed_positions.",)),
    *((f"{stack}.embed_norm.", f"{stack}.layernorm_embedding.") for stack in ("encoder", "decoder")),
    *((f"{stack}.layers.{{i}}.{ours}", f"{stack}.layers.{{i}}.{theirs}")
      for stack in ("encoder", "decoder") for ours, theirs in _LAYER),
)
HEAD_RULES = (
    ("lm_head.", "lm_head."),
    ("final_logits_bias", "final_logits_bias"),
    ("classifier.", "classification_head."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    for name in ("eos_token_id", "forced_eos_token_id"):
        if isinstance(getattr(config, name, None), (list, tuple)):
            raise ValueError(f"{name}={getattr(config, name)!r}: hf_xfmr's BART takes a single id; set one "
                             f"(the generation config may still list several).")


CONVERSION = SharedEmbeddingsConversion(
    hf_model_type="bart",
    tasks=task_classes(modeling_bart, ("base", "seq2seq-lm", "sequence-classification", "question-answering",
                                       "causal-lm"), ours="Bart"),
    hf_base_prefix="model",
    body_rules=BODY_RULES,
    head_rules=HEAD_RULES,
    aliases=SHARED_EMBEDDING_ALIASES,
    check_hf_config=check_hf_config,
)
