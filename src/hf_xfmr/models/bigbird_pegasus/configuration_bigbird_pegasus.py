"""Configuration of BigBird-Pegasus (Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences",
https://arxiv.org/abs/2007.14062, sec. 4 and app. E.5): Pegasus's pre-norm encoder-decoder (Zhang et al., 2020,
https://arxiv.org/abs/1912.08777) whose encoder attends block-sparsely.

Field names follow transformers' `BigBirdPegasusConfig` (`d_model`, `encoder_layers`, `encoder_ffn_dim`,
`encoder_attention_heads`, `decoder_*`, `attention_type`, `block_size`, `num_random_blocks`, `use_bias`,
`scale_embedding`, ...) so checkpoints convert field by field; `hidden_size`, `num_attention_heads`,
`num_hidden_layers` and `attention_probs_dropout_prob` are aliases, as in transformers.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_single_id
from .presets import BIGBIRD_PEGASUS_PRESETS

ATTENTION_TYPES = ("block_sparse", "original_full")
RANDOM_BLOCKS = ("reference", "fresh")


class XfmrBigBirdPegasusConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr BigBird-Pegasus encoder-decoder.

    Args:
        vocab_size: number of token ids (Pegasus: 96103).
        max_position_embeddings: learned positions per stack (the longest input, and the longest target or
            generation; 4096 in the published checkpoints).
        d_model: width C of every layer; must be divisible by both head counts.
        encoder_layers / decoder_layers: layers of each stack.
        encoder_attention_heads / decoder_attention_heads: heads H of each stack (head size C / H).
        encoder_ffn_dim / decoder_ffn_dim: width of each stack's feed-forward block.
        activation_function: feed-forward activation (Pegasus: "gelu_new", the tanh approximation).
        dropout: dropout on the embeddings and on every sub-layer output before the residual sum.
        attention_dropout: dropout on attention probabilities (the block-sparse encoder has none, as in the
            reference).
        activation_dropout: dropout after the decoder's feed-forward activation (the reference's encoder has none).
        encoder_layerdrop / decoder_layerdrop: probability of skipping a whole layer in training (LayerDrop).
        init_std: standard deviation of the normal initialiser.
        classifier_dropout: dropout inside the sequence-classification head.
        scale_embedding: multiply token embeddings by sqrt(d_model) (Pegasus: True).
        attention_type: the encoder's self-attention: "block_sparse" (BigBird: a window of 3 blocks, the first
            and last blocks global, `num_random_blocks` random blocks per query block) or "original_full".
            Inputs of at most (5 + 2 * num_random_blocks) * block_size tokens run full attention either way.
        block_size: tokens per block of the block-sparse encoder (inputs are padded to a multiple inside).
        num_random_blocks: random key blocks each query block attends to.
        random_blocks: where the encoder's random blocks come from (as BigBird's config). "reference":
            transformers' pattern, drawn by numpy seeded with the layer index, the same at every training step, and
            in eval mode all random blocks are block 0 (the reference's "no randomness"); "fresh": new blocks at
            every training forward, drawn with torch's generator (`torch.manual_seed` reproduces them), and in eval
            the reference's seeded training pattern.
        use_bias: biases on the attention projections (query, key, value, output) of both stacks.
        use_cache: return a key/value cache from decoder forwards in eval mode.
        pad_token_id / bos_token_id / eos_token_id: special ids (Pegasus: 0, 2, 1).
        decoder_start_token_id: first decoder input, before the shifted labels.
        is_encoder_decoder: True, except for the decoder alone (`XfmrBigBirdPegasusForCausalLM` sets False on
            its copy).
        tie_word_embeddings: the output layer is the shared embedding matrix.
        chunked_lm_loss: in training mode with labels, compute the LM loss chunk by chunk from the decoder
            hidden states without forming the (B, T, V) logits (`logits` is then None).
        unpad_inputs: the encoder runs right-padded batches on their real tokens only (full attention: every
            layer; block-sparse: the projections and feed-forward blocks, attention on the block layout).
            Encoder outputs at real positions are unchanged and zeros at padding positions; the decoder's
            outputs, logits and losses equal the reference's everywhere. False: the padded layout throughout.
    """

    model_type = "xfmr-bigbird-pegasus"
    presets = BIGBIRD_PEGASUS_PRESETS
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    decoder_layers_field = "decoder_layers"  # the decoder's depth (`num_hidden_layers` is `encoder_layers`)
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
        "attention_probs_dropout_prob": "attention_dropout",
    }
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "max_position_embeddings", "d_model", "encoder_layers", "encoder_ffn_dim",
                       "encoder_attention_heads", "decoder_layers", "decoder_ffn_dim", "decoder_attention_heads",
                       "block_size", "num_random_blocks"),
        head_splits=(("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads")),
        choices={"activation_function": ACTIVATIONS, "attention_type": ATTENTION_TYPES, "random_blocks": RANDOM_BLOCKS},
        probabilities=("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop",
                       "classifier_dropout"),
        positive_floats=("init_std",),
        token_ids=("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"),
    )

    vocab_size: int = 96103
    max_position_embeddings: int = 4096
    d_model: int = 1024
    encoder_layers: int = 16
    encoder_ffn_dim: int = 4096
    encoder_attention_heads: int = 16
    decoder_layers: int = 16
    decoder_ffn_dim: int = 4096
    decoder_attention_heads: int = 16
    encoder_layerdrop: float = 0.0
    decoder_layerdrop: float = 0.0
    activation_function: str = "gelu_new"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    init_std: float = 0.02
    classifier_dropout: float = 0.0
    scale_embedding: bool = True
    attention_type: str = "block_sparse"
    block_size: int = 64
    num_random_blocks: int = 3
    random_blocks: str = "reference"
    use_bias: bool = False
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 1
    decoder_start_token_id: int | None = 2
    is_encoder_decoder: bool = True
    is_decoder: bool = False
    tie_word_embeddings: bool = True
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    def check_own_fields(self):
        """One end-of-sequence id, not a list (checked before the ids themselves)."""
        check_single_id("eos_token_id", self.eos_token_id, "Pegasus: 1")

