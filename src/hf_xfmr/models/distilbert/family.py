"""The DistilBERT family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family

FAMILY = Family(
    name="distilbert", model_type="xfmr-distilbert", objectives=("mlm",),
    tokenizer="bert",  # BERT's WordPiece (its tokenizer emits no token types: the model takes none)
)
