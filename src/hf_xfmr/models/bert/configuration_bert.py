"""Configuration of BERT (Devlin et al., 2018, https://arxiv.org/abs/1810.04805).

Field names follow transformers' `BertConfig` so checkpoints convert field by field.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig
from .presets import BERT_PRESETS

POSITION_EMBEDDING_TYPES = ("absolute",)


class XfmrBertConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr BERT model.

    Args:
        vocab_size: number of token ids.
        hidden_size: width C of every layer; must be divisible by `num_attention_heads`.
        num_hidden_layers: number of encoder layers.
        num_attention_heads: attention heads H per layer (head size D = C / H).
        intermediate_size: width of the feed-forward block.
        hidden_act: feed-forward activation, one of `ACTIVATIONS`.
        hidden_dropout_prob: dropout on embeddings and on each sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: number of learned absolute positions.
        type_vocab_size: number of token types (segments); 2 for BERT (A/B), 1 for RoBERTa.
        initializer_range: standard deviation of the normal initialiser.
        layer_norm_eps: epsilon of every LayerNorm.
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        position_embedding_type: only "absolute" (learned) positions.
        classifier_dropout: dropout of classification heads; None uses `hidden_dropout_prob`.
        tie_word_embeddings: share the input embedding matrix with the MLM decoder.
        sparse_prediction: in training mode with labels, the MLM head projects only the positions with a
            label (!= -100) onto the vocabulary. The loss is identical; `logits` then has shape (N_labelled, V)
            (eval mode returns the full logits, so Trainer evaluation works unchanged).
            This skips ~85% of the largest matmul in MLM pretraining.
        unpad_inputs: run right-padded batches on their real tokens only (every head, training and
            inference). Outputs at real positions are unchanged; hidden states at padding positions are
            zeros, and question answering gives padding positions the lowest start/end logits (its loss
            then covers real tokens only). False runs the padded layout, the reference's exact outputs
            everywhere (QA loss included).
    """

    model_type = "xfmr-bert"
    presets = BERT_PRESETS
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "max_position_embeddings", "type_vocab_size"),
        head_splits=(("hidden_size", "num_attention_heads"),),
        choices={"hidden_act": ACTIVATIONS, "position_embedding_type": POSITION_EMBEDDING_TYPES},
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "layer_norm_eps"),
    )

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    position_embedding_type: str = "absolute"
    classifier_dropout: float | None = None
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    unpad_inputs: bool = True
