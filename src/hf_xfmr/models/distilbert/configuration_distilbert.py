"""Configuration of DistilBERT (Sanh et al., 2019, https://arxiv.org/abs/1910.01108).

Field names follow transformers' `DistilBertConfig` (`dim`, `n_layers`, `n_heads`, `hidden_dim`, ...)
so checkpoints convert field by field; `hidden_size`, `num_hidden_layers` and `num_attention_heads`
are aliases of `dim`, `n_layers` and `n_heads`, as in transformers.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig
from .presets import DISTILBERT_PRESETS


class XfmrDistilBertConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr DistilBERT model.

    Args:
        vocab_size: number of token ids.
        max_position_embeddings: number of absolute positions.
        sinusoidal_pos_embds: initialise the position table with fixed sinusoids (Vaswani et al., 2017)
            instead of random values (the table stays trainable, as in transformers 5).
        n_layers: number of encoder layers (alias `num_hidden_layers`).
        n_heads: attention heads H per layer (alias `num_attention_heads`).
        dim: width C of every layer (alias `hidden_size`); must be divisible by `n_heads`.
        hidden_dim: width of the feed-forward block.
        dropout: dropout on the embeddings, on each feed-forward output and before the token classifier.
        attention_dropout: dropout on attention probabilities.
        activation: feed-forward (and MLM head) activation, one of `ACTIVATIONS`.
        initializer_range: standard deviation of the normal initialiser.
        qa_dropout: dropout before the question-answering scorer.
        seq_classif_dropout: dropout inside the sequence-classification / multiple-choice head.
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        tie_word_embeddings: share the input embedding matrix with the MLM decoder.
        sparse_prediction / unpad_inputs: BERT's options (`XfmrBertConfig`): the MLM head projects only the
            labelled positions in training; right-padded batches run on their real tokens only.
    """

    model_type = "xfmr-distilbert"
    presets = DISTILBERT_PRESETS
    attribute_map = {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "max_position_embeddings", "n_layers", "n_heads", "dim", "hidden_dim"),
        head_splits=(("dim", "n_heads"),),
        choices={"activation": ACTIVATIONS},
        probabilities=("dropout", "attention_dropout", "qa_dropout", "seq_classif_dropout"),
        positive_floats=("initializer_range",),
    )

    vocab_size: int = 30522
    max_position_embeddings: int = 512
    sinusoidal_pos_embds: bool = False
    n_layers: int = 6
    n_heads: int = 12
    dim: int = 768
    hidden_dim: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    initializer_range: float = 0.02
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    unpad_inputs: bool = True
