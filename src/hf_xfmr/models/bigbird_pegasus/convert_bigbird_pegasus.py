"""BigBird-Pegasus <-> transformers `BigBirdPegasus*`: the only place that knows transformers' key layout.

transformers stores the shared embedding three times in the encoder-decoder models (`shared`,
`encoder.embed_tokens`, `decoder.embed_tokens`, all tied) and once, as `decoder.embed_tokens`, in
`BigBirdPegasusForCausalLM` (whose backbone is `model.decoder`); ours keep one `shared` matrix in both. The encoder's
attention is BigBird's (`self_attn.self.query` / `key` / `value`, `self_attn.output`), the decoder's BART's
(`q_proj`, `k_proj`, `v_proj`, `out_proj`; cross-attention `encoder_attn`); the feed-forward is `fc1` / `fc2` and
the norms are named after the sub-layer they precede (`self_attn_layer_norm`, `encoder_attn_layer_norm`,
`final_layer_norm`). Each stack's last LayerNorm is `layernorm_embedding` (ours `final_norm`). The sequence
classifier is `classification_head` (ours: `classifier`); `final_logits_bias` is a buffer on both sides.
"""

from ..conversion import SHARED_EMBEDDING_ALIASES, SharedEmbeddingsConversion, task_classes
from . import modeling_bigbird_pegasus

_ENCODER_LAYER = (
    ("attn.q_proj.", "self_attn.self.query."),
    ("attn.k_proj.", "self_attn.self.key."),
    ("attn.v_proj.", "self_attn.self.value."),
    ("attn.o_proj.", "self_attn.output."),
)
_DECODER_LAYER = (
    ("attn.q_proj.", "self_attn.q_proj."),
    ("attn.k_proj.", "self_attn.k_proj."),
    ("attn.v_proj.", "self_attn.v_proj."),
    ("attn.o_proj.", "self_attn.out_proj."),
    ("cross_attn.q_proj.", "encoder_attn.q_proj."),
    ("cross_attn.k_proj.", "encoder_attn.k_proj."),
    ("cross_attn.v_proj.", "encoder_attn.v_proj."),
    ("cross_attn.o_proj.", "encoder_attn.out_proj."),
    ("cross_attn_norm.", "encoder_attn_layer_norm."),
)
_LAYER = (
    ("attn_norm.", "self_attn_layer_norm."),
    ("mlp.up_proj.", "fc1."),
    ("mlp.down_proj.", "fc2."),
    ("mlp_norm.", "final_layer_norm."),
)
BODY_RULES = (
    ("shared.", "shared."),
    *((f"{stack}.embed_positions.", f"{stack}.embed_positions.") for stack in ("encoder", "decoder")),
    *((f"{stack}.final_norm.", f"{stack}.layernorm_embedding.") for stack in ("encoder", "decoder")),
    *((f"encoder.layers.{{i}}.{ours}", f"encoder.layers.{{i}}.{theirs}") for ours, theirs in _ENCODER_LAYER + _LAYER),
    *((f"decoder.layers.{{i}}.{ours}", f"decoder.layers.{{i}}.{theirs}") for ours, theirs in _DECODER_LAYER + _LAYER),
)
HEAD_RULES = (
    ("lm_head.", "lm_head."),
    ("final_logits_bias", "final_logits_bias"),
    ("classifier.", "classification_head."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    if isinstance(getattr(config, "eos_token_id", None), (list, tuple)):
        raise ValueError(f"eos_token_id={config.eos_token_id!r}: hf_xfmr's BigBird-Pegasus takes a single id; set "
                         f"one (the generation config may still list several).")


CONVERSION = SharedEmbeddingsConversion(
    hf_model_type="bigbird_pegasus",
    tasks=task_classes(modeling_bigbird_pegasus, ("base", "seq2seq-lm", "sequence-classification",
                                                  "question-answering", "causal-lm"), ours="BigBirdPegasus"),
    hf_base_prefix="model",
    body_rules=BODY_RULES,
    head_rules=HEAD_RULES,
    aliases=SHARED_EMBEDDING_ALIASES,
    check_hf_config=check_hf_config,
)
