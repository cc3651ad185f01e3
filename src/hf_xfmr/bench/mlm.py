"""What the MLM cases of the BERT-family encoders (bench/bert.py, albert.py, distilbert.py) share: a
reference `...ForMaskedLM` built from a config with random weights, ours converted from it by
`hf_xfmr.from_transformers(ref, task="masked-lm")`, and a batch of random ids with, in train mode,
labels on `mask_prob` of the positions. An architecture module gives its sizes and how to build its
reference from them (`encoder_mlm_case`); everything else is here."""

from collections.abc import Callable
from typing import Any

import torch

from .converted import converted_case
from .harness import BenchCase, case_sizes

FIRST_ID = 5  # skip [PAD]/<s>/</s>/... so RoBERTa's position ids (derived from padding) are all real
# What every MLM case takes besides the architecture's sizes, with its defaults.
MLM_SETTINGS = dict(mode="train", dtype="fp32", sparse_prediction=True, mask_prob=0.15, device="cpu", seed=0)


def sdpa_masked_lm(prefix: str, **config: Any) -> Callable[[], torch.nn.Module]:
    """A function building transformers' `<prefix>ForMaskedLM` from `<prefix>Config(**config)`, random weights,
    sdpa attention (e.g. `sdpa_masked_lm("Albert", hidden_size=256, ...)`)."""

    def build() -> torch.nn.Module:
        import transformers

        config_class = getattr(transformers, f"{prefix}Config")
        return getattr(transformers, f"{prefix}ForMaskedLM")._from_config(config_class(**config),
                                                                          attn_implementation="sdpa")

    return build


def mlm_batch(*, mode: str, vocab: int, batch: int, seq: int, mask_prob: float, seed: int) -> dict:
    """(batch, seq) random ids in [FIRST_ID, vocab), attention mask all ones, and in train mode `labels`
    on `mask_prob` of the positions (-100 elsewhere); seeded."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(FIRST_ID, vocab, (batch, seq), generator=g)
    out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    if mode == "train":
        targets = torch.rand(batch, seq, generator=g) < mask_prob
        out["labels"] = torch.where(targets, input_ids, torch.full_like(input_ids, -100))
    return out


def mlm_case(name: str, build_ref: Callable[[], torch.nn.Module], *, mode: str, dtype: str, sparse_prediction: bool,
             vocab: int, max_positions: int, batch: int, seq: int, mask_prob: float, device: str, seed: int,
             description: str) -> BenchCase:
    """A case comparing `build_ref()` with its conversion; `description` names the sizes."""
    if vocab <= FIRST_ID:
        raise ValueError(f"vocab must be > {FIRST_ID}, got {vocab}")
    if seq > max_positions:
        raise ValueError(f"seq ({seq}) must be <= max_positions ({max_positions})")

    return converted_case(
        name, build_ref,
        lambda: mlm_batch(mode=mode, vocab=vocab, batch=batch, seq=seq, mask_prob=mask_prob, seed=seed),
        dict(mode=mode, dtype=dtype, device=device),
        f"{description}; batch {batch} x {seq}; ours sparse_prediction={sparse_prediction}",
        task="masked-lm", sparse_prediction=sparse_prediction,
    )


def encoder_mlm_case(name: str, sizes: dict[str, Any], reference: Callable[[dict[str, Any]], tuple],
                     overrides: dict[str, Any]) -> BenchCase:
    """The MLM case `name` of one encoder architecture.

    `sizes`: the architecture's headline sizes (with `vocab`, `max_positions`, `batch`, `seq`); the factory's
    `overrides` may change them and `MLM_SETTINGS`. `reference(resolved)` returns (a function building the
    reference model, the description of its sizes).
    """
    s = case_sizes(name, {**MLM_SETTINGS, **sizes}, overrides)
    build_ref, description = reference(s)
    return mlm_case(name, build_ref, mode=s["mode"], dtype=s["dtype"], sparse_prediction=s["sparse_prediction"],
                    vocab=s["vocab"], max_positions=s["max_positions"], batch=s["batch"], seq=s["seq"],
                    mask_prob=s["mask_prob"], device=s["device"], seed=s["seed"], description=description)
