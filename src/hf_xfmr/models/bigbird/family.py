"""The BigBird family record (`hf_xfmr.family`): names, pretraining objectives, tokenizer recipe."""

from hf_xfmr.family import Family

FAMILY = Family(
    name="bigbird", model_type="xfmr-bigbird", objectives=("mlm", "mlm+nsp"),
    tokenizer="bert",  # BERT's recipe ([CLS] A [SEP] B [SEP]); the published checkpoints ship a SentencePiece one
)
