"""Helpers shared by the Mixtral test files: tiny configs, pairs of a transformers model and its conversion."""

import torch
import transformers

import hf_xfmr

from ._llama import BOS, EOS, PAD, VOCAB

_SIZES = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
              pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, attention_dropout=0.0,
              router_aux_loss_coef=0.1, output_router_logits=True)

# name -> config keywords: grouped-query attention with untied embeddings; a sliding window (4) shorter than the
# batches (11 tokens) with tied embeddings and top-1 routing.
VARIANTS = {
    "gqa": dict(),
    "window": dict(sliding_window=4, tie_word_embeddings=True, num_experts_per_tok=1),
}

HEAD_SUFFIXES = {
    "base": "Model",
    "causal-lm": "ForCausalLM",
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
}


def hf_config(variant: str = "gqa", **overrides):
    return transformers.MixtralConfig(**{**_SIZES, **VARIANTS[variant], **overrides})


def pair(variant: str = "gqa", task: str = "causal-lm", attn: str = "sdpa", seed: int = 0, **overrides):
    """(transformers model, hf_xfmr conversion) of a tiny Mixtral with identical weights, in eval mode. The
    reference runs its fastest CPU experts implementation (grouped_mm)."""
    torch.manual_seed(seed)
    config = hf_config(variant, **overrides)
    hf_class = getattr(transformers, "Mixtral" + HEAD_SUFFIXES[task])
    ref = hf_class._from_config(config, attn_implementation=attn, experts_implementation="grouped_mm").eval()
    return ref, hf_xfmr.from_transformers(ref).eval()
