"""Configuration of ELECTRA (Clark et al., 2020, https://arxiv.org/abs/2003.10555).

Field names follow transformers' `ElectraConfig` so checkpoints convert field by field; the four
replaced-token-detection fields (`generator_size_ratio`, `generator_loss_weight`, `discriminator_loss_weight`,
`discriminator_mlm_weight`) are ours: transformers has no model that trains a generator and a discriminator
together.
"""

import dataclasses
import math

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig
from .presets import ELECTRA_PRESETS

SUMMARY_TYPES = ("first",)
SUMMARY_ACTIVATIONS = (*ACTIVATIONS, "tanh", None)


class XfmrElectraConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr ELECTRA model (a discriminator, a generator, or a finetuned encoder).

    Args:
        vocab_size: number of token ids.
        embedding_size: width E of the token, position and type embeddings. When it differs from `hidden_size`
            a linear projection E -> C follows them (transformers' `embeddings_project`).
        hidden_size: width C of every layer; must be divisible by `num_attention_heads`.
        num_hidden_layers: number of encoder layers.
        num_attention_heads: attention heads H per layer (head size D = C / H).
        intermediate_size: width of the feed-forward block.
        hidden_act: feed-forward and discriminator-head activation, one of `ACTIVATIONS`.
        hidden_dropout_prob: dropout on embeddings and on each sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: number of learned absolute positions.
        type_vocab_size: number of token types (segments A/B).
        initializer_range: standard deviation of the normal initialiser.
        layer_norm_eps: epsilon of every LayerNorm.
        summary_type / summary_use_proj / summary_activation / summary_last_dropout: the multiple-choice
            head's sequence summary: the first token ("first", the only type ELECTRA uses), a C -> C projection
            (or none), its activation (`ACTIVATIONS`, "tanh", or None for none) and the dropout after it.
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        classifier_dropout: dropout of classification heads; None uses `hidden_dropout_prob`.
        tie_word_embeddings: share the input embedding matrix with the generator's (MLM) decoder.
        sparse_prediction / unpad_inputs: BERT's options (`XfmrBertConfig`): the MLM head projects only the
            labelled positions in training; right-padded batches run on their real tokens only (on by default).
        generator_size_ratio: in (0, 1]: the generator of `XfmrElectraForReplacedTokenDetection` has this
            fraction of the discriminator's attention heads (at least 1, the head size kept, so its hidden size
            is heads x D) and of its feed-forward width. 0.25 as in the paper (sec. 3.2, "1/4-1/2 the size").
        generator_loss_weight / discriminator_loss_weight: loss = generator_loss_weight x generator MLM loss +
            discriminator_loss_weight x discriminator loss (paper: 1 and 50).
        discriminator_mlm_weight: weight of an auxiliary MLM loss on the discriminator (predict the original
            token at the masked positions from the corrupted input, the paper's "Replace MLM", sec. 3.2, through a
            head tied to the shared embeddings), added to the loss; 0 (the default, the paper's ELECTRA) builds no
            such head.
    """

    model_type = "xfmr-electra"
    presets = ELECTRA_PRESETS
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                       "intermediate_size", "max_position_embeddings", "type_vocab_size"),
        head_splits=(("hidden_size", "num_attention_heads"),),
        choices={"hidden_act": ACTIVATIONS, "summary_type": SUMMARY_TYPES,
                 "summary_activation": SUMMARY_ACTIVATIONS},
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob", "summary_last_dropout"),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "layer_norm_eps"),
    )

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    classifier_dropout: float | None = None
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    unpad_inputs: bool = True
    generator_size_ratio: float = 0.25
    generator_loss_weight: float = 1.0
    discriminator_loss_weight: float = 50.0
    discriminator_mlm_weight: float = 0.0

    def check_own_fields(self):
        """The replaced-token-detection fields: a ratio in (0, 1], finite non-negative weights."""
        ratio = self.generator_size_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ValueError(f"`generator_size_ratio` must be in (0, 1] (the generator's share of the "
                             f"discriminator's width; 0.25 in the paper), got {ratio!r}.")
        for name in ("generator_loss_weight", "discriminator_loss_weight", "discriminator_mlm_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"`{name}` must be a finite number >= 0 (the paper uses generator 1, "
                                 f"discriminator 50, no discriminator MLM: 0), got {value!r}.")
        if self.generator_loss_weight == 0 and self.discriminator_loss_weight == 0 == self.discriminator_mlm_weight:
            raise ValueError("`generator_loss_weight` and `discriminator_loss_weight` are both 0: nothing would be "
                             "trained; set at least one above 0.")

    def generator_config(self) -> "XfmrElectraConfig":
        """The config of the generator of a replaced-token-detection model with this discriminator config.

        Heads, hidden and feed-forward widths are `generator_size_ratio` of the discriminator's (at least one
        head, the head size D kept: hidden = heads x D); everything else, the embedding size among it, is the
        same, so the two can share their token, position and type embeddings."""
        head_dim = self.hidden_size // self.num_attention_heads
        heads = max(1, round(self.num_attention_heads * self.generator_size_ratio))
        intermediate = max(1, round(self.intermediate_size * self.generator_size_ratio))
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        fields.update(hidden_size=heads * head_dim, num_attention_heads=heads, intermediate_size=intermediate)
        config = type(self)(**fields)
        config._attn_implementation = self._attn_implementation
        return config
