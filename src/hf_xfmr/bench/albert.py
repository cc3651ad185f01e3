"""Benchmark cases for ALBERT: MLM training and inference against `AlbertForMaskedLM` (sdpa), identical
weights through `hf_xfmr.from_transformers`."""

from .harness import BenchCase, register_case
from .mlm import encoder_mlm_case, sdpa_masked_lm

# Headline size (the issue's): hidden 256, 4 layers, 4 heads, ALBERT's vocabulary and embedding size.
MLM_SIZES = dict(hidden=256, embedding=128, layers=4, groups=1, heads=4, ffn=1024, vocab=30000, max_positions=512,
                 batch=8, seq=512)
TINY_SIZES = dict(hidden=32, embedding=16, layers=2, groups=1, heads=2, ffn=64, vocab=512, max_positions=64,
                  batch=2, seq=32)


def _reference(s: dict) -> tuple:
    """Reference `AlbertForMaskedLM(config)` (sdpa, ALBERT's default dropout 0) with random weights; ours
    converted from it (see bench/mlm.py)."""
    return (sdpa_masked_lm("Albert", vocab_size=s["vocab"], embedding_size=s["embedding"], hidden_size=s["hidden"],
                           num_hidden_layers=s["layers"], num_hidden_groups=s["groups"], num_attention_heads=s["heads"],
                           intermediate_size=s["ffn"], max_position_embeddings=s["max_positions"]),
            f"AlbertForMaskedLM hidden {s['hidden']}, embedding {s['embedding']}, {s['layers']} layers "
            f"({s['groups']} group), {s['heads']} heads, FFN {s['ffn']}, vocab {s['vocab']}")


def _mlm_case(name: str, **overrides) -> BenchCase:
    """An ALBERT MLM case at `MLM_SIZES` changed by `overrides`."""
    return encoder_mlm_case(name, MLM_SIZES, _reference, overrides)


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
