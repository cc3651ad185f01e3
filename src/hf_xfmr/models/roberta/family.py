"""The RoBERTa family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="roberta", model_type="xfmr-roberta", objectives=("mlm", "wwm"),
    tokenizer=TokenizerRecipe(  # byte-level BPE
        kind="bpe", special=("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
        roles=dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", cls_token="<s>",
                   sep_token="</s>", mask_token="<mask>"),
        template=("<s>:0 $A:0 </s>:0", "<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0"),
    ),
)
