"""Helpers shared by the BART test files: a tiny `BartConfig`, model pairs and padded batches."""

import copy

import torch
import transformers

import hf_xfmr

VOCAB = 99
BOS, PAD, EOS = 0, 1, 2


def tiny_bart_config(**overrides):
    """A tiny `BartConfig` without dropout; init_std 0.2 so that greedy decoding does not repeat one token."""
    kwargs = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=41, max_position_embeddings=40,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=0.2,
                  pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=EOS,
                  forced_eos_token_id=EOS)
    return transformers.BartConfig(**{**kwargs, **overrides})


def pair(hf_class="BartForConditionalGeneration", attn="sdpa", seed=0, **overrides):
    """(transformers model, hf_xfmr model) with identical weights, in eval mode. A random `final_logits_bias`."""
    torch.manual_seed(seed)
    # BartForCausalLM changes the config it is given: each model gets its own copy.
    ref = getattr(transformers, hf_class)._from_config(copy.deepcopy(tiny_bart_config(**overrides)),
                                                       attn_implementation=attn)
    if hasattr(ref, "final_logits_bias"):
        ref.final_logits_bias.normal_(0.0, 0.5)
    ref.eval()
    return ref, hf_xfmr.from_transformers(ref).eval()


def padded_batch(batch=3, seq_len=11, seed=0):
    """Encoder ids in [3, VOCAB) right-padded with PAD (row 1 keeps 7 tokens, row 2 keeps 4), each row
    starting with BOS and ending in EOS; returns (ids, mask)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 7), (2, 4)):
        if row < batch:
            mask[row, keep:] = 0
    ids[:, 0] = BOS
    ids[torch.arange(batch), mask.sum(1) - 1] = EOS
    return ids.masked_fill(mask == 0, PAD), mask


def padded_labels(batch=3, seq_len=8, seed=1):
    """Targets with -100 on the padded tail of rows 1 and 2, and the matching decoder mask."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 6), (2, 3)):
        if row < batch:
            mask[row, keep:] = 0
    return labels.masked_fill(mask == 0, -100), mask
