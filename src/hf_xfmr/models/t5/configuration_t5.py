"""Configuration of T5 (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer", https://arxiv.org/abs/1910.10683), versions 1.0 and 1.1.

Field names follow transformers' `T5Config` (`d_model`, `d_kv`, `d_ff`, `num_layers`, `num_heads`, ...) so
checkpoints convert field by field; `hidden_size`, `num_attention_heads`, `num_hidden_layers` and
`head_dim` are aliases, as in transformers. One deliberate difference: `tie_word_embeddings` really
decides whether the output layer shares the embedding matrix (and, as in T5 v1.0, scales the decoder
output by d_model^-0.5 when it does); transformers 5 keeps the head tied whatever the flag says.
"""

from ..config_utils import FieldChecks, XfmrPretrainedConfig, check_single_id
from .presets import T5_PRESETS

FEED_FORWARD_ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu")


def feed_forward_activation(feed_forward_proj: str) -> tuple[str, bool]:
    """`feed_forward_proj` -> (activation name, gated?). "gated-gelu" is the tanh GELU (T5 v1.1's GEGLU)."""
    parts = feed_forward_proj.split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    name = parts[-1]
    if len(parts) > 2 or (len(parts) == 2 and not gated) or name not in FEED_FORWARD_ACTIVATIONS:
        valid = ", ".join(f"'{a}'" for a in FEED_FORWARD_ACTIVATIONS)
        raise ValueError(
            f"`feed_forward_proj`={feed_forward_proj!r} is not supported: use an activation ({valid}) or "
            f"'gated-' followed by one, e.g. 'relu' (T5 v1.0) or 'gated-gelu' (T5 v1.1)."
        )
    if gated and name == "gelu":
        name = "gelu_new"  # T5 v1.1 checkpoints were trained with the tanh approximation
    return name, gated


class XfmrT5Config(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr T5 encoder-decoder.

    Args:
        vocab_size: number of token ids (T5: 32128, of which the last 100 used pieces are the sentinels).
        d_model: width C of the residual stream.
        d_kv: size D of each attention head (H * D need not equal d_model).
        d_ff: width of the feed-forward block (of each half for a gated one).
        num_layers: encoder layers.
        num_decoder_layers: decoder layers; None means `num_layers`.
        num_heads: attention heads H.
        relative_attention_num_buckets: buckets of the relative position bias (one learned scalar per
            bucket and head, one table per stack).
        relative_attention_max_distance: distances at or beyond this share the last bucket; must exceed
            half the number of buckets.
        dropout_rate: dropout on embeddings, every sub-layer output, attention probabilities and inside
            the feed-forward block (T5 uses one rate everywhere).
        layer_norm_epsilon: epsilon of the RMS norms.
        initializer_factor: scales every initial standard deviation (T5's Mesh TensorFlow init).
        feed_forward_proj: "relu" (v1.0), "gated-gelu" (v1.1, GEGLU), or "[gated-]relu|gelu|gelu_new|silu".
        is_encoder_decoder: always True (read by `generate`).
        use_cache: return a key/value cache from decoder forwards in eval mode.
        pad_token_id / eos_token_id: special ids (T5: 0 and 1).
        decoder_start_token_id: first decoder input, before the shifted labels; None means `pad_token_id`
            (T5 starts from the pad id, 0).
        classifier_dropout: dropout inside the sequence-classification head and before the token classifier.
        tie_word_embeddings: True (v1.0): the output layer is the embedding matrix and the decoder output is
            scaled by d_model^-0.5 before it; False (v1.1): a separate `lm_head`, no scaling.
        chunked_lm_loss / unpad_inputs: BART's options (`XfmrBartConfig`): the LM loss is computed chunk by
            chunk without the (B, T, V) logits; the encoder runs right-padded batches on their real tokens only.
    """

    model_type = "xfmr-t5"
    presets = T5_PRESETS
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    decoder_layers_field = "num_decoder_layers"  # the decoder's depth (`num_hidden_layers` is `num_layers`)
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
    }
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads",
                       "relative_attention_num_buckets", "relative_attention_max_distance", "num_decoder_layers"),
        probabilities=("dropout_rate", "classifier_dropout"),
        positive_floats=("layer_norm_epsilon", "initializer_factor"),
        token_ids=("pad_token_id", "eos_token_id", "decoder_start_token_id"),
    )

    vocab_size: int = 32128
    d_model: int = 512
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 6
    num_decoder_layers: int | None = None
    num_heads: int = 8
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.1
    layer_norm_epsilon: float = 1e-6
    initializer_factor: float = 1.0
    feed_forward_proj: str = "relu"
    is_encoder_decoder: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | None = 1
    decoder_start_token_id: int | None = None
    classifier_dropout: float = 0.0
    tie_word_embeddings: bool = True
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    def derive_defaults(self):
        """The decoder is as deep as the encoder, and starts from the pad id, unless told otherwise."""
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id

    def check_own_fields(self):
        """The relative-position buckets, the feed-forward spelling, one eos id, and an encoder-decoder."""
        if self.relative_attention_num_buckets < 4:
            raise ValueError(f"`relative_attention_num_buckets` must be at least 4 (half exact, half logarithmic "
                             f"per direction), got {self.relative_attention_num_buckets}; T5 uses 32.")
        if self.relative_attention_max_distance <= self.relative_attention_num_buckets // 2:
            raise ValueError(
                f"`relative_attention_max_distance`={self.relative_attention_max_distance} must exceed half of "
                f"`relative_attention_num_buckets`={self.relative_attention_num_buckets} (the exact buckets); "
                f"T5 uses 128 with 32 buckets."
            )
        feed_forward_activation(self.feed_forward_proj)
        check_single_id("eos_token_id", self.eos_token_id, "T5: 1")
        if not self.is_encoder_decoder:
            raise ValueError("`is_encoder_decoder` must be True for T5 (use XfmrT5EncoderModel for the encoder alone).")

    @property
    def dense_act_fn(self) -> str:
        return feed_forward_activation(self.feed_forward_proj)[0]

    @property
    def is_gated_act(self) -> bool:
        return feed_forward_activation(self.feed_forward_proj)[1]
