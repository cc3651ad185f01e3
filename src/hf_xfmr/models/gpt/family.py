"""The GPT family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="gpt", model_type="xfmr-gpt", objectives=("clm",),
    tokenizer=TokenizerRecipe(  # GPT-2's byte-level BPE: one special token for bos, eos, unk and pad
        kind="bpe", special=("<|endoftext|>",),
        roles=dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                   pad_token="<|endoftext|>"),
    ),
    aliases=("gpt2",),
)
