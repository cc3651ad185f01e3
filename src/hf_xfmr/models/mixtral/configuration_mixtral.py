"""Configuration of Mixtral (Jiang et al., 2024, "Mixtral of Experts", https://arxiv.org/abs/2401.04088): the Llama
decoder (pre-RMSNorm, RoPE, grouped-query attention, Mistral's optional sliding window) with a sparse
mixture-of-experts feed-forward block in every layer.

Field names and defaults follow transformers' `MixtralConfig` (5.x, `rope_parameters` included), so every
config converts both ways by name.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_positive_int
from ..llama.configuration_llama import check_rope_parameters, fold_legacy_rope
from .presets import MIXTRAL_PRESETS

DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}


class XfmrMixtralConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr Mixtral model.

    Args:
        vocab_size: number of token ids.
        hidden_size: width C of every layer.
        intermediate_size: width I of each expert's SwiGLU block.
        num_hidden_layers: number of decoder layers.
        num_attention_heads: query heads H per layer.
        num_key_value_heads: key/value heads (grouped-query attention; H must be a multiple); None = H.
        head_dim: size D of each head; None = hidden_size / num_attention_heads.
        hidden_act: the experts' gate activation (SwiGLU: "silu").
        max_position_embeddings: the context length the model was trained for (RoPE has no position table).
        initializer_range: standard deviation of the normal initialiser (experts and router included).
        rms_norm_eps: epsilon of every RMSNorm.
        use_cache: return a key/value cache from forward passes in eval mode (generation uses one).
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        tie_word_embeddings: share the input embedding matrix with `lm_head`.
        rope_parameters: transformers' RoPE dict: `rope_type` ("default", "linear", "llama3"), `rope_theta` and the
            type's scaling keys. The legacy keywords `rope_theta` and `rope_scaling` are folded into it.
        sliding_window: each token attends to at most this many tokens, itself included; None = all.
        attention_dropout: dropout on attention probabilities.
        num_local_experts: experts E in every layer.
        num_experts_per_tok: experts k each token is routed to (top-k of the router's softmax, renormalised).
        output_router_logits: return every layer's router logits and, for the causal LM, the load-balancing loss
            (added to the LM loss, times `router_aux_loss_coef`, when labels are given); transformers' switch.
        router_aux_loss_coef: weight of the load-balancing loss in the training loss.
        router_jitter_noise: in training, multiply the MoE input by uniform noise in [1 - x, 1 + x]; 0 = off.
        classifier_dropout: dropout before the token-classification head; None = 0.1 (transformers' default).
        chunked_lm_loss: in training mode with labels, compute the causal-LM loss chunk by chunk from the hidden
            states without forming the (B, T, V) logits (`logits` is then None); False returns full logits.
        unpad_inputs: run padded batches on their real tokens only (the router sees real tokens only). Outputs at
            real positions are unchanged; hidden states and router logits at padding positions are zeros.
            False runs the padded layout, the reference's exact outputs everywhere.
    """

    model_type = "xfmr-mixtral"
    presets = MIXTRAL_PRESETS
    keys_to_ignore_at_inference = ["past_key_values"]
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "max_position_embeddings", "num_local_experts", "num_experts_per_tok"),
        optional_positive_ints=("num_key_value_heads", "head_dim", "sliding_window"),
        choices={"hidden_act": ACTIVATIONS},
        probabilities=("attention_dropout", "router_jitter_noise"),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "rms_norm_eps"),
    )

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 8
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 131072
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-5
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = False
    rope_parameters: dict | None = None
    sliding_window: int | None = None
    attention_dropout: float = 0.0
    num_experts_per_tok: int = 2
    num_local_experts: int = 8
    output_router_logits: bool = False
    router_aux_loss_coef: float = 0.001
    router_jitter_noise: float = 0.0
    classifier_dropout: float | None = None
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    # Read by the Llama attention the Mixtral layers reuse: Mixtral's projections have no biases.
    attention_bias = False
    qkv_bias = False

    def __post_init__(self, **kwargs):
        rope = self.rope_parameters or (None if "rope_scaling" in kwargs else dict(DEFAULT_ROPE))
        self.rope_parameters = fold_legacy_rope(rope, kwargs.pop("rope_scaling", None), kwargs.pop("rope_theta", None),
                                                self.max_position_embeddings)
        super().__post_init__(**kwargs)

    def derive_defaults(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and isinstance(self.num_attention_heads, int) and self.num_attention_heads > 0:
            self.head_dim = self.hidden_size // self.num_attention_heads

    def check_own_fields(self) -> None:
        check_positive_int("head_dim", self.head_dim)
        if self.head_dim % 2:
            raise ValueError(f"`head_dim`={self.head_dim} must be even: RoPE rotates pairs of dimensions.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"`num_attention_heads`={self.num_attention_heads} must be a multiple of `num_key_value_heads`="
                f"{self.num_key_value_heads} (each key/value head serves the same number of query heads).")
        if self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(
                f"`num_experts_per_tok`={self.num_experts_per_tok} exceeds `num_local_experts`="
                f"{self.num_local_experts}: each token is routed to that many distinct experts; lower it.")
        if not isinstance(self.router_aux_loss_coef, (int, float)) or self.router_aux_loss_coef < 0:
            raise ValueError(f"`router_aux_loss_coef` must be a number >= 0, got {self.router_aux_loss_coef!r}.")
        check_rope_parameters(self.rope_parameters)

    @property
    def rope_theta(self) -> float:
        """The RoPE base (`rope_parameters["rope_theta"]`)."""
        return self.rope_parameters["rope_theta"]

    @property
    def layer_types(self) -> list:
        """Every layer's cache keeps all its keys (read by transformers' `DynamicCache(config=...)`): the sliding
        window is applied by the attention mask, as in the Llama family."""
        return ["full_attention"] * self.num_hidden_layers
