"""Helpers shared by the Llama-family test files: tiny Llama, Mistral and Qwen2 configs, pairs of a
transformers model and its conversion, batches."""

import torch
import transformers

import hf_xfmr

VOCAB = 99
PAD = 0  # never a real token in `padded_batch` (ids in [1, VOCAB - 1))
BOS, EOS = 1, 2

_SIZES = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, attention_dropout=0.0)

# name -> (transformers type prefix, config keywords): GQA and MHA, tied and untied embeddings, each RoPE scaling,
# Llama's biases, Mistral with a window (4) shorter than the batches (11 tokens), Qwen2's q/k/v biases.
VARIANTS = {
    "llama-gqa": ("Llama", dict(num_key_value_heads=2)),
    "llama-tied": ("Llama", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "llama-linear": ("Llama", dict(num_key_value_heads=1, rope_parameters=dict(rope_type="linear", rope_theta=500.0,
                                                                            factor=2.0))),
    # original length 48 with head size 8 and theta 100: wavelengths 6.3 (kept), 20 (interpolated), 63, 199 (scaled)
    "llama-llama3": ("Llama", dict(num_key_value_heads=2, rope_parameters=dict(
        rope_type="llama3", rope_theta=100.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=48))),
    "llama-bias": ("Llama", dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True)),
    "mistral": ("Mistral", dict(num_key_value_heads=2, sliding_window=4)),
    "qwen2": ("Qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True)),
}

HEAD_SUFFIXES = {
    "base": "Model",
    "causal-lm": "ForCausalLM",
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
}


def hf_config(variant: str, **overrides):
    """The transformers config of a tiny `variant` (a key of VARIANTS)."""
    prefix, extra = VARIANTS[variant]
    return getattr(transformers, f"{prefix}Config")(**{**_SIZES, **extra, **overrides})


def hf_class(variant: str, task: str):
    return getattr(transformers, VARIANTS[variant][0] + HEAD_SUFFIXES[task])


def hf_model_type(variant: str) -> str:
    return VARIANTS[variant][0].lower()


def pair(variant: str, task: str = "causal-lm", attn: str = "sdpa", seed: int = 0, **overrides):
    """(transformers model, hf_xfmr conversion) of a tiny `variant` with identical weights, in eval mode."""
    torch.manual_seed(seed)
    ref = hf_class(variant, task)._from_config(hf_config(variant, **overrides), attn_implementation=attn).eval()
    return ref, hf_xfmr.from_transformers(ref).eval()


def padded_batch(batch=3, seq_len=11, seed=0, left=False):
    """Ids in [3, VOCAB) padded with PAD: row 1 keeps 7 tokens, row 2 keeps 4 (right or left padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 7), (2, 4)):
        if row < batch:
            if left:
                mask[row, :seq_len - keep] = 0
            else:
                mask[row, keep:] = 0
    return ids.masked_fill(mask == 0, PAD), mask
