"""Helpers shared by the GPT test files: tiny GPT-2 configs and batches."""

import torch
import transformers

import hf_xfmr

VOCAB = 99
EOS = VOCAB - 1
PAD = 0


def tiny_gpt2_config(**overrides):
    """A tiny `GPT2Config` without dropout; pad id 0 (never a real token in `padded_batch`)."""
    kwargs = dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=37,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=EOS, eos_token_id=EOS,
                  pad_token_id=PAD)
    return transformers.GPT2Config(**{**kwargs, **overrides})


def padded_batch(batch=3, seq_len=11, seed=0, left=False):
    """Ids in [1, EOS) padded with PAD: row 1 keeps 7 tokens, row 2 keeps 4 (right or left padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, EOS, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 7), (2, 4)):
        if row < batch:
            if left:
                mask[row, :seq_len - keep] = 0
            else:
                mask[row, keep:] = 0
    return ids.masked_fill(mask == 0, PAD), mask


def lm_pair(attn="sdpa", **overrides):
    """(GPT2LMHeadModel, XfmrGPTForCausalLM) with identical weights, in eval mode."""
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel._from_config(tiny_gpt2_config(**overrides), attn_implementation=attn).eval()
    return ref, hf_xfmr.from_transformers(ref).eval()
