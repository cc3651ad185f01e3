"""The BERT family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="bert", model_type="xfmr-bert", objectives=("mlm", "wwm", "mlm+nsp"),
    tokenizer=TokenizerRecipe(  # WordPiece, lowercase (uncased BERT)
        kind="wordpiece", special=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
        roles=dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]"),
        template=("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"),
    ),
)
