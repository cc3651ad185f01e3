"""Benchmark cases for ModernBERT MLM training against `ModernBertForMaskedLM` (sdpa, its own sparse
prediction: its fastest CPU setting), identical weights through `hf_xfmr.from_transformers`, 30% masking;
and BERT MLM on padded batches against `BertForMaskedLM` (sdpa), where unpadding is what differs.

- `modernbert-mlm-train`: batch 8 x 512, no padding.
- `modernbert-mlm-train-padded`: batch 8, lengths uniform in [64, 512], padded to 512.
- `modernbert-mlm-train-4096`: batch 2 x 4096 (local layers: window-blocked on our side).
- `bert-mlm-train-padded`: BERT hidden 256, 4 layers, batch 8, lengths uniform in [64, 512] padded to 512.

Sweep over the sequence length (512 .. 8192): `python benchmarks/bench_modernbert_sweep.py` (calls `main`).
"""

import torch

from .converted import converted_case, converted_pair
from .harness import BenchCase, dtype_from_name, register_case

SIZES = dict(hidden=256, layers=4, heads=4, ffn=384, vocab=32000, batch=8, seq=512, min_len=None)
TINY_SIZES = dict(hidden=32, layers=3, heads=2, ffn=48, vocab=512, batch=2, seq=48)
SWEEP_SEQS = [512, 1024, 2048, 4096, 8192]


def _batch(batch, seq, vocab, min_len, mask_prob, seed, first_id=5):
    """Random ids (special ids excluded); with `min_len`, row lengths uniform in [min_len, seq] and right
    padding (id 0); labels on `mask_prob` of the real positions."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(first_id, vocab, (batch, seq), generator=g)
    if min_len is None:
        mask = torch.ones_like(input_ids)
    else:
        lengths = torch.randint(min_len, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq)[None] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(mask == 0, 0)
    targets = (torch.rand(batch, seq, generator=g) < mask_prob) & mask.bool()
    labels = torch.where(targets, input_ids, torch.full_like(input_ids, -100))
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def _modernbert_case(name, *, hidden=SIZES["hidden"], layers=SIZES["layers"], heads=SIZES["heads"],
                     ffn=SIZES["ffn"], vocab=SIZES["vocab"], batch=SIZES["batch"], seq=SIZES["seq"],
                     min_len=SIZES["min_len"], window=128, mask_prob=0.3, dtype="fp32", device="cpu",
                     seed=0) -> BenchCase:
    """Reference `ModernBertForMaskedLM` (sdpa, sparse_prediction=True) with random weights; ours converted
    from it in its default configuration (sparse prediction carried over, `chunked_lm_loss` on by default). Both in
    training mode, forward + backward + AdamW."""
    import transformers

    config = transformers.ModernBertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=ffn, max_position_embeddings=max(8192, seq), local_attention=window,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, sparse_prediction=True,
    )

    convert = converted_pair(
        lambda: transformers.ModernBertForMaskedLM._from_config(config, attn_implementation="sdpa"), task="masked-lm")

    def build_pair():
        ours, ref = convert()
        assert ours.config.sparse_prediction
        assert ours.config.chunked_lm_loss  # the default: the labelled positions' loss without their (N, V) logits
        return ours, ref

    lengths = "no padding" if min_len is None else f"lengths uniform in [{min_len}, {seq}] padded"
    return BenchCase(
        name=name, build_pair=build_pair,
        make_batch=lambda: _batch(batch, seq, vocab, min_len, mask_prob, seed),
        mode="train", autocast_dtype=dtype_from_name(dtype), device=device,
        description=(f"ModernBertForMaskedLM (sdpa, sparse prediction) hidden {hidden}, {layers} layers, {heads} "
                     f"heads, FFN {ffn}, vocab {vocab}, window {window}; batch {batch} x {seq}, {lengths}; "
                     f"{mask_prob:.0%} masked; ours chunked_lm_loss"),
    )


@register_case("modernbert-mlm-train", tiny=TINY_SIZES)
def modernbert_mlm_train(**kw) -> BenchCase:
    """ModernBERT MLM training step, batch 8 x 512 without padding (fp32)."""
    return _modernbert_case("modernbert-mlm-train", **kw)


@register_case("modernbert-mlm-train-padded", tiny={**TINY_SIZES, "min_len": 8})
def modernbert_mlm_train_padded(**kw) -> BenchCase:
    """ModernBERT MLM training step, batch 8, lengths uniform in [64, 512] padded to 512 (fp32)."""
    return _modernbert_case("modernbert-mlm-train-padded", **{"min_len": 64, **kw})


@register_case("modernbert-mlm-train-4096", tiny={**TINY_SIZES, "seq": 96, "window": 16})
def modernbert_mlm_train_4096(**kw) -> BenchCase:
    """ModernBERT MLM training step, batch 2 x 4096 (fp32): local layers dominate."""
    return _modernbert_case("modernbert-mlm-train-4096", **{"batch": 2, "seq": 4096, **kw})


@register_case("bert-mlm-train-padded", tiny={"hidden": 32, "layers": 2, "heads": 2, "ffn": 64, "vocab": 512,
                                              "batch": 2, "seq": 48, "min_len": 8})
def bert_mlm_train_padded(*, hidden=256, layers=4, heads=4, ffn=1024, vocab=30522, batch=8, seq=512, min_len=64,
                          mask_prob=0.15, dtype="fp32", device="cpu", seed=0) -> BenchCase:
    """BERT MLM training step on padded rows (lengths uniform in [64, 512]) vs BertForMaskedLM (sdpa)."""
    import transformers

    config = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=seq)

    return converted_case(
        "bert-mlm-train-padded", lambda: transformers.BertForMaskedLM._from_config(config, attn_implementation="sdpa"),
        lambda: _batch(batch, seq, vocab, min_len, mask_prob, seed), dict(dtype=dtype, device=device),
        f"BertForMaskedLM (sdpa) hidden {hidden}, {layers} layers, FFN {ffn}, vocab {vocab}; batch "
        f"{batch}, lengths uniform in [{min_len}, {seq}] padded to {seq}; ours sparse prediction",
        task="masked-lm", sparse_prediction=True,
    )


def main(argv=None):
    """`python benchmarks/bench_modernbert_sweep.py [--seqs 512 1024 ...] [--batch 1] [--out DIR]`: ModernBERT
    MLM step time and peak memory against the sequence length, a markdown table and a PNG plot."""
    import argparse
    from pathlib import Path

    from .sweep import plot_sweep, run_sweep, sweep_markdown

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seqs", nargs="+", type=int, default=SWEEP_SEQS)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    parser.add_argument("--tiny", action="store_true", help="tiny model sizes (smoke test)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    fixed = {k: v for k, v in TINY_SIZES.items() if k != "seq"} if args.tiny else {}
    fixed["batch"] = args.batch
    case = "modernbert-mlm-train"
    rows = run_sweep(case, "seq", args.seqs, repeats=args.repeats, memory=not args.no_memory, **fixed)
    table = sweep_markdown(rows, "seq")
    print(f"\n{case}\n{table}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{case}_seq.md").write_text(table)
    plot_sweep(rows, "seq", out / f"{case}_seq.png", title=f"{case}: batch {args.batch}")
