"""Configuration of GPT (GPT-2 layout: Radford et al., 2019, "Language Models are Unsupervised
Multitask Learners").

Field names follow transformers' `GPT2Config` (`n_embd`, `n_layer`, `n_head`, `n_positions`, ...) so
checkpoints convert field by field; the generic names (`hidden_size`, `num_hidden_layers`,
`num_attention_heads`, `max_position_embeddings`) are aliases of them, as in transformers.
"""

from ..config_utils import FieldChecks, XfmrPretrainedConfig
from .presets import GPT_PRESETS

# The same names as `config_utils.ACTIVATIONS`, GPT-2's own first.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu", "swish")


class XfmrGPTConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr GPT model.

    Args:
        vocab_size: number of token ids.
        n_positions: number of learned absolute positions (the longest prompt + generation).
        n_embd: width C of every layer; must be divisible by `n_head`.
        n_layer: number of decoder layers.
        n_head: attention heads H per layer (head size D = C / H).
        n_inner: width of the feed-forward block; None means 4 * n_embd.
        activation_function: feed-forward activation, one of `ACTIVATIONS` ("gelu_new" = tanh GELU).
        resid_pdrop: dropout on each sub-layer output (attention and MLP) before the residual sum.
        embd_pdrop: dropout on the summed token + position embeddings.
        attn_pdrop: dropout on attention probabilities.
        layer_norm_epsilon: epsilon of every LayerNorm.
        initializer_range: standard deviation of the normal initialiser (the output projections of
            each block use initializer_range / sqrt(2 * n_layer), GPT-2's residual scaling).
        scale_attn_weights: divide attention scores by sqrt(D) (GPT-2: True).
        scale_attn_by_inverse_layer_idx: also divide them by layer index + 1 (Mistral's GPT-2 runs).
        reorder_and_upcast_attn: compute attention in float32 even under mixed precision.
        use_cache: return a key/value cache from forward passes in eval mode (generation uses one).
        bos_token_id / eos_token_id / pad_token_id: special token ids (None = absent). GPT-2 has no pad
            token; sequence classification then reads the last token of each row (or the last one the
            attention mask marks as real).
        tie_word_embeddings: share the input embedding matrix with `lm_head`.
        classifier_dropout: dropout before the token-classification head; None = 0.1 (transformers' default).
        chunked_lm_loss: in training mode with labels, compute the causal-LM loss chunk by chunk from
            the hidden states without forming the (B, T, V) logits (`logits` is then None). The loss and
            gradients are the same; False returns full logits in training too.
        unpad_inputs: run right-padded batches on their real tokens only (every head, training and
            inference without a cache passed in). Outputs at real positions are unchanged; hidden states at
            padding positions are zeros (LM logits there are zeros, the token classifier's its bias), and
            question answering gives padding positions the lowest start/end logits (its loss then covers
            real tokens only). Losses equal the reference's when padding carries label -100. False runs
            the padded layout, the reference's exact outputs everywhere (QA loss included).
    """

    model_type = "xfmr-gpt"
    presets = GPT_PRESETS
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"),
        optional_positive_ints=("n_inner",),
        head_splits=(("n_embd", "n_head"),),
        choices={"activation_function": ACTIVATIONS},
        probabilities=("resid_pdrop", "embd_pdrop", "attn_pdrop"),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "layer_norm_epsilon"),
    )

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    use_cache: bool = True
    bos_token_id: int | None = 50256
    eos_token_id: int | None = 50256
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True
    classifier_dropout: float | None = None
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    @property
    def intermediate_size(self) -> int:
        """Width of the feed-forward block (`n_inner`, default 4 * n_embd)."""
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd
