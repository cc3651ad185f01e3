"""Configuration of XLNet (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for
Language Understanding", https://arxiv.org/abs/1906.08237).

Field names follow transformers' `XLNetConfig` (`d_model`, `n_layer`, `n_head`, `d_inner`, `mem_len`,
`reuse_len`, `bi_data`, `clamp_len`, `same_length`, `attn_type`, the `summary_*` fields), so checkpoints
convert field by field; `hidden_size`, `num_attention_heads` and `num_hidden_layers` are aliases.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig, check_non_negative_int, check_single_id
from .presets import XLNET_PRESETS

SUMMARY_TYPES = ("last", "first", "mean")
SUMMARY_ACTIVATIONS = (None, "tanh", "linear")


class XfmrXLNetConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr XLNet model.

    Args:
        vocab_size: number of token ids.
        d_model: width C of every layer; must be divisible by `n_head`.
        n_layer: number of layers.
        n_head: attention heads H per layer.
        d_inner: width of the feed-forward block.
        d_head: head size D; None derives d_model / n_head (the only value XLNet supports).
        ff_activation: feed-forward activation, one of `ACTIVATIONS` ("gelu" = exact erf GELU).
        untie_r: each layer has its own r_w_bias / r_r_bias / r_s_bias (True in every published checkpoint;
            tied biases are not supported).
        attn_type: "bi" (XLNet, bidirectional over the permutation mask) or "uni" (Transformer-XL, causal).
        initializer_range: standard deviation of the normal initialiser (weights, biases r_*, mask_emb).
        layer_norm_eps: epsilon of every LayerNorm.
        dropout: dropout on embeddings, relative positions, attention probabilities, sub-layer outputs.
        mem_len: how many hidden states per layer are kept as `mems` for the next segment; None or 0 keeps
            all of them (transformers' behaviour).
        reuse_len: only the first `reuse_len` positions of a segment are cached as memory (XLNet
            pretraining: half of the segment); None caches the whole segment. The permutation mask must
            keep those positions from seeing the rest (the PLM collator's `reuse_len` does).
        use_mems_eval / use_mems_train: return `mems` from forward passes in eval / training mode.
        bi_data: the second half of every batch is read backwards (relative distances negated); needs an
            even batch size. Pretraining only.
        clamp_len: relative distances beyond +-clamp_len are clamped; -1 (or 0) = no clamping.
        same_length: with attn_type "uni", every query sees the same number of keys.
        summary_type: which vector sequence classification / multiple choice read: "last" (XLNet: inputs
            end with <sep> <cls>), "first" or "mean" (over all positions, as the reference).
        summary_use_proj: a d_model x d_model projection (then the activation) before the classifier.
        summary_activation: "tanh" (XLNet) or None/"linear" for none.
        summary_last_dropout: dropout after the summary projection.
        start_n_top / end_n_top: kept for checkpoint compatibility (beam-search QA heads; unused here).
        pad_token_id / bos_token_id / eos_token_id: special token ids (None = absent).
        tie_word_embeddings: share the input embedding matrix with `lm_head`.
    """

    model_type = "xfmr-xlnet"
    presets = XLNET_PRESETS
    keys_to_ignore_at_inference = ["mems"]
    attribute_map = {
        "n_token": "vocab_size",
        "hidden_size": "d_model",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "d_model", "n_layer", "n_head", "d_inner"),
        head_splits=(("d_model", "n_head"),),
        choices={"ff_activation": ACTIVATIONS, "attn_type": ("bi", "uni"), "summary_type": SUMMARY_TYPES,
                 "summary_activation": SUMMARY_ACTIVATIONS},
        probabilities=("dropout", "summary_last_dropout"),
        positive_floats=("initializer_range", "layer_norm_eps"),
    )

    vocab_size: int = 32000
    d_model: int = 1024
    n_layer: int = 24
    n_head: int = 16
    d_inner: int = 4096
    d_head: int | None = None
    ff_activation: str = "gelu"
    untie_r: bool = True
    attn_type: str = "bi"
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    mem_len: int | None = 512
    reuse_len: int | None = None
    use_mems_eval: bool = True
    use_mems_train: bool = False
    bi_data: bool = False
    clamp_len: int = -1
    same_length: bool = False
    summary_type: str = "last"
    summary_use_proj: bool = True
    summary_activation: str | None = "tanh"
    summary_last_dropout: float = 0.1
    start_n_top: int = 5
    end_n_top: int = 5
    pad_token_id: int | None = 5
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = True

    def derive_defaults(self):
        """An empty `summary_activation` (some saved configs) means none."""
        if self.summary_activation == "":
            self.summary_activation = None

    def check_own_fields(self):
        """d_head follows from d_model / n_head; untied relative biases only; memory and clamping lengths."""
        if self.d_head is None:
            self.d_head = self.d_model // self.n_head
        if self.d_head != self.d_model // self.n_head:
            raise ValueError(f"`d_head`={self.d_head} must equal d_model / n_head = {self.d_model // self.n_head} "
                             f"(XLNet's projections are d_model x n_head x d_head); leave d_head=None to derive it.")
        if self.untie_r is not True:
            raise ValueError("`untie_r`=False (one set of r_w_bias/r_r_bias/r_s_bias shared by all layers) is not "
                             "supported; every published XLNet uses untie_r=True. Set untie_r=True.")
        for name in ("mem_len", "reuse_len"):
            if getattr(self, name) is not None:
                check_non_negative_int(name, getattr(self, name))
        if not isinstance(self.clamp_len, int) or isinstance(self.clamp_len, bool) or self.clamp_len < -1:
            raise ValueError(f"`clamp_len` must be -1 (no clamping) or a non-negative integer, got {self.clamp_len!r}.")
        check_single_id("eos_token_id", self.eos_token_id, "XLNet: 2")
