"""Helpers shared by the T5 test files: tiny T5 configs (v1.0 and v1.1), model pairs and padded batches."""

import torch
import transformers

import hf_xfmr

VOCAB = 99
PAD, EOS = 0, 1
VARIANTS = ("v1.0", "v1.1")


def tiny_t5_config(variant="v1.0", **overrides):
    """A tiny `T5Config` without dropout. v1.0: ReLU, tied and scaled head; v1.1: gated GELU, untied."""
    kwargs = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4,
                  relative_attention_num_buckets=8, relative_attention_max_distance=20, dropout_rate=0.0,
                  feed_forward_proj="relu", decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=EOS)
    if variant == "v1.1":
        kwargs.update(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    return transformers.T5Config(**{**kwargs, **overrides})


def untie(ref):
    """A v1.1 reference: transformers 5 ties lm_head to the embeddings whatever the config says, so give it
    its own (random) weights, as a loaded v1.1 checkpoint has."""
    if hasattr(ref, "lm_head"):
        ref.config.tie_word_embeddings = False
        ref.lm_head.weight = torch.nn.Parameter(torch.randn_like(ref.lm_head.weight) * 0.5)
    return ref


def pair(hf_class="T5ForConditionalGeneration", variant="v1.0", attn="sdpa", seed=0, **overrides):
    """(transformers model, hf_xfmr model) with identical weights, in eval mode."""
    torch.manual_seed(seed)
    ref = getattr(transformers, hf_class)._from_config(tiny_t5_config(variant, **overrides), attn_implementation=attn)
    if variant == "v1.1":
        untie(ref)
    ref.eval()
    return ref, hf_xfmr.from_transformers(ref).eval()


def padded_batch(batch=3, seq_len=11, seed=0, eos=True):
    """Encoder ids in [2, VOCAB) right-padded with PAD (row 1 keeps 7 tokens, row 2 keeps 4), each row
    ending in EOS when `eos`; returns (ids, mask)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 7), (2, 4)):
        if row < batch:
            mask[row, keep:] = 0
    if eos:
        last = mask.sum(1) - 1
        ids[torch.arange(batch), last] = EOS
    return ids.masked_fill(mask == 0, PAD), mask


def padded_labels(batch=3, seq_len=8, seed=1):
    """Targets with -100 on the padded tail of rows 1 and 2, and the matching decoder mask."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(2, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 6), (2, 3)):
        if row < batch:
            mask[row, keep:] = 0
    return labels.masked_fill(mask == 0, -100), mask
