"""Configuration of ALBERT (Lan et al., 2020, https://arxiv.org/abs/1909.11942).

Field names follow transformers' `AlbertConfig` so checkpoints convert field by field.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig
from .presets import ALBERT_PRESETS


class XfmrAlbertConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr ALBERT model.

    Args:
        vocab_size: number of token ids.
        embedding_size: width E of the token embeddings (factorised: V x E, then a projection E -> C).
        hidden_size: width C of every layer; must be divisible by `num_attention_heads`.
        num_hidden_layers: number of layer applications (depth of the network).
        num_hidden_groups: number of groups of distinct parameters; consecutive layer applications share a
            group (`num_hidden_layers / num_hidden_groups` each). 1 = every layer shares one set (ALBERT).
            Must divide `num_hidden_layers`.
        inner_group_num: distinct layers inside a group, applied one after the other at each application.
        num_attention_heads: attention heads H per layer (head size D = C / H).
        intermediate_size: width of the feed-forward block.
        hidden_act: feed-forward (and MLM head) activation, one of `ACTIVATIONS`.
        hidden_dropout_prob: dropout on the embeddings and on the attention output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: number of learned absolute positions.
        type_vocab_size: number of token types (segments A/B).
        initializer_range: standard deviation of the normal initialiser.
        layer_norm_eps: epsilon of every LayerNorm.
        classifier_dropout_prob: dropout before the classification / SOP heads; None uses `hidden_dropout_prob`.
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        tie_word_embeddings: share the input embedding matrix with the MLM decoder.
        sparse_prediction / unpad_inputs: BERT's options (`XfmrBertConfig`): the MLM head projects only the
            labelled positions in training; right-padded batches run on their real tokens only.
    """

    model_type = "xfmr-albert"
    presets = ALBERT_PRESETS
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
                       "inner_group_num", "num_attention_heads", "intermediate_size", "max_position_embeddings",
                       "type_vocab_size"),
        head_splits=(("hidden_size", "num_attention_heads"),),
        choices={"hidden_act": ACTIVATIONS},
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        optional_probabilities=("classifier_dropout_prob",),
        positive_floats=("initializer_range", "layer_norm_eps"),
    )

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    classifier_dropout_prob: float | None = 0.1
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    unpad_inputs: bool = True

    def check_own_fields(self):
        """The groups of shared layers are all the same size."""
        if self.num_hidden_layers % self.num_hidden_groups != 0:
            divisors = [g for g in range(1, self.num_hidden_layers + 1) if self.num_hidden_layers % g == 0]
            raise ValueError(
                f"`num_hidden_groups`={self.num_hidden_groups} must divide `num_hidden_layers`="
                f"{self.num_hidden_layers}: each group of shared parameters serves the same number of consecutive "
                f"layers. Use one of {divisors} (1 = all layers share one set, as in ALBERT)."
            )
