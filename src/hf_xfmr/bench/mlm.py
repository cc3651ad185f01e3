"""What the MLM cases of the BERT-family encoders (bench/bert.py, albert.py, distilbert.py) share: a
reference `...ForMaskedLM` built from a config with random weights, ours converted from it by
`hf_xfmr.from_transformers(ref, task="masked-lm")`, and a batch of random ids with, in train mode,
labels on `mask_prob` of the positions."""

from collections.abc import Callable

import torch

from .harness import BenchCase, dtype_from_name

FIRST_ID = 5  # skip [PAD]/<s>/</s>/... so RoBERTa's position ids (derived from padding) are all real


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

    def build_pair():
        import hf_xfmr

        ref = build_ref()
        ours = hf_xfmr.from_transformers(ref, task="masked-lm")
        ours.config.sparse_prediction = sparse_prediction
        return ours, ref

    return BenchCase(
        name=name,
        build_pair=build_pair,
        make_batch=lambda: mlm_batch(mode=mode, vocab=vocab, batch=batch, seq=seq, mask_prob=mask_prob, seed=seed),
        mode=mode,
        autocast_dtype=dtype_from_name(dtype),
        device=device,
        description=f"{description}; batch {batch} x {seq}; ours sparse_prediction={sparse_prediction}",
    )
