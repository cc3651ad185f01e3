"""Benchmark cases for T5: span-corruption training and greedy generation against
`T5ForConditionalGeneration` (sdpa), identical weights through `hf_xfmr.from_transformers`.

    hf-xfmr bench t5-span-train t5-generate            # models (see `hf-xfmr bench --help`)
    python -m hf_xfmr.bench.t5_collator                # collator throughput (bench/t5_collator.py)
"""

import torch

from .converted import converted_case, seq2seq_generation_case
from .harness import BenchCase, case_sizes, register_case

# Headline: d_model 256, 4 + 4 layers, 4 heads, d_ff 1024, T5's vocabulary; 512 text tokens per row
# corrupt into 462 input and 104 target tokens (noise density 0.15, mean span 3).
SPAN_SIZES = dict(d_model=256, layers=4, heads=4, d_ff=1024, vocab=32128, batch=8, seq=462, target=104)
TINY_SIZES = dict(d_model=32, layers=2, heads=2, d_ff=64, vocab=512, batch=2, seq=24, target=8)
GENERATE_TINY = dict(TINY_SIZES, new_tokens=4)
TRAIN_SETTINGS = dict(dtype="fp32", chunked_lm_loss=True, feed_forward_proj="relu", device="cpu", seed=0)


def _reference(s: dict, feed_forward_proj="relu", dropout=0.1):
    """`T5ForConditionalGeneration` (sdpa) at the sizes of `s`, random weights."""
    import transformers

    config = transformers.T5Config(
        vocab_size=s["vocab"], d_model=s["d_model"], d_kv=s["d_model"] // s["heads"], d_ff=s["d_ff"],
        num_layers=s["layers"], num_heads=s["heads"], feed_forward_proj=feed_forward_proj, dropout_rate=dropout,
        decoder_start_token_id=0,
    )
    return transformers.T5ForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def _batch(s: dict, target=None):
    """(batch, seq) random input ids below the sentinels, mask all ones; (batch, target) random labels if `target`."""
    g = torch.Generator().manual_seed(s["seed"])
    input_ids = torch.randint(2, s["vocab"] - 100, (s["batch"], s["seq"]), generator=g)
    out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if target is not None:
        out["labels"] = torch.randint(2, s["vocab"], (s["batch"], target), generator=g)
    return out


def _span_case(name: str, **overrides) -> BenchCase:
    """Reference `T5ForConditionalGeneration(config)` (sdpa, dropout 0.1 as T5 configures it) with random
    weights; ours converted from it. Batch: random input ids (mask all ones) and random target labels.
    Sizes: `SPAN_SIZES`, settings: `TRAIN_SETTINGS`, both changed by `overrides`."""
    s = case_sizes(name, {**TRAIN_SETTINGS, **SPAN_SIZES}, overrides)
    return converted_case(
        name, lambda: _reference(s, s["feed_forward_proj"]), lambda: _batch(s, s["target"]), s,
        f"T5ForConditionalGeneration ({s['feed_forward_proj']}) d_model {s['d_model']}, {s['layers']}+{s['layers']} "
        f"layers, {s['heads']} heads, d_ff {s['d_ff']}, vocab {s['vocab']}; batch {s['batch']} x {s['seq']} inputs / "
        f"{s['target']} targets; ours chunked_lm_loss={s['chunked_lm_loss']}",
        chunked_lm_loss=s["chunked_lm_loss"],
    )


@register_case("t5-span-train", tiny=TINY_SIZES)
def t5_span_train(**kw) -> BenchCase:
    """Headline: one T5 span-corruption training step (fp32, dropout 0.1), ours with the chunked loss."""
    return _span_case("t5-span-train", **kw)


@register_case("t5-span-train-v1.1", tiny=TINY_SIZES)
def t5_span_train_v11(**kw) -> BenchCase:
    """The same step with T5 v1.1's gated-GELU feed-forward block."""
    return _span_case("t5-span-train-v1.1", **{"feed_forward_proj": "gated-gelu", **kw})


@register_case("t5-span-train-bf16", tiny=TINY_SIZES)
def t5_span_train_bf16(**kw) -> BenchCase:
    """T5 span-corruption training step under bf16 autocast."""
    return _span_case("t5-span-train-bf16", **{"dtype": "bf16", **kw})


@register_case("t5-generate", tiny=GENERATE_TINY)
def t5_generate(**overrides) -> BenchCase:
    """Greedy generation of `new_tokens` tokens (encoder once, self-attention cache, cached cross-attention
    keys/values) after a `seq`-token input, fp32."""
    return seq2seq_generation_case("t5-generate", "T5ForConditionalGeneration", SPAN_SIZES, overrides, _reference, _batch)
