"""Configuration of BART (Lewis et al., 2020, "BART: Denoising Sequence-to-Sequence Pre-training for
Natural Language Generation, Translation, and Comprehension", https://arxiv.org/abs/1910.13461).

Field names follow transformers' `BartConfig` (`d_model`, `encoder_layers`, `encoder_ffn_dim`,
`encoder_attention_heads`, `decoder_*`, `max_position_embeddings`, `scale_embedding`, ...) so
checkpoints convert field by field; `hidden_size`, `num_attention_heads` and `num_hidden_layers` are
aliases, as in transformers.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_single_id
from .presets import BART_PRESETS


class XfmrBartConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr BART encoder-decoder.

    Args:
        vocab_size: number of token ids (BART: 50265).
        max_position_embeddings: learned positions per stack (the longest input, and the longest target
            or generation); the tables hold two more rows, BART's offset of 2.
        d_model: width C of every layer; must be divisible by both head counts.
        encoder_layers / decoder_layers: layers of each stack.
        encoder_attention_heads / decoder_attention_heads: heads H of each stack (head size C / H).
        encoder_ffn_dim / decoder_ffn_dim: width of each stack's feed-forward block.
        activation_function: feed-forward activation ("gelu" = exact erf GELU, BART's).
        dropout: dropout on the embeddings and on every sub-layer output before the residual sum.
        attention_dropout: dropout on attention probabilities (BART: 0, so SDPA's fused kernel runs).
        activation_dropout: dropout after the feed-forward activation.
        encoder_layerdrop / decoder_layerdrop: probability of skipping a whole layer in training (LayerDrop).
        init_std: standard deviation of the normal initialiser.
        classifier_dropout: dropout inside the sequence-classification head.
        scale_embedding: multiply token embeddings by sqrt(d_model) (mBART-style; BART: False).
        use_cache: return a key/value cache from decoder forwards in eval mode.
        pad_token_id / bos_token_id / eos_token_id: special ids (BART: 1, 0, 2).
        decoder_start_token_id: first decoder input, before the shifted labels (BART: the </s> id, 2).
        forced_eos_token_id: `generate()` forces this token when it reaches its length limit (BART: 2; None: off).
        is_encoder_decoder: True, except for the decoder alone (`XfmrBartForCausalLM` sets False on its copy).
        tie_word_embeddings: the output layer is the shared embedding matrix.
        chunked_lm_loss: in training mode with labels, compute the LM loss chunk by chunk from the decoder
            hidden states without forming the (B, T, V) logits (`logits` is then None).
        unpad_inputs: the encoder runs right-padded batches on their real tokens only (every head, training
            and inference). Encoder outputs at real positions are unchanged and zeros at padding positions;
            the decoder's outputs, logits and losses equal the reference's everywhere (its cross-attention
            hides the encoder's padding). False runs the padded layout, the reference's exact outputs.
    """

    model_type = "xfmr-bart"
    presets = BART_PRESETS
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    decoder_layers_field = "decoder_layers"  # the decoder's depth (`num_hidden_layers` is `encoder_layers`)
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "encoder_ffn_dim",
                       "encoder_attention_heads", "decoder_layers", "decoder_ffn_dim", "decoder_attention_heads"),
        head_splits=(("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads")),
        choices={"activation_function": ACTIVATIONS},
        probabilities=("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop",
                       "classifier_dropout"),
        positive_floats=("init_std",),
        token_ids=("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id"),
    )

    vocab_size: int = 50265
    max_position_embeddings: int = 1024
    d_model: int = 1024
    encoder_layers: int = 12
    encoder_ffn_dim: int = 4096
    encoder_attention_heads: int = 16
    decoder_layers: int = 12
    decoder_ffn_dim: int = 4096
    decoder_attention_heads: int = 16
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    activation_function: str = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    init_std: float = 0.02
    classifier_dropout: float = 0.0
    scale_embedding: bool = False
    use_cache: bool = True
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 2
    forced_eos_token_id: int | None = 2
    is_encoder_decoder: bool = True
    is_decoder: bool = False
    tie_word_embeddings: bool = True
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    def check_own_fields(self):
        """One end-of-sequence id, not a list (checked before the ids themselves)."""
        for name in ("eos_token_id", "forced_eos_token_id"):
            check_single_id(name, getattr(self, name), "BART: 2")
