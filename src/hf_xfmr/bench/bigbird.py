"""Benchmark cases for BigBird (issue 28): block-sparse attention at 4096 tokens, fp32.

- `bigbird-mlm-train`: an MLM training step on 2 x 4096 full rows against `BigBirdForMaskedLM` (block-sparse,
  eager: the reference has no other kernel), identical weights through `hf_xfmr.from_transformers`; ours in its
  default configuration plus sparse prediction (as the other MLM cases).
- `bigbird-seqcls-train-padded`: a sequence-classification finetuning step, 4 rows of lengths uniform in
  [1024, 4096] padded to 4096, against `BigBirdForSequenceClassification`.
- `bigbird-vs-bert-mlm-train`: the reason to use BigBird: our block-sparse BigBird against our own full-attention
  BERT (sdpa) of the same size at 4096 tokens (both hf_xfmr, MLM step, sparse prediction on both).
Sizes: hidden 256, 4 layers, 4 heads, FFN 1024, vocabulary 50,358 (the published checkpoints'), blocks of 64
tokens, 3 random blocks. Tiny sizes (the quick suite): blocks of 8, 2 random blocks, 96 tokens (sparse from 73).

    hf-xfmr bench bigbird-mlm-train      # once this module is imported by bench/__init__.py
"""

from .converted import converted_case
from .finetune import padded_batch
from .harness import BenchCase, case_sizes, register_case
from .mlm import MLM_SETTINGS, mlm_batch

SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=50358, block=64, random=3, batch=2, seq=4096,
             min_len=4096)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, block=8, random=2, batch=2, seq=96, min_len=96)
SEQCLS = dict(batch=4, min_len=1024, num_labels=2)
TINY_SEQCLS = dict(TINY_SIZES, batch=4, min_len=32)


def _config(s: dict, **extra):
    """transformers' `BigBirdConfig` (block-sparse) at the sizes of `s`."""
    import transformers

    return transformers.BigBirdConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
        intermediate_size=s["ffn"], max_position_embeddings=max(4096, s["seq"]), block_size=s["block"],
        num_random_blocks=s["random"], attention_type="block_sparse", **extra)


def _sizes_text(s: dict) -> str:
    return (f"hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads, FFN {s['ffn']}, vocab {s['vocab']}, "
            f"blocks of {s['block']}, {s['random']} random blocks")


@register_case("bigbird-mlm-train", tiny=TINY_SIZES)
def bigbird_mlm_train(**kw) -> BenchCase:
    """Headline: BigBird MLM training step, 2 x 4096, block-sparse (fp32), ours with sparse prediction."""
    s = case_sizes("bigbird-mlm-train", {**MLM_SETTINGS, **SIZES}, kw)

    def build_ref():
        import transformers

        return transformers.BigBirdForMaskedLM._from_config(_config(s), attn_implementation="eager")

    return converted_case(
        "bigbird-mlm-train", build_ref,
        lambda: mlm_batch(mode=s["mode"], vocab=s["vocab"], batch=s["batch"], seq=s["seq"], mask_prob=s["mask_prob"],
                          seed=s["seed"]),
        dict(mode=s["mode"], dtype=s["dtype"], device=s["device"]),
        f"BigBirdForMaskedLM (block_sparse, eager) {_sizes_text(s)}; batch {s['batch']} x {s['seq']}; ours "
        f"sparse_prediction={s['sparse_prediction']}",
        task="masked-lm", sparse_prediction=s["sparse_prediction"],
    )


@register_case("bigbird-seqcls-train-padded", tiny=TINY_SEQCLS)
def bigbird_seqcls_train_padded(**kw) -> BenchCase:
    """BigBird sequence-classification finetuning step, 4 rows of lengths in [1024, 4096] padded to 4096 (fp32)."""
    s = case_sizes("bigbird-seqcls-train-padded", {**SIZES, **SEQCLS, "device": "cpu", "seed": 0}, kw)

    def build_ref():
        import transformers

        return transformers.BigBirdForSequenceClassification._from_config(
            _config(s, num_labels=s["num_labels"]), attn_implementation="eager")

    return converted_case(
        "bigbird-seqcls-train-padded", build_ref,
        lambda: padded_batch(batch=s["batch"], seq=s["seq"], min_len=s["min_len"], vocab=s["vocab"], seed=s["seed"],
                             pad_id=0, num_labels=s["num_labels"]),
        dict(mode="train", dtype="fp32", device=s["device"]),
        f"BigBirdForSequenceClassification (block_sparse, eager) {_sizes_text(s)}; batch {s['batch']}, lengths "
        f"uniform in [{s['min_len']}, {s['seq']}] padded to {s['seq']}; ours in its default configuration",
    )


@register_case("bigbird-vs-bert-mlm-train", tiny=TINY_SIZES)
def bigbird_vs_bert_mlm_train(**kw) -> BenchCase:
    """Our block-sparse BigBird against our full-attention BERT (sdpa) of the same size, MLM step at 4096 (fp32).
    The reference column is our BERT here, not transformers."""
    s = case_sizes("bigbird-vs-bert-mlm-train", {**MLM_SETTINGS, **SIZES}, kw)

    def build_pair():
        import transformers

        import hf_xfmr
        from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

        bigbird = hf_xfmr.from_transformers(transformers.BigBirdForMaskedLM(_config(s)), task="masked-lm")
        bigbird.config.sparse_prediction = s["sparse_prediction"]
        bert = XfmrBertForMaskedLM(XfmrBertConfig(
            vocab_size=s["vocab"], hidden_size=s["hidden"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], intermediate_size=s["ffn"], max_position_embeddings=max(4096, s["seq"]),
            sparse_prediction=s["sparse_prediction"], attn_implementation="sdpa"))
        return bigbird, bert

    return BenchCase(
        name="bigbird-vs-bert-mlm-train", build_pair=build_pair,
        make_batch=lambda: mlm_batch(mode=s["mode"], vocab=s["vocab"], batch=s["batch"], seq=s["seq"],
                                     mask_prob=s["mask_prob"], seed=s["seed"]),
        mode=s["mode"], device=s["device"],
        description=(f"XfmrBigBirdForMaskedLM (block_sparse) vs XfmrBertForMaskedLM (full attention, sdpa), "
                     f"{_sizes_text(s)}; batch {s['batch']} x {s['seq']}; sparse_prediction={s['sparse_prediction']}"),
    )
