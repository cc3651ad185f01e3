"""Benchmark cases for GPT: causal-LM training and greedy generation against `GPT2LMHeadModel`
(sdpa), identical weights through `hf_xfmr.from_transformers`."""

import torch

from .converted import converted_case, generation_case
from .harness import BenchCase, case_sizes, register_case

# Headline size: a small GPT with a 32k vocabulary, so the LM head and its loss matter.
CLM_SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=32000, max_positions=1024, batch=8, seq=512)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, max_positions=128, batch=2, seq=32)
GENERATE_TINY = dict(TINY_SIZES, seq=8, new_tokens=4)
CLM_SETTINGS = dict(mode="train", dtype="fp32", chunked_lm_loss=True, device="cpu", seed=0)
GENERATE_SETTINGS = dict(new_tokens=128, left_pad=0, device="cpu", seed=0)


def _reference(s: dict, attn="sdpa"):
    """`GPT2LMHeadModel` at the sizes of `s` with random weights (dropout 0.1 as configured by default)."""
    import transformers

    config = transformers.GPT2Config(
        vocab_size=s["vocab"], n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"], n_inner=s["ffn"],
        n_positions=s["max_positions"], bos_token_id=s["vocab"] - 1, eos_token_id=s["vocab"] - 1, pad_token_id=0,
    )
    return transformers.GPT2LMHeadModel._from_config(config, attn_implementation=attn)


def _clm_case(name: str, **overrides) -> BenchCase:
    """Reference `GPT2LMHeadModel(config)` (sdpa, dropout 0.1 as configured by default) with random
    weights; ours converted from it. Batch: random ids, mask all ones, labels = input ids (train).
    Sizes: `CLM_SIZES`, settings: `CLM_SETTINGS`, both changed by `overrides`."""
    s = case_sizes(name, {**CLM_SETTINGS, **CLM_SIZES}, overrides)
    if s["seq"] > s["max_positions"]:
        raise ValueError(f"seq ({s['seq']}) must be <= max_positions ({s['max_positions']})")

    def make_batch():
        g = torch.Generator().manual_seed(s["seed"])
        input_ids = torch.randint(1, s["vocab"] - 1, (s["batch"], s["seq"]), generator=g)
        out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if s["mode"] == "train":
            out["labels"] = input_ids.clone()
        return out

    return converted_case(
        name, lambda: _reference(s), make_batch, s,
        f"GPT2LMHeadModel hidden {s['hidden']}, {s['layers']} layers, {s['heads']} heads, FFN {s['ffn']}, "
        f"vocab {s['vocab']}; batch {s['batch']} x {s['seq']}; ours chunked_lm_loss={s['chunked_lm_loss']}",
        chunked_lm_loss=s["chunked_lm_loss"],
    )


@register_case("gpt-clm-train", tiny=TINY_SIZES)
def gpt_clm_train(**kw) -> BenchCase:
    """Headline: GPT causal-LM training step (fp32), ours with the chunked vocabulary loss."""
    return _clm_case("gpt-clm-train", **{"mode": "train", **kw})


@register_case("gpt-clm-train-bf16", tiny=TINY_SIZES)
def gpt_clm_train_bf16(**kw) -> BenchCase:
    """GPT causal-LM training step under bf16 autocast."""
    return _clm_case("gpt-clm-train-bf16", **{"mode": "train", "dtype": "bf16", **kw})


@register_case("gpt-clm-train-dense", tiny=TINY_SIZES)
def gpt_clm_train_dense(**kw) -> BenchCase:
    """GPT causal-LM training with ours' chunked loss OFF (full logits): isolates the decoder's speed."""
    return _clm_case("gpt-clm-train-dense", **{"mode": "train", "chunked_lm_loss": False, **kw})


@register_case("gpt-generate", tiny=GENERATE_TINY)
def gpt_generate(**overrides) -> BenchCase:
    """Greedy generation of `new_tokens` tokens with a KV cache after a `seq`-token prompt (fp32)."""
    s = case_sizes("gpt-generate", {**GENERATE_SETTINGS, **CLM_SIZES}, overrides)
    if s["seq"] + s["new_tokens"] > s["max_positions"]:
        raise ValueError(f"seq + new_tokens ({s['seq'] + s['new_tokens']}) must be <= max_positions "
                         f"({s['max_positions']})")
    batch, seq, left_pad = s["batch"], s["seq"], s["left_pad"]

    def make_batch():
        g = torch.Generator().manual_seed(s["seed"])
        input_ids = torch.randint(1, s["vocab"] - 1, (batch, seq), generator=g)
        mask = torch.ones_like(input_ids)
        for row in range(1, batch, 2):  # every other row left-padded by `left_pad` tokens
            mask[row, :left_pad] = 0
        return {"input_ids": input_ids.masked_fill(mask == 0, 0), "attention_mask": mask}

    return generation_case(
        "gpt-generate", lambda: _reference(s), make_batch, new_tokens=s["new_tokens"], device=s["device"],
        description=(
            f"GPT2LMHeadModel.generate greedy, {s['new_tokens']} new tokens, prompt {batch} x {seq}"
            f"{f' (odd rows left-padded by {left_pad})' if left_pad else ''}; hidden {s['hidden']}, "
            f"{s['layers']} layers, vocab {s['vocab']}"
        ),
    )
