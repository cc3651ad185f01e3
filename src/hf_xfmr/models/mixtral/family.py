"""The Mixtral family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe (Llama's)."""

from hf_xfmr.family import Family

FAMILY = Family(name="mixtral", model_type="xfmr-mixtral", objectives=("clm",), tokenizer="llama")
