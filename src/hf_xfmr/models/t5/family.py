"""The T5 family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="t5", model_type="xfmr-t5", objectives=("span-corruption",),
    tokenizer=TokenizerRecipe(  # Unigram; the 100 span-corruption sentinels appended, <extra_id_0> the last id
        kind="unigram", special=("<pad>", "</s>", "<unk>"),
        roles=dict(pad_token="<pad>", eos_token="</s>", unk_token="<unk>"),
        template=("$A:0 </s>:0", "$A:0 </s>:0 $B:0 </s>:0"),
        sentinels=100,
    ),
)
