"""Configuration of the Llama family: Llama (Touvron et al., 2023, "LLaMA"; Llama 2 and 3), Mistral (Jiang et
al., 2023) and Qwen2 (Yang et al., 2024), one pre-RMSNorm decoder with RoPE, grouped-query attention and SwiGLU.

Field names follow transformers' `LlamaConfig` (5.x, `rope_parameters` included); Mistral adds `sliding_window`,
Qwen2 biases on q/k/v only (`qkv_bias`). `hf_model_type` records which of the three transformers types a model
is ("llama", "mistral", "qwen2"): `to_transformers` builds that class, and the fields only one of them has are
allowed with it only, so every config converts back.
"""

import copy

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_positive_int
from ...layers.rope import ROPE_TYPES
from .presets import LLAMA_PRESETS

HF_MODEL_TYPES = ("llama", "mistral", "qwen2")
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
# The keys each RoPE type needs besides `rope_type` and `rope_theta`.
ROPE_KEYS = {"default": (), "linear": ("factor",),
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


def fold_legacy_rope(rope_parameters, rope_scaling=None, rope_theta=None, max_position_embeddings=None) -> dict:
    """A complete `rope_parameters` dict (a copy) from the 5.x dict and/or the legacy `rope_scaling` dict (its
    `type` key renamed `rope_type`) and `rope_theta`: the type defaults to "default", the base to 10000, and
    llama3's original context length to `max_position_embeddings`."""
    rope = copy.deepcopy(rope_scaling or rope_parameters or DEFAULT_ROPE)
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope.pop("type")
    rope.setdefault("rope_type", "default")
    if rope_theta is not None:
        rope["rope_theta"] = rope_theta
    rope.setdefault("rope_theta", DEFAULT_ROPE["rope_theta"])
    if rope["rope_type"] == "llama3" and max_position_embeddings is not None:
        rope.setdefault("original_max_position_embeddings", max_position_embeddings)
    return rope


def check_rope_parameters(rope: dict) -> None:
    """A clear error for a `rope_parameters` dict whose type is unknown or whose keys are missing or not positive."""
    kind = rope["rope_type"]
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope_parameters rope_type={kind!r} is not supported; valid types: "
                         f"{', '.join(ROPE_TYPES)}.")
    missing = [key for key in ("rope_theta", *ROPE_KEYS[kind]) if rope.get(key) is None]
    if missing:
        raise ValueError(f"rope_parameters of type {kind!r} need {', '.join(missing)}; got {rope}.")
    for key in ("rope_theta", *ROPE_KEYS[kind]):
        if not isinstance(rope[key], (int, float)) or isinstance(rope[key], bool) or rope[key] <= 0:
            raise ValueError(f"rope_parameters[{key!r}] must be a positive number, got {rope[key]!r}.")
    if kind == "llama3" and rope["high_freq_factor"] <= rope["low_freq_factor"]:
        raise ValueError("rope_parameters of type 'llama3' need high_freq_factor > low_freq_factor, got "
                         f"{rope['high_freq_factor']} and {rope['low_freq_factor']}.")


class XfmrLlamaConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr Llama-family model.

    Args:
        vocab_size: number of token ids.
        hidden_size: width C of every layer.
        intermediate_size: width of the SwiGLU feed-forward block.
        num_hidden_layers: number of decoder layers.
        num_attention_heads: query heads H per layer.
        num_key_value_heads: key/value heads (grouped-query attention; H must be a multiple); None = H.
        head_dim: size D of each head; None = hidden_size / num_attention_heads.
        hidden_act: the gate's activation (SwiGLU: "silu").
        max_position_embeddings: the context length the model was trained for (RoPE has no position table:
            longer inputs run, as in transformers; llama3 scaling reads it as its default original length).
        initializer_range: standard deviation of the normal initialiser.
        rms_norm_eps: epsilon of every RMSNorm.
        use_cache: return a key/value cache from forward passes in eval mode (generation uses one).
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        tie_word_embeddings: share the input embedding matrix with `lm_head` (Llama 3.2 1B/3B, Qwen2 0.5B).
        rope_parameters: transformers' RoPE dict: `rope_type` ("default", "linear", "llama3"), `rope_theta`
            and the type's scaling keys. The legacy keywords `rope_theta` and `rope_scaling` are folded into it.
        attention_bias: biases on q/k/v/o projections (Llama's switch).
        qkv_bias: biases on q/k/v only (Qwen2); None = True for hf_model_type "qwen2", else False.
        attention_dropout: dropout on attention probabilities.
        mlp_bias: biases on the feed-forward projections (Llama's switch).
        sliding_window: each token attends to at most this many tokens, itself included (Mistral); None = all.
        hf_model_type: the transformers model type this model converts to and from: "llama", "mistral", "qwen2".
        classifier_dropout: dropout before the token-classification head; None = 0.1 (transformers' default).
        chunked_lm_loss: in training mode with labels, compute the causal-LM loss chunk by chunk from the hidden
            states without forming the (B, T, V) logits (`logits` is then None); False returns full logits.
        unpad_inputs: run padded batches on their real tokens only (every head, training and inference
            without a cache passed in). Outputs at real positions are unchanged; hidden states at padding
            positions are zeros. False runs the padded layout, the reference's exact outputs everywhere.
    """

    model_type = "xfmr-llama"
    presets = LLAMA_PRESETS
    keys_to_ignore_at_inference = ["past_key_values"]
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "max_position_embeddings"),
        optional_positive_ints=("num_key_value_heads", "head_dim", "sliding_window"),
        choices={"hidden_act": ACTIVATIONS, "hf_model_type": HF_MODEL_TYPES},
        probabilities=("attention_dropout",),
        optional_probabilities=("classifier_dropout",),
        positive_floats=("initializer_range", "rms_norm_eps"),
    )

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = False
    rope_parameters: dict | None = None
    attention_bias: bool = False
    qkv_bias: bool | None = None
    attention_dropout: float = 0.0
    mlp_bias: bool = False
    sliding_window: int | None = None
    hf_model_type: str = "llama"
    classifier_dropout: float | None = None
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True

    def __post_init__(self, **kwargs):
        # transformers' legacy keywords (configs written before 5.0): rope_scaling holds the type and its keys
        self.rope_parameters = fold_legacy_rope(self.rope_parameters, kwargs.pop("rope_scaling", None),
                                                kwargs.pop("rope_theta", None), self.max_position_embeddings)
        super().__post_init__(**kwargs)

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """A config of the named size; the legacy keywords `rope_theta` / `rope_scaling` update its RoPE."""
        if "rope_theta" in overrides or "rope_scaling" in overrides:
            preset_rope = cls.presets.get(name, {}).get("rope_parameters")
            overrides["rope_parameters"] = fold_legacy_rope(overrides.get("rope_parameters", preset_rope),
                                                            overrides.pop("rope_scaling", None),
                                                            overrides.pop("rope_theta", None))
        return super().from_preset(name, **overrides)

    def derive_defaults(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and isinstance(self.num_attention_heads, int) and self.num_attention_heads > 0:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.qkv_bias is None:
            self.qkv_bias = self.hf_model_type == "qwen2"

    def check_own_fields(self) -> None:
        check_positive_int("head_dim", self.head_dim)
        if self.head_dim % 2:
            raise ValueError(f"`head_dim`={self.head_dim} must be even: RoPE rotates pairs of dimensions.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"`num_attention_heads`={self.num_attention_heads} must be a multiple of `num_key_value_heads`="
                f"{self.num_key_value_heads} (each key/value head serves the same number of query heads).")
        check_rope_parameters(self.rope_parameters)
        self._check_variant()

    def _check_variant(self) -> None:
        """Fields only one transformers type has, allowed with that `hf_model_type` only (to_transformers)."""
        only = {"sliding_window": ("mistral", self.sliding_window is not None),
                "qkv_bias": ("qwen2", bool(self.qkv_bias)),
                "attention_bias": ("llama", self.attention_bias), "mlp_bias": ("llama", self.mlp_bias)}
        for name, (kind, used) in only.items():
            if used and self.hf_model_type != kind:
                raise ValueError(f"`{name}` is a {kind} feature, but hf_model_type={self.hf_model_type!r}: set "
                                 f"hf_model_type={kind!r} (the transformers type that has it) or drop `{name}`.")
        if self.hf_model_type == "qwen2" and self.head_dim != self.hidden_size // self.num_attention_heads:
            raise ValueError(f"Qwen2 models have head_dim = hidden_size / num_attention_heads "
                             f"({self.hidden_size // self.num_attention_heads}), got head_dim={self.head_dim}.")
        if self.hf_model_type == "qwen2" and not self.qkv_bias:
            raise ValueError("Qwen2 models have q/k/v biases: qkv_bias=False needs another hf_model_type "
                             "('llama' or 'mistral').")

    @property
    def rope_theta(self) -> float:
        """The RoPE base (`rope_parameters["rope_theta"]`)."""
        return self.rope_parameters["rope_theta"]

    @property
    def layer_types(self) -> list:
        """Every layer's cache keeps all its keys (read by transformers' `DynamicCache(config=...)`): the sliding
        window is applied by the attention mask, so the cache needs no trimming layer type."""
        return ["full_attention"] * self.num_hidden_layers
