"""Benchmark cases for BERT and RoBERTa: MLM training and inference against `BertForMaskedLM` /
`RobertaForMaskedLM`, identical weights through `hf_xfmr.from_transformers`."""

from .harness import BenchCase, register_case
from .mlm import encoder_mlm_case

# Headline size: a BERT-mini-like encoder with the full BERT vocabulary, so the MLM head matters.
MLM_SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=30522, max_positions=512, batch=8, seq=512)
# The quick suite (and tests): the same cases, small enough to run in well under a second.
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, max_positions=64, batch=2, seq=32)


def _reference(arch: str, s: dict) -> tuple:
    """Reference `<Arch>ForMaskedLM(config)` with random weights (ours is converted from it, see bench/mlm.py)."""
    import transformers

    sizes = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                 num_attention_heads=s["heads"], intermediate_size=s["ffn"])
    if arch == "bert":
        config_cls, model_cls = transformers.BertConfig, transformers.BertForMaskedLM
        sizes["max_position_embeddings"] = s["max_positions"]
    elif arch == "roberta":
        config_cls, model_cls = transformers.RobertaConfig, transformers.RobertaForMaskedLM
        sizes["max_position_embeddings"] = s["max_positions"] + 2  # RoBERTa offsets positions by pad_token_id + 1
    else:
        raise ValueError(f"unknown arch {arch!r}")
    return (lambda: model_cls(config_cls(**sizes)),
            f"{model_cls.__name__} hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads, FFN {s['ffn']}, "
            f"vocab {s['vocab']}")


def _mlm_case(name: str, arch: str, **overrides) -> BenchCase:
    """An MLM case of `arch` ("bert" or "roberta") at `MLM_SIZES` changed by `overrides`."""
    return encoder_mlm_case(name, MLM_SIZES, lambda s: _reference(arch, s), overrides)


@register_case("bert-mlm-train", tiny=TINY_SIZES)
def bert_mlm_train(**kw) -> BenchCase:
    """Headline: BERT MLM training step (fp32), ours with sparse prediction."""
    return _mlm_case("bert-mlm-train", "bert", **{"mode": "train", **kw})


@register_case("bert-mlm-train-bf16", tiny=TINY_SIZES)
def bert_mlm_train_bf16(**kw) -> BenchCase:
    """BERT MLM training step under bf16 autocast."""
    return _mlm_case("bert-mlm-train-bf16", "bert", **{"mode": "train", "dtype": "bf16", **kw})


@register_case("bert-mlm-train-dense", tiny=TINY_SIZES)
def bert_mlm_train_dense(**kw) -> BenchCase:
    """BERT MLM training step with ours' sparse prediction OFF: isolates the encoder's speed."""
    return _mlm_case("bert-mlm-train-dense", "bert", **{"mode": "train", "sparse_prediction": False, **kw})


@register_case("bert-mlm-infer", tiny=TINY_SIZES)
def bert_mlm_infer(**kw) -> BenchCase:
    """BERT MLM forward under inference_mode, no labels (full logits on both sides)."""
    return _mlm_case("bert-mlm-infer", "bert", **{"mode": "infer", **kw})


@register_case("roberta-mlm-train", tiny=TINY_SIZES)
def roberta_mlm_train(**kw) -> BenchCase:
    """RoBERTa MLM training step (fp32), ours with sparse prediction."""
    return _mlm_case("roberta-mlm-train", "roberta", **{"mode": "train", **kw})
