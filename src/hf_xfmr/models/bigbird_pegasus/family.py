"""The BigBird-Pegasus family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family, TokenizerRecipe

FAMILY = Family(
    name="bigbird_pegasus", model_type="xfmr-bigbird-pegasus", objectives=("gsg", "text-infilling"),
    # Pegasus's SentencePiece unigram layout: <pad> 0, </s> 1, the sentence mask <mask_1> 2 (gap sentences) and the
    # token mask <mask_2> 3 (the tokenizer's mask token, as transformers' PegasusTokenizer names them: `mask_token_sent`
    # and `mask_token`), then <unk>. Gap-sentence generation (the default objective) masks with <mask_1>.
    # (T5's recipe has the same <pad> / </s> ids but no mask token, which the seq2seq objectives need.)
    tokenizer=TokenizerRecipe(
        kind="unigram", special=("<pad>", "</s>", "<mask_1>", "<mask_2>", "<unk>"),
        roles=dict(pad_token="<pad>", eos_token="</s>", mask_token="<mask_2>", unk_token="<unk>",
                   additional_special_tokens=["<mask_1>"], mask_token_sent="<mask_1>"),
        template=("$A:0 </s>:0", "$A:0 </s>:0 $B:0 </s>:0"),
    ),
)
