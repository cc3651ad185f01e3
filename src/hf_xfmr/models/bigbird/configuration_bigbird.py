"""Configuration of BigBird (Zaheer et al., 2020, https://arxiv.org/abs/2007.14062).

Field names follow transformers' `BigBirdConfig` so checkpoints convert field by field. `random_blocks`,
`sparse_prediction` and `unpad_inputs` are ours. BigBird as a decoder (`is_decoder`, cross-attention:
transformers' `BigBirdForCausalLM`) is not supported: hf_xfmr's BigBird is an encoder.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_non_negative_int
from .presets import BIGBIRD_PRESETS

ATTENTION_TYPES = ("block_sparse", "original_full")
RANDOM_BLOCKS = ("reference", "fresh")


class XfmrBigBirdConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr BigBird model.

    Args:
        vocab_size: number of token ids.
        hidden_size: width C of every layer; must be divisible by `num_attention_heads`.
        num_hidden_layers: number of encoder layers.
        num_attention_heads: attention heads H per layer (head size D = C / H).
        intermediate_size: width of the feed-forward block.
        hidden_act: feed-forward (and classification head) activation, one of `ACTIVATIONS`.
        hidden_dropout_prob: dropout on embeddings and on each sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities (full attention only: the reference's
            block-sparse attention has none, and neither has ours).
        max_position_embeddings: number of learned absolute positions (4096 for the published checkpoints).
        type_vocab_size: number of token types (segments A/B).
        initializer_range: standard deviation of the normal initialiser.
        layer_norm_eps: epsilon of every LayerNorm.
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        sep_token_id: the separator; question answering finds the question's end at its first occurrence.
        attention_type: "block_sparse" (each block of `block_size` tokens attends to 3 window blocks, the first
            and last blocks and `num_random_blocks` random blocks; the first and last blocks attend to
            everything) or "original_full" (BERT's full attention). Inputs of at most
            (5 + 2 * num_random_blocks) * block_size tokens run full attention in either mode (exact: the
            sparse layout would cost as much), as the reference does; a message says so once.
        use_bias: biases on the query, key and value projections.
        rescale_embeddings: multiply the token embeddings by sqrt(hidden_size).
        block_size: tokens per attention block. Lengths that are not a multiple are padded inside the model.
        num_random_blocks: random key blocks per query block (r).
        random_blocks: where the random blocks come from in training. "reference": transformers' pattern, drawn
            by numpy seeded with the layer index, the same at every step (and in eval mode all random blocks
            are block 0, as the reference's "no randomness"); "fresh": new blocks at every training forward,
            drawn with torch's generator (`torch.manual_seed` reproduces them), and in eval the reference's
            seeded training pattern (fixed, not degenerate).
        classifier_dropout: dropout of classification heads; None uses `hidden_dropout_prob`.
        tie_word_embeddings: share the input embedding matrix with the MLM decoder.
        sparse_prediction: BERT's option: in training with labels the MLM head projects only labelled positions.
        unpad_inputs: on padded batches run less padding (on by default). Full attention: BERT's unpadding
            (the real tokens only; exact). Block-sparse: the batch is cut to its longest row (then padded to a
            multiple of `block_size`), so the outputs equal the reference's on the batch as `padding="longest"`
            would have made it (the sparse layout depends on the length: the last global block and the random
            blocks move with it). Hidden states at padding positions are zeros either way. False runs the batch
            as given, the reference's exact outputs everywhere.
    """

    model_type = "xfmr-bigbird"
    presets = BIGBIRD_PRESETS
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "max_position_embeddings", "type_vocab_size", "block_size"),
        head_splits=(("hidden_size", "num_attention_heads"),),
        choices={"hidden_act": ACTIVATIONS, "attention_type": ATTENTION_TYPES, "random_blocks": RANDOM_BLOCKS},
        probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "layer_norm_eps"),
        token_ids=("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id"),
    )

    vocab_size: int = 50358
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 4096
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    sep_token_id: int | None = 66
    attention_type: str = "block_sparse"
    use_bias: bool = True
    rescale_embeddings: bool = False
    block_size: int = 64
    num_random_blocks: int = 3
    random_blocks: str = "reference"
    classifier_dropout: float | None = None
    tie_word_embeddings: bool = True
    sparse_prediction: bool = False
    unpad_inputs: bool = True

    def check_own_fields(self):
        check_non_negative_int("num_random_blocks", self.num_random_blocks)
