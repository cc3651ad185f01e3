"""The ELECTRA family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family

FAMILY = Family(
    name="electra", model_type="xfmr-electra", objectives=("rtd", "mlm"),
    tokenizer="bert",  # BERT's WordPiece, as the published ELECTRA checkpoints use (uncased, [CLS] A [SEP] B [SEP])
)
