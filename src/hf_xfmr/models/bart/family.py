"""The BART family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family

FAMILY = Family(
    name="bart", model_type="xfmr-bart", objectives=("text-infilling", "gsg"),
    tokenizer="roberta",  # BART's byte-level BPE is RoBERTa's (GPT-2's merges, <s> A </s> templates)
)
