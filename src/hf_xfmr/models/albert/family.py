"""The ALBERT family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="albert", model_type="xfmr-albert", objectives=("mlm+sop", "mlm"),
    tokenizer=TokenizerRecipe(  # SentencePiece-style Unigram with BERT's template
        kind="unigram", special=("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"),
        roles=dict(pad_token="<pad>", unk_token="<unk>", bos_token="[CLS]", eos_token="[SEP]", cls_token="[CLS]",
                   sep_token="[SEP]", mask_token="[MASK]"),
        template=("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"),
    ),
    # ALBERT's n-gram masking (Lan et al. 2020, sec. 4.1): spans of up to 3 tokens
    pretraining_defaults={"mlm+sop": {"max_ngram": 3}, "mlm": {"max_ngram": 3}},
)
