"""Benchmark cases for GPT: causal-LM training and greedy generation against `GPT2LMHeadModel`
(sdpa), identical weights through `hf_xfmr.from_transformers`."""

import torch
from torch import nn

from .harness import BenchCase, dtype_from_name, register_case

# Headline size: a small GPT with a 32k vocabulary, so the LM head and its loss matter.
CLM_SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=32000, max_positions=1024, batch=8, seq=512)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, max_positions=128, batch=2, seq=32)
GENERATE_TINY = dict(TINY_SIZES, seq=8, new_tokens=4)


def _reference(hidden, layers, heads, ffn, vocab, max_positions, attn="sdpa"):
    import transformers

    config = transformers.GPT2Config(
        vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=ffn, n_positions=max_positions,
        bos_token_id=vocab - 1, eos_token_id=vocab - 1, pad_token_id=0,
    )
    return transformers.GPT2LMHeadModel._from_config(config, attn_implementation=attn)


def _clm_case(
    name: str,
    *,
    mode: str = "train",
    dtype: str = "fp32",
    chunked_lm_loss: bool = True,
    hidden: int = CLM_SIZES["hidden"],
    layers: int = CLM_SIZES["layers"],
    heads: int = CLM_SIZES["heads"],
    ffn: int = CLM_SIZES["ffn"],
    vocab: int = CLM_SIZES["vocab"],
    max_positions: int = CLM_SIZES["max_positions"],
    batch: int = CLM_SIZES["batch"],
    seq: int = CLM_SIZES["seq"],
    device: str = "cpu",
    seed: int = 0,
) -> BenchCase:
    """Reference `GPT2LMHeadModel(config)` (sdpa, dropout 0.1 as configured by default) with random
    weights; ours converted from it. Batch: random ids, mask all ones, labels = input ids (train)."""
    if seq > max_positions:
        raise ValueError(f"seq ({seq}) must be <= max_positions ({max_positions})")

    def build_pair():
        import hf_xfmr

        ref = _reference(hidden, layers, heads, ffn, vocab, max_positions)
        ours = hf_xfmr.from_transformers(ref)
        ours.config.chunked_lm_loss = chunked_lm_loss
        return ours, ref

    def make_batch():
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(1, vocab - 1, (batch, seq), generator=g)
        out = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if mode == "train":
            out["labels"] = input_ids.clone()
        return out

    return BenchCase(
        name=name, build_pair=build_pair, make_batch=make_batch, mode=mode,
        autocast_dtype=dtype_from_name(dtype), device=device,
        description=(
            f"GPT2LMHeadModel hidden {hidden}, {layers} layers, {heads} heads, FFN {ffn}, vocab {vocab}; "
            f"batch {batch} x {seq}; ours chunked_lm_loss={chunked_lm_loss}"
        ),
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


class Generate(nn.Module):
    """Calls `model.generate(**batch, **settings)` from `forward`, so the harness can time generation.
    `wrapped` is the model (the harness tests look through it)."""

    def __init__(self, model, **settings):
        super().__init__()
        self.wrapped = model
        self.settings = settings

    def forward(self, **batch):
        return self.wrapped.generate(**batch, **self.settings)


@register_case("gpt-generate", tiny=GENERATE_TINY)
def gpt_generate(
    *,
    hidden: int = CLM_SIZES["hidden"],
    layers: int = CLM_SIZES["layers"],
    heads: int = CLM_SIZES["heads"],
    ffn: int = CLM_SIZES["ffn"],
    vocab: int = CLM_SIZES["vocab"],
    max_positions: int = CLM_SIZES["max_positions"],
    batch: int = CLM_SIZES["batch"],
    seq: int = CLM_SIZES["seq"],
    new_tokens: int = 128,
    left_pad: int = 0,
    device: str = "cpu",
    seed: int = 0,
) -> BenchCase:
    """Greedy generation of `new_tokens` tokens with a KV cache after a `seq`-token prompt (fp32)."""
    if seq + new_tokens > max_positions:
        raise ValueError(f"seq + new_tokens ({seq + new_tokens}) must be <= max_positions ({max_positions})")
    settings = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1)

    def build_pair():
        import hf_xfmr

        ref = _reference(hidden, layers, heads, ffn, vocab, max_positions)
        ours = hf_xfmr.from_transformers(ref)
        return Generate(ours, **settings), Generate(ref, **settings)

    def make_batch():
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(1, vocab - 1, (batch, seq), generator=g)
        mask = torch.ones_like(input_ids)
        for row in range(1, batch, 2):  # every other row left-padded by `left_pad` tokens
            mask[row, :left_pad] = 0
        return {"input_ids": input_ids.masked_fill(mask == 0, 0), "attention_mask": mask}

    return BenchCase(
        name="gpt-generate", build_pair=build_pair, make_batch=make_batch, mode="infer", device=device,
        description=(
            f"GPT2LMHeadModel.generate greedy, {new_tokens} new tokens, prompt {batch} x {seq}"
            f"{f' (odd rows left-padded by {left_pad})' if left_pad else ''}; hidden {hidden}, {layers} layers, "
            f"vocab {vocab}"
        ),
    )
