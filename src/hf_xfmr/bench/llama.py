"""Benchmark cases for the Llama family and Mixtral: supervised finetuning (full and LoRA) on padded chat-style
batches, causal-LM training and greedy generation, against `LlamaForCausalLM` / `MixtralForCausalLM` in sdpa,
identical weights through `hf_xfmr.from_transformers`, ours in its default configuration.

- `llama-sft-lora-padded`: a LoRA (r 16 on q/k/v/o/gate/up/down, both sides the same PEFT config) SFT step,
  hidden 256, 4 layers, 8 query / 2 key-value heads, vocabulary 32,000, 8 rows of lengths uniform in [32, 512]
  right-padded to 512, labels = the ids on real tokens (-100 on padding).
- `llama-sft-full-padded`: the same batch, every weight trained.
- `llama-sft-qlora-padded`: the LoRA step of `llama-sft-lora-padded` on a 4-bit base, both sides prepared the
  QLoRA way (`BitsAndBytesConfig` NF4, fp32 compute, `peft.prepare_model_for_kbit_training`, which turns on
  gradient checkpointing): what `hf-xfmr finetune --lora --load_in_4bit` runs. Its ours-side process memory over
  `llama-sft-lora-padded`'s is the QLoRA / LoRA figure of docs/benchmarks.md.
- `llama-generate`: greedy generation of 128 tokens for 8 prompts of lengths uniform in [32, 128], left-padded.
- `mixtral-clm-train`: the same model with a sparse MoE feed-forward (8 experts, top 2), a causal-LM step on
  4 x 512 full rows; the reference in its fastest `experts_implementation` on this CPU (`ref_experts`).
"""

import torch

from .converted import converted_pair, generation_case
from .finetune import padded_batch
from .harness import BenchCase, case_sizes, register_case

SIZES = dict(hidden=256, layers=4, heads=8, kv_heads=2, ffn=1024, vocab=32000, max_positions=1024,
             batch=8, seq=512, min_len=32)
TINY_SIZES = dict(hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, vocab=512, max_positions=128, batch=2, seq=32,
                  min_len=8)
SFT_SETTINGS = dict(lora_r=16, device="cpu", seed=0)
GENERATE_SETTINGS = dict(new_tokens=128, device="cpu", seed=0)
GENERATE_SIZES = dict(SIZES, seq=128)
GENERATE_TINY = dict(TINY_SIZES, seq=8, min_len=4, new_tokens=4)
MIXTRAL_SIZES = dict(SIZES, ffn=512, experts=8, top_k=2, batch=4, seq=512, min_len=512)
MIXTRAL_TINY = dict(TINY_SIZES, experts=4, top_k=2, min_len=32)
MIXTRAL_SETTINGS = dict(ref_experts="grouped_mm", device="cpu", seed=0)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _llama(s: dict):
    """`LlamaForCausalLM` at the sizes of `s`, random weights, sdpa."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], max_position_embeddings=s["max_positions"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def _mixtral(s: dict):
    """`MixtralForCausalLM` at the sizes of `s`, random weights, sdpa, experts run by `s["ref_experts"]`."""
    import transformers

    config = transformers.MixtralConfig(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ffn"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"], max_position_embeddings=s["max_positions"],
        num_local_experts=s["experts"], num_experts_per_tok=s["top_k"], pad_token_id=0, bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.MixtralForCausalLM._from_config(config, attn_implementation="sdpa",
                                                         experts_implementation=s["ref_experts"])


def _sft_batch(s: dict) -> dict:
    """Right-padded rows (lengths uniform in [min_len, seq]) with causal-LM labels on the real tokens."""
    batch = padded_batch(batch=s["batch"], seq=s["seq"], min_len=s["min_len"], vocab=s["vocab"], seed=s["seed"],
                         pad_id=0)
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


def _with_lora(build_pair, r: int):
    """Both models of `build_pair()` wrapped by PEFT with the same LoRA config (r, alpha 2r, all projections)."""

    def build() -> tuple:
        from peft import LoraConfig, get_peft_model

        ours, ref = build_pair()
        lora = dict(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
        return get_peft_model(ours, LoraConfig(**lora)), get_peft_model(ref, LoraConfig(**lora))

    return build


def _quantized(build_pair):
    """Both models of `build_pair()` saved and loaded back with NF4 weights (fp32 compute), then prepared by
    `peft.prepare_model_for_kbit_training` (frozen base, gradient checkpointing), as the finetune CLI does."""

    def build() -> tuple:
        import tempfile

        from peft import prepare_model_for_kbit_training
        from transformers import BitsAndBytesConfig

        quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_compute_dtype=torch.float32)
        loaded = []
        for model in build_pair():
            with tempfile.TemporaryDirectory() as folder:
                model.save_pretrained(folder)
                model = type(model).from_pretrained(folder, quantization_config=quantization)
            loaded.append(prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False}))
        return tuple(loaded)

    return build


def _sft_case(name: str, lora: bool, overrides: dict, quantized: bool = False) -> BenchCase:
    s = case_sizes(name, {**SIZES, **SFT_SETTINGS}, overrides)
    build_pair = converted_pair(lambda: _llama(s))
    if quantized:
        build_pair = _quantized(build_pair)
    adapters = f" + PEFT LoRA r {s['lora_r']} on every projection" if lora else ""
    adapters = f" 4-bit NF4 base (QLoRA, gradient checkpointing){adapters}" if quantized else adapters
    return BenchCase(
        name=name, build_pair=_with_lora(build_pair, s["lora_r"]) if lora else build_pair,
        make_batch=lambda: _sft_batch(s), mode="train", device=s["device"],
        description=(f"LlamaForCausalLM (sdpa){adapters}; "
                     f"hidden {s['hidden']}, {s['layers']} layers, {s['heads']} query / {s['kv_heads']} key-value "
                     f"heads, FFN {s['ffn']}, vocab {s['vocab']}; batch {s['batch']}, lengths uniform in "
                     f"[{s['min_len']}, {s['seq']}] right-padded to {s['seq']}; ours in its default configuration"),
    )


@register_case("llama-sft-lora-padded", tiny=TINY_SIZES)
def llama_sft_lora_padded(**kw) -> BenchCase:
    """Headline: Llama LoRA SFT step, 8 rows of lengths in [32, 512] padded to 512 (fp32)."""
    return _sft_case("llama-sft-lora-padded", True, kw)


@register_case("llama-sft-qlora-padded", tiny=TINY_SIZES)
def llama_sft_qlora_padded(**kw) -> BenchCase:
    """Llama QLoRA SFT step (NF4 base, LoRA r 16) on the same padded batch, both sides quantized (fp32 compute)."""
    return _sft_case("llama-sft-qlora-padded", True, kw, quantized=True)


@register_case("llama-sft-full-padded", tiny=TINY_SIZES)
def llama_sft_full_padded(**kw) -> BenchCase:
    """Llama full-finetuning SFT step on the same padded batch (fp32)."""
    return _sft_case("llama-sft-full-padded", False, kw)


@register_case("llama-generate", tiny=GENERATE_TINY)
def llama_generate(**overrides) -> BenchCase:
    """Llama greedy generation of 128 tokens for 8 left-padded prompts of lengths in [32, 128] (fp32)."""
    s = case_sizes("llama-generate", {**GENERATE_SIZES, **GENERATE_SETTINGS}, overrides)

    def make_batch():
        batch = padded_batch(batch=s["batch"], seq=s["seq"], min_len=s["min_len"], vocab=s["vocab"],
                             seed=s["seed"], pad_id=0)
        shift = s["seq"] - batch["attention_mask"].sum(-1)  # (B,) how far each row moves right
        index = (torch.arange(s["seq"])[None] - shift[:, None]) % s["seq"]  # left padding: roll each row
        return {key: value.gather(1, index) for key, value in batch.items()}

    return generation_case(
        "llama-generate", lambda: _llama(s), make_batch, new_tokens=s["new_tokens"], device=s["device"],
        description=(f"LlamaForCausalLM.generate greedy, {s['new_tokens']} new tokens, {s['batch']} prompts of "
                     f"lengths uniform in [{s['min_len']}, {s['seq']}], left-padded; hidden {s['hidden']}, "
                     f"{s['layers']} layers, vocab {s['vocab']}"),
    )


@register_case("mixtral-clm-train", tiny=MIXTRAL_TINY)
def mixtral_clm_train(**overrides) -> BenchCase:
    """Mixtral causal-LM training step, 8 experts top 2, 4 x 512 (fp32)."""
    s = case_sizes("mixtral-clm-train", {**MIXTRAL_SIZES, **MIXTRAL_SETTINGS}, overrides)
    return BenchCase(
        name="mixtral-clm-train", build_pair=converted_pair(lambda: _mixtral(s)), make_batch=lambda: _sft_batch(s),
        mode="train", device=s["device"],
        description=(f"MixtralForCausalLM (sdpa, experts_implementation={s['ref_experts']}) hidden {s['hidden']}, "
                     f"{s['layers']} layers, {s['experts']} experts top {s['top_k']}, expert FFN {s['ffn']}, "
                     f"vocab {s['vocab']}; batch {s['batch']} x {s['seq']}"),
    )
