"""Helpers shared by the BigBird-Pegasus test files: a tiny `BigBirdPegasusConfig`, model pairs and padded batches.

The tiny config has blocks of 4 tokens and 1 random block: inputs of more than (5 + 2) * 4 = 28 tokens take the
block-sparse path (`SPARSE_LENGTHS`: a multiple of the block size and one that is not), shorter ones full attention.
"""

import copy

import torch
import transformers

import hf_xfmr

VOCAB = 99
PAD, EOS, BOS = 0, 1, 2
BLOCK, RANDOM = 4, 1
FULL_LENGTH = 11  # below the block-sparse threshold of 28 tokens
SPARSE_LENGTHS = (32, 35)  # 8 blocks; 35 tokens padded inside to 36 (9 blocks)


def tiny_config(**overrides):
    """A tiny `BigBirdPegasusConfig` without dropout, biases on; init_std 0.2 so that greedy decoding does not repeat
    one token."""
    kwargs = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=41, max_position_embeddings=64,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, init_std=0.2, use_bias=True,
                  attention_type="block_sparse", block_size=BLOCK, num_random_blocks=RANDOM,
                  pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=PAD)
    return transformers.BigBirdPegasusConfig(**{**kwargs, **overrides})


def pair(hf_class="BigBirdPegasusForConditionalGeneration", attn="sdpa", seed=0, **overrides):
    """(transformers model, hf_xfmr model) with identical weights, in eval mode. A random `final_logits_bias`.
    The reference has only the eager kernel; ours runs `attn`. Build a new pair for each check: the reference
    switches itself to full attention for good after a short input."""
    torch.manual_seed(seed)
    # BigBirdPegasusForCausalLM changes the config it is given: each model gets its own copy.
    ref = getattr(transformers, hf_class)._from_config(copy.deepcopy(tiny_config(**overrides)),
                                                       attn_implementation="eager")
    if hasattr(ref, "final_logits_bias"):
        ref.final_logits_bias.normal_(0.0, 0.5)
    ref.eval()
    ours = hf_xfmr.from_transformers(ref).eval()
    ours.set_attn_implementation(attn)
    return ref, ours


def padded_batch(batch=3, seq_len=FULL_LENGTH, seed=0, keep=None):
    """Encoder ids in [3, VOCAB) right-padded with PAD (by default row 1 keeps 3/4 of the tokens, row 2 keeps 4),
    each row ending in EOS; returns (ids, mask)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    keep = keep if keep is not None else ((1, seq_len * 3 // 4), (2, 4))
    for row, kept in keep:
        if row < batch:
            mask[row, kept:] = 0
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
