"""Benchmark cases for ALBERT: MLM training and inference against `AlbertForMaskedLM` (sdpa), identical
weights through `hf_xfmr.from_transformers`."""

import torch

from .harness import BenchCase, dtype_from_name, register_case

# Headline size (the issue's): hidden 256, 4 layers, 4 heads, ALBERT's vocabulary and embedding size.
MLM_SIZES = dict(hidden=256, embedding=128, layers=4, groups=1, heads=4, ffn=1024, vocab=30000, max_positions=512,
                 batch=8, seq=512)
TINY_SIZES = dict(hidden=32, embedding=16, layers=2, groups=1, heads=2, ffn=64, vocab=512, max_positions=64,
                  batch=2, seq=32)


def _mlm_case(
    name: str,
    *,
    mode: str = "train",
    dtype: str = "fp32",
    sparse_prediction: bool = True,
    hidden: int = MLM_SIZES["hidden"],
    embedding: int = MLM_SIZES["embedding"],
    layers: int = MLM_SIZES["layers"],
    groups: int = MLM_SIZES["groups"],
    heads: int = MLM_SIZES["heads"],
    ffn: int = MLM_SIZES["ffn"],
    vocab: int = MLM_SIZES["vocab"],
    max_positions: int = MLM_SIZES["max_positions"],
    batch: int = MLM_SIZES["batch"],
    seq: int = MLM_SIZES["seq"],
    mask_prob: float = 0.15,
    device: str = "cpu",
    seed: int = 0,
) -> BenchCase:
    """Reference `AlbertForMaskedLM(config)` (sdpa, ALBERT's default dropout 0) with random weights; ours
    converted from it. Batch: random ids (special ids excluded), attention mask all ones, and in train mode
    labels on `mask_prob` of the positions (seeded)."""
    import transformers

    first_id = 5
    if vocab <= first_id:
        raise ValueError(f"vocab must be > {first_id}, got {vocab}")
    if seq > max_positions:
        raise ValueError(f"seq ({seq}) must be <= max_positions ({max_positions})")
    config = dict(vocab_size=vocab, embedding_size=embedding, hidden_size=hidden, num_hidden_layers=layers,
                  num_hidden_groups=groups, num_attention_heads=heads, intermediate_size=ffn,
                  max_position_embeddings=max_positions)

    def build_pair():
        import hf_xfmr

        ref = transformers.AlbertForMaskedLM._from_config(transformers.AlbertConfig(**config),
                                                          attn_implementation="sdpa")
        ours = hf_xfmr.from_transformers(ref, task="masked-lm")
        ours.config.sparse_prediction = sparse_prediction
        return ours, ref

    def make_batch():
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(first_id, vocab, (batch, seq), generator=g)
        out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if mode == "train":
            targets = torch.rand(batch, seq, generator=g) < mask_prob
            out["labels"] = torch.where(targets, input_ids, torch.full_like(input_ids, -100))
        return out

    return BenchCase(
        name=name,
        build_pair=build_pair,
        make_batch=make_batch,
        mode=mode,
        autocast_dtype=dtype_from_name(dtype),
        device=device,
        description=(
            f"AlbertForMaskedLM hidden {hidden}, embedding {embedding}, {layers} layers ({groups} group), {heads} "
            f"heads, FFN {ffn}, vocab {vocab}; batch {batch} x {seq}; ours sparse_prediction={sparse_prediction}"
        ),
    )


@register_case("albert-mlm-train", tiny=TINY_SIZES)
def albert_mlm_train(**kw) -> BenchCase:
    """Headline: ALBERT MLM training step (fp32, 15% masking), ours with sparse prediction."""
    return _mlm_case("albert-mlm-train", **{"mode": "train", **kw})


@register_case("albert-mlm-train-dense", tiny=TINY_SIZES)
def albert_mlm_train_dense(**kw) -> BenchCase:
    """ALBERT MLM training step with ours' sparse prediction OFF: isolates the encoder's speed."""
    return _mlm_case("albert-mlm-train-dense", **{"mode": "train", "sparse_prediction": False, **kw})


@register_case("albert-mlm-infer", tiny=TINY_SIZES)
def albert_mlm_infer(**kw) -> BenchCase:
    """ALBERT MLM forward under inference_mode, no labels (full logits on both sides)."""
    return _mlm_case("albert-mlm-infer", **{"mode": "infer", **kw})
