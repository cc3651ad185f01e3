"""Configuration of ModernBERT (Warner et al., 2024, https://arxiv.org/abs/2412.13663).

Field names follow transformers' `ModernBertConfig`; the layer pattern and the two RoPE bases are kept
as the three scalars of the original checkpoints (`global_attn_every_n_layers`, `global_rope_theta`,
`local_rope_theta`) and translated to transformers' `layer_types` / `rope_parameters` by the converter.
"""

from ..config_utils import ACTIVATIONS, FieldChecks, XfmrPretrainedConfig
from .presets import MODERNBERT_PRESETS

CLASSIFIER_POOLINGS = ("cls", "mean")


class XfmrModernBertConfig(XfmrPretrainedConfig):
    r"""Configuration of an hf_xfmr ModernBERT model.

    Args:
        vocab_size: number of token ids.
        hidden_size: width C of every layer; must be divisible by `num_attention_heads`.
        intermediate_size: width of the gated (GeGLU) feed-forward block; its input projection is twice this.
        num_hidden_layers: number of encoder layers.
        num_attention_heads: attention heads H per layer (head size D = C / H, must be even for RoPE).
        hidden_activation: activation of the GLU's gate branch, one of `ACTIVATIONS` (GeGLU: "gelu").
        max_position_embeddings: longest sequence (and largest position id + 1) the model accepts.
        initializer_range: standard deviation of the truncated-normal initialiser.
        initializer_cutoff_factor: the initialiser truncates at +-cutoff * std.
        norm_eps: epsilon of every LayerNorm.
        norm_bias: whether the LayerNorms have a bias (ModernBERT: no).
        pad_token_id / bos_token_id / eos_token_id / cls_token_id / sep_token_id: special token ids.
        global_attn_every_n_layers: layer i attends globally when i % n == 0 and within a sliding window
            otherwise (ModernBERT: every third layer, starting with the first).
        local_attention: total width of the sliding window of local layers (128: each token sees 64 tokens
            on either side); must be even and at most `max_position_embeddings`.
        global_rope_theta / local_rope_theta: RoPE bases of global (160k) and local (10k) layers.
        attention_bias: biases on the qkv and output projections (ModernBERT: no).
        attention_dropout: dropout on attention probabilities and on the attention output.
        embedding_dropout: dropout after the embedding norm.
        mlp_bias: biases in the feed-forward block (ModernBERT: no).
        mlp_dropout: dropout inside the feed-forward block, before its output projection.
        decoder_bias: bias on the MLM vocabulary projection.
        classifier_pooling: "cls" (first token) or "mean" (over real tokens) for sequence-level heads.
        classifier_dropout: dropout before the task classifiers.
        classifier_bias: bias of the dense layer of the prediction head shared by MLM and the task heads.
        classifier_activation: activation of that prediction head.
        sparse_prediction: in training mode with labels, the MLM head projects only the labelled positions
            onto the vocabulary (`logits` is then (N_labelled, V)); the loss is the same number.
        chunked_lm_loss: in training mode with labels, compute the MLM loss of the labelled positions chunk
            by chunk from the hidden states (`layers.cross_entropy.linear_cross_entropy`) without forming
            their (N_labelled, V) logits (`logits` is then None). Same loss and gradients, much less memory.
            On by default (the configuration the benchmarks measure); False returns logits in training too.
        unpad_inputs: run padded batches on their real tokens only (attention per document). Outputs at
            real positions are unchanged and outputs at padding positions are zeros either way; False runs
            the padded layout with dense masks, as the reference does.
        tie_word_embeddings: share the input embedding matrix with the MLM decoder.
    """

    model_type = "xfmr-modernbert"
    presets = MODERNBERT_PRESETS
    field_checks = FieldChecks(
        positive_ints=("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "max_position_embeddings"),
        head_splits=(("hidden_size", "num_attention_heads"),),
        choices={"hidden_activation": ACTIVATIONS, "classifier_activation": ACTIVATIONS,
                 "classifier_pooling": CLASSIFIER_POOLINGS},
        probabilities=("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"),
        positive_floats=("initializer_range", "initializer_cutoff_factor", "norm_eps", "global_rope_theta",
                         "local_rope_theta"),
        token_ids=("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"),
    )

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int | None = 50283
    eos_token_id: int | None = 50282
    bos_token_id: int | None = 50281
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    attention_bias: bool = False
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    sparse_prediction: bool = False
    chunked_lm_loss: bool = True
    unpad_inputs: bool = True
    tie_word_embeddings: bool = True

    def check_own_fields(self):
        """RoPE needs an even head size; the layer pattern and the sliding window need sensible sizes."""
        if (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(
                f"The head size hidden_size / num_attention_heads = {self.hidden_size // self.num_attention_heads} "
                f"must be even: RoPE rotates pairs of dimensions. Change hidden_size or num_attention_heads."
            )
        n = self.global_attn_every_n_layers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(
                f"`global_attn_every_n_layers` must be an integer >= 1 (1: every layer global, 3: ModernBERT's "
                f"pattern), got {n!r}."
            )
        w = self.local_attention
        if not isinstance(w, int) or isinstance(w, bool) or w < 2 or w % 2:
            raise ValueError(
                f"`local_attention` is the total width of the sliding window (a token sees local_attention // 2 "
                f"tokens on each side), so it must be an even integer >= 2, got {w!r}."
            )
        if w > self.max_position_embeddings:
            raise ValueError(
                f"`local_attention`={w} is larger than `max_position_embeddings`={self.max_position_embeddings}: "
                f"the window would never be local. Use a window of at most max_position_embeddings."
            )

    def is_global_layer(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx` attends over the whole sequence (else within the sliding window)."""
        return layer_idx % self.global_attn_every_n_layers == 0
