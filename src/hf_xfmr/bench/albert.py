"""Benchmark cases for ALBERT: MLM training and inference against `AlbertForMaskedLM` (sdpa), identical
weights through `hf_xfmr.from_transformers`."""

from .harness import BenchCase, register_case
from .mlm import mlm_case

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
    converted from it (see bench/mlm.py)."""
    import transformers

    config = dict(vocab_size=vocab, embedding_size=embedding, hidden_size=hidden, num_hidden_layers=layers,
                  num_hidden_groups=groups, num_attention_heads=heads, intermediate_size=ffn,
                  max_position_embeddings=max_positions)
    return mlm_case(
        name, lambda: transformers.AlbertForMaskedLM._from_config(transformers.AlbertConfig(**config),
                                                                  attn_implementation="sdpa"),
        mode=mode, dtype=dtype, sparse_prediction=sparse_prediction, vocab=vocab, max_positions=max_positions,
        batch=batch, seq=seq, mask_prob=mask_prob, device=device, seed=seed,
        description=f"AlbertForMaskedLM hidden {hidden}, embedding {embedding}, {layers} layers ({groups} group), "
                    f"{heads} heads, FFN {ffn}, vocab {vocab}",
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
