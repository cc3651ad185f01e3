"""Benchmark cases for T5: span-corruption training and greedy generation against
`T5ForConditionalGeneration` (sdpa), identical weights through `hf_xfmr.from_transformers`.

    hf-xfmr bench t5-span-train t5-generate            # models (see `hf-xfmr bench --help`)
    python -m hf_xfmr.bench.t5_collator                # collator throughput (bench/t5_collator.py)
"""

import torch

from .gpt import Generate
from .harness import BenchCase, dtype_from_name, register_case

# Headline: d_model 256, 4 + 4 layers, 4 heads, d_ff 1024, T5's vocabulary; 512 text tokens per row
# corrupt into 462 input and 104 target tokens (noise density 0.15, mean span 3).
SPAN_SIZES = dict(d_model=256, layers=4, heads=4, d_ff=1024, vocab=32128, batch=8, seq=462, target=104)
TINY_SIZES = dict(d_model=32, layers=2, heads=2, d_ff=64, vocab=512, batch=2, seq=24, target=8)
GENERATE_TINY = dict(TINY_SIZES, new_tokens=4)


def _reference(d_model, layers, heads, d_ff, vocab, feed_forward_proj="relu", dropout=0.1):
    import transformers

    config = transformers.T5Config(
        vocab_size=vocab, d_model=d_model, d_kv=d_model // heads, d_ff=d_ff, num_layers=layers, num_heads=heads,
        feed_forward_proj=feed_forward_proj, dropout_rate=dropout, decoder_start_token_id=0,
    )
    return transformers.T5ForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def _batch(seed, vocab, batch, seq, target=None):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(2, vocab - 100, (batch, seq), generator=g)
    out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if target is not None:
        out["labels"] = torch.randint(2, vocab, (batch, target), generator=g)
    return out


def _span_case(name: str, *, dtype: str = "fp32", chunked_lm_loss: bool = True, feed_forward_proj: str = "relu",
               d_model: int = SPAN_SIZES["d_model"], layers: int = SPAN_SIZES["layers"],
               heads: int = SPAN_SIZES["heads"], d_ff: int = SPAN_SIZES["d_ff"], vocab: int = SPAN_SIZES["vocab"],
               batch: int = SPAN_SIZES["batch"], seq: int = SPAN_SIZES["seq"], target: int = SPAN_SIZES["target"],
               device: str = "cpu", seed: int = 0) -> BenchCase:
    """Reference `T5ForConditionalGeneration(config)` (sdpa, dropout 0.1 as T5 configures it) with random
    weights; ours converted from it. Batch: random input ids (mask all ones) and random target labels."""

    def build_pair():
        import hf_xfmr

        ref = _reference(d_model, layers, heads, d_ff, vocab, feed_forward_proj)
        ours = hf_xfmr.from_transformers(ref)
        ours.config.chunked_lm_loss = chunked_lm_loss
        return ours, ref

    return BenchCase(
        name=name, build_pair=build_pair, make_batch=lambda: _batch(seed, vocab, batch, seq, target), mode="train",
        autocast_dtype=dtype_from_name(dtype), device=device,
        description=(f"T5ForConditionalGeneration ({feed_forward_proj}) d_model {d_model}, {layers}+{layers} layers, "
                     f"{heads} heads, d_ff {d_ff}, vocab {vocab}; batch {batch} x {seq} inputs / {target} targets; "
                     f"ours chunked_lm_loss={chunked_lm_loss}"),
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
def t5_generate(*, d_model: int = SPAN_SIZES["d_model"], layers: int = SPAN_SIZES["layers"],
                heads: int = SPAN_SIZES["heads"], d_ff: int = SPAN_SIZES["d_ff"], vocab: int = SPAN_SIZES["vocab"],
                batch: int = SPAN_SIZES["batch"], seq: int = SPAN_SIZES["seq"], target: int = 0, new_tokens: int = 64,
                device: str = "cpu", seed: int = 0) -> BenchCase:
    """Greedy generation of `new_tokens` tokens (encoder once, self-attention cache, cached cross-attention
    keys/values) after a `seq`-token input, fp32."""
    settings = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1)

    def build_pair():
        import hf_xfmr

        ref = _reference(d_model, layers, heads, d_ff, vocab)
        ours = hf_xfmr.from_transformers(ref)
        return Generate(ours, **settings), Generate(ref, **settings)

    return BenchCase(
        name="t5-generate", build_pair=build_pair, make_batch=lambda: _batch(seed, vocab, batch, seq), mode="infer",
        device=device,
        description=(f"T5ForConditionalGeneration.generate greedy, {new_tokens} new tokens, input {batch} x {seq}; "
                     f"d_model {d_model}, {layers}+{layers} layers, vocab {vocab}"),
    )
