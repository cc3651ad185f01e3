"""Benchmark cases for BART: text-infilling training and greedy generation against
`BartForConditionalGeneration` (sdpa), identical weights through `hf_xfmr.from_transformers`.

    hf-xfmr bench bart-infill-train bart-generate      # models (see `hf-xfmr bench --help`)
    python -m hf_xfmr.bench.bart_collator              # collator throughput (bench/bart_collator.py)
"""

import torch

from .converted import converted_case, seq2seq_generation_case
from .harness import BenchCase, case_sizes, register_case

# Headline: d_model 256, 4 + 4 layers, 4 heads, ffn 1024, vocab 32000; 510 text tokens per row infill into
# about 418 input tokens (30% masked in Poisson(3) spans) and 512 targets (<s> text </s>).
INFILL_SIZES = dict(d_model=256, layers=4, heads=4, ffn=1024, vocab=32000, batch=8, seq=418, target=512)
TINY_SIZES = dict(d_model=32, layers=2, heads=2, ffn=64, vocab=512, batch=2, seq=24, target=30)
GENERATE_TINY = dict(TINY_SIZES, new_tokens=4)
TRAIN_SETTINGS = dict(dtype="fp32", chunked_lm_loss=True, device="cpu", seed=0)


def _reference(s: dict, dropout=0.1):
    """`BartForConditionalGeneration` (sdpa) at the sizes of `s`, random weights."""
    import transformers

    config = transformers.BartConfig(
        vocab_size=s["vocab"], d_model=s["d_model"], encoder_layers=s["layers"], decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"], encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"], max_position_embeddings=1024, dropout=dropout,
    )
    return transformers.BartForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def _batch(s: dict, target=None):
    """(batch, seq) random `<s> ... </s>` input ids, mask all ones; (batch, target) random labels if `target`."""
    g = torch.Generator().manual_seed(s["seed"])
    input_ids = torch.randint(5, s["vocab"], (s["batch"], s["seq"]), generator=g)
    input_ids[:, 0], input_ids[:, -1] = 0, 2  # <s> ... </s>
    out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if target is not None:
        out["labels"] = torch.randint(5, s["vocab"], (s["batch"], target), generator=g)
    return out


@register_case("bart-infill-train", tiny=TINY_SIZES)
def bart_infill_train(**overrides) -> BenchCase:
    """Headline: one BART text-infilling training step (fp32, dropout 0.1, attention dropout 0 as BART
    configures it), ours with the chunked loss. Reference `BartForConditionalGeneration(config)` with random
    weights; ours converted from it. Batch: random input ids (mask all ones) and random target labels."""
    s = case_sizes("bart-infill-train", {**TRAIN_SETTINGS, **INFILL_SIZES}, overrides)
    return converted_case(
        "bart-infill-train", lambda: _reference(s), lambda: _batch(s, s["target"]), s,
        f"BartForConditionalGeneration d_model {s['d_model']}, {s['layers']}+{s['layers']} layers, {s['heads']} "
        f"heads, ffn {s['ffn']}, vocab {s['vocab']}; batch {s['batch']} x {s['seq']} inputs / {s['target']} targets; "
        f"ours chunked_lm_loss={s['chunked_lm_loss']}",
        chunked_lm_loss=s["chunked_lm_loss"],
    )


@register_case("bart-generate", tiny=GENERATE_TINY)
def bart_generate(**overrides) -> BenchCase:
    """Greedy generation of `new_tokens` tokens (encoder once, self-attention cache, cached cross-attention
    keys/values) after a `seq`-token input, fp32."""
    return seq2seq_generation_case("bart-generate", "BartForConditionalGeneration", INFILL_SIZES, overrides, _reference, _batch)
