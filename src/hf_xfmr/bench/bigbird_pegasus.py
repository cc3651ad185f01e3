"""Benchmark case for BigBird-Pegasus: greedy generation of 64 tokens from 4 x 4096-token inputs (issue 28) against
`BigBirdPegasusForConditionalGeneration` (eager: the reference has no other kernel), block-sparse encoder on both
sides, identical weights through `hf_xfmr.from_transformers`.

    hf-xfmr bench bigbird-pegasus-generate      # once this module is imported by bench/__init__.py
"""

import torch

from .converted import seq2seq_generation_case
from .harness import BenchCase, register_case

# Headline: d_model 256, 4 + 4 layers, 4 heads, ffn 1024, vocab 32000; 4 inputs of 4096 tokens (blocks of 64, 3 random
# blocks: the block-sparse encoder), 64 new tokens.
GENERATE_SIZES = dict(d_model=256, layers=4, heads=4, ffn=1024, vocab=32000, batch=4, seq=4096, block=64, random=3)
# Tiny: 72 tokens in blocks of 8 with 1 random block (inputs past 56 tokens run block-sparse).
GENERATE_TINY = dict(d_model=32, layers=2, heads=2, ffn=64, vocab=512, batch=2, seq=72, block=8, random=1,
                     new_tokens=4)


def _reference(s: dict):
    """`BigBirdPegasusForConditionalGeneration` (block-sparse encoder, eager) at the sizes of `s`, random weights."""
    import transformers

    config = transformers.BigBirdPegasusConfig(
        vocab_size=s["vocab"], d_model=s["d_model"], encoder_layers=s["layers"], decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"], encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"], max_position_embeddings=max(4096, s["seq"]), attention_type="block_sparse",
        block_size=s["block"], num_random_blocks=s["random"],
    )
    return transformers.BigBirdPegasusForConditionalGeneration._from_config(config, attn_implementation="eager")


def _batch(s: dict):
    """(batch, seq) random input ids ending in </s> (id 1), mask all ones."""
    g = torch.Generator().manual_seed(s["seed"])
    input_ids = torch.randint(3, s["vocab"], (s["batch"], s["seq"]), generator=g)
    input_ids[:, -1] = 1
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


@register_case("bigbird-pegasus-generate", tiny=GENERATE_TINY)
def bigbird_pegasus_generate(**overrides) -> BenchCase:
    """Greedy generation of `new_tokens` tokens (block-sparse encoder once, self-attention cache, cached
    cross-attention keys/values) after `batch` inputs of `seq` tokens, fp32."""
    return seq2seq_generation_case("bigbird-pegasus-generate", "BigBirdPegasusForConditionalGeneration",
                                   GENERATE_SIZES, overrides, _reference, _batch)
