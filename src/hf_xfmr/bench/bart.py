"""Benchmark cases for BART: text-infilling training and greedy generation against
`BartForConditionalGeneration` (sdpa), identical weights through `hf_xfmr.from_transformers`.

    hf-xfmr bench bart-infill-train bart-generate      # models (see `hf-xfmr bench --help`)
    python -m hf_xfmr.bench.bart_collator              # collator throughput (bench/bart_collator.py)
"""

import torch

from .gpt import Generate
from .harness import BenchCase, dtype_from_name, register_case

# Headline: d_model 256, 4 + 4 layers, 4 heads, ffn 1024, vocab 32000; 510 text tokens per row infill into
# about 418 input tokens (30% masked in Poisson(3) spans) and 512 targets (<s> text </s>).
INFILL_SIZES = dict(d_model=256, layers=4, heads=4, ffn=1024, vocab=32000, batch=8, seq=418, target=512)
TINY_SIZES = dict(d_model=32, layers=2, heads=2, ffn=64, vocab=512, batch=2, seq=24, target=30)
GENERATE_TINY = dict(TINY_SIZES, new_tokens=4)


def _reference(d_model, layers, heads, ffn, vocab, dropout=0.1):
    import transformers

    config = transformers.BartConfig(
        vocab_size=vocab, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        max_position_embeddings=1024, dropout=dropout,
    )
    return transformers.BartForConditionalGeneration._from_config(config, attn_implementation="sdpa")


def _batch(seed, vocab, batch, seq, target=None):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab, (batch, seq), generator=g)
    input_ids[:, 0], input_ids[:, -1] = 0, 2  # <s> ... </s>
    out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if target is not None:
        out["labels"] = torch.randint(5, vocab, (batch, target), generator=g)
    return out


@register_case("bart-infill-train", tiny=TINY_SIZES)
def bart_infill_train(*, dtype: str = "fp32", chunked_lm_loss: bool = True, d_model: int = INFILL_SIZES["d_model"],
                      layers: int = INFILL_SIZES["layers"], heads: int = INFILL_SIZES["heads"],
                      ffn: int = INFILL_SIZES["ffn"], vocab: int = INFILL_SIZES["vocab"],
                      batch: int = INFILL_SIZES["batch"], seq: int = INFILL_SIZES["seq"],
                      target: int = INFILL_SIZES["target"], device: str = "cpu", seed: int = 0) -> BenchCase:
    """Headline: one BART text-infilling training step (fp32, dropout 0.1, attention dropout 0 as BART
    configures it), ours with the chunked loss. Reference `BartForConditionalGeneration(config)` with random
    weights; ours converted from it. Batch: random input ids (mask all ones) and random target labels."""

    def build_pair():
        import hf_xfmr

        ref = _reference(d_model, layers, heads, ffn, vocab)
        ours = hf_xfmr.from_transformers(ref)
        ours.config.chunked_lm_loss = chunked_lm_loss
        return ours, ref

    return BenchCase(
        name="bart-infill-train", build_pair=build_pair, make_batch=lambda: _batch(seed, vocab, batch, seq, target),
        mode="train", autocast_dtype=dtype_from_name(dtype), device=device,
        description=(f"BartForConditionalGeneration d_model {d_model}, {layers}+{layers} layers, {heads} heads, "
                     f"ffn {ffn}, vocab {vocab}; batch {batch} x {seq} inputs / {target} targets; "
                     f"ours chunked_lm_loss={chunked_lm_loss}"),
    )


@register_case("bart-generate", tiny=GENERATE_TINY)
def bart_generate(*, d_model: int = INFILL_SIZES["d_model"], layers: int = INFILL_SIZES["layers"],
                  heads: int = INFILL_SIZES["heads"], ffn: int = INFILL_SIZES["ffn"], vocab: int = INFILL_SIZES["vocab"],
                  batch: int = INFILL_SIZES["batch"], seq: int = INFILL_SIZES["seq"], target: int = 0,
                  new_tokens: int = 64, device: str = "cpu", seed: int = 0) -> BenchCase:
    """Greedy generation of `new_tokens` tokens (encoder once, self-attention cache, cached cross-attention
    keys/values) after a `seq`-token input, fp32."""
    settings = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1)

    def build_pair():
        import hf_xfmr

        ref = _reference(d_model, layers, heads, ffn, vocab)
        ours = hf_xfmr.from_transformers(ref)
        return Generate(ours, **settings), Generate(ref, **settings)

    return BenchCase(
        name="bart-generate", build_pair=build_pair, make_batch=lambda: _batch(seed, vocab, batch, seq), mode="infer",
        device=device,
        description=(f"BartForConditionalGeneration.generate greedy, {new_tokens} new tokens, input {batch} x {seq}; "
                     f"d_model {d_model}, {layers}+{layers} layers, vocab {vocab}"),
    )
