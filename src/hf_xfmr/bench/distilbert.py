"""Benchmark cases for DistilBERT: MLM training and inference against `DistilBertForMaskedLM` (sdpa),
identical weights through `hf_xfmr.from_transformers`."""

from .harness import BenchCase, register_case
from .mlm import encoder_mlm_case, sdpa_masked_lm

# Headline size (the issue's): hidden 256, 4 layers, 4 heads, the BERT vocabulary.
MLM_SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=30522, max_positions=512, batch=8, seq=512)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, max_positions=64, batch=2, seq=32)


def _reference(s: dict) -> tuple:
    """Reference `DistilBertForMaskedLM(config)` (sdpa, DistilBERT's default dropouts 0.1) with random weights;
    ours converted from it (see bench/mlm.py)."""
    return (sdpa_masked_lm("DistilBert", vocab_size=s["vocab"], dim=s["hidden"], n_layers=s["layers"],
                           n_heads=s["heads"], hidden_dim=s["ffn"], max_position_embeddings=s["max_positions"]),
            f"DistilBertForMaskedLM hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads, "
            f"FFN {s['ffn']}, vocab {s['vocab']}")


def _mlm_case(name: str, **overrides) -> BenchCase:
    """A DistilBERT MLM case at `MLM_SIZES` changed by `overrides`."""
    return encoder_mlm_case(name, MLM_SIZES, _reference, overrides)


@register_case("distilbert-mlm-train", tiny=TINY_SIZES)
def distilbert_mlm_train(**kw) -> BenchCase:
    """Headline: DistilBERT MLM training step (fp32, 15% masking), ours with sparse prediction."""
    return _mlm_case("distilbert-mlm-train", **{"mode": "train", **kw})


@register_case("distilbert-mlm-train-dense", tiny=TINY_SIZES)
def distilbert_mlm_train_dense(**kw) -> BenchCase:
    """DistilBERT MLM training step with ours' sparse prediction OFF: isolates the encoder's speed."""
    return _mlm_case("distilbert-mlm-train-dense", **{"mode": "train", "sparse_prediction": False, **kw})


@register_case("distilbert-mlm-infer", tiny=TINY_SIZES)
def distilbert_mlm_infer(**kw) -> BenchCase:
    """DistilBERT MLM forward under inference_mode, no labels (full logits on both sides)."""
    return _mlm_case("distilbert-mlm-infer", **{"mode": "infer", **kw})
