"""The Llama family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe.

One family for Llama, Mistral and Qwen2 checkpoints (`hf_model_type` in the config says which one a model
converts back to)."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="llama", model_type="xfmr-llama", objectives=("clm",),
    tokenizer=TokenizerRecipe(  # byte-level BPE with Llama's special tokens (<unk> also pads, as Llama 2 does)
        kind="bpe", special=("<unk>", "<s>", "</s>"),
        roles=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>"),
    ),
    aliases=("mistral", "qwen2"),
)
