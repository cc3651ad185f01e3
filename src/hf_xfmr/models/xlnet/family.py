"""The XLNet family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="xlnet", model_type="xfmr-xlnet", objectives=("plm", "plm-mem"),
    tokenizer=TokenizerRecipe(  # Unigram; <cls> last with segment id 2, and left padding (the summary reads the end)
        kind="unigram", special=("<pad>", "<unk>", "<s>", "</s>", "<cls>", "<sep>", "<mask>", "<eod>"),
        roles=dict(pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>", cls_token="<cls>",
                   sep_token="<sep>", mask_token="<mask>", additional_special_tokens=["<eod>"]),
        template=("$A:0 <sep>:0 <cls>:2", "$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2"),
        padding_side="left",
    ),
)
