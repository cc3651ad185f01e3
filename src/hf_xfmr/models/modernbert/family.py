"""The ModernBERT family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="modernbert", model_type="xfmr-modernbert", objectives=("mlm",),
    tokenizer=TokenizerRecipe(  # byte-level BPE with BERT-style special tokens (as OLMo's, which ModernBERT uses)
        kind="bpe", special=("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "<|endoftext|>"),
        roles=dict(unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                   bos_token="[CLS]", eos_token="[SEP]"),
        template=("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0"),
    ),
    pretraining_defaults={"mlm": {"mlm_probability": 0.3}},  # ModernBERT masks 30% (Warner et al. 2024, sec. 2.2)
)
