"""The parts the BERT-family encoders share (BERT, RoBERTa, ALBERT, DistilBERT; ModernBERT's attention):
one definition each, so the copies cannot drift apart.

- `EncoderSelfAttention`: bidirectional multi-head self-attention on the padded (B, T, C) or unpadded
  (N, C) layout, its kernel picked by `layers.attention.resolve_kernel` from the config. Each
  architecture subclasses it under its own name, passing its config's field names.
- `PostNormEncoderLayer`: x = LN(x + dropout(Attn(x))); x = LN(x + MLP(x)), the BERT-family block.
- `TanhPooler`: tanh(W h_[CLS] + b), the sentence representation of NSP / SOP and sequence heads.
- `MaskedLMPredictionHead`: dense -> activation -> LayerNorm -> decoder onto the vocabulary.
- `EncoderStack.run_encoder`: the body of an encoder's forward between its input checks and its output
  class: the padding decision, the embeddings, the layers (with the hidden states and attention weights
  collected on request) and the padded layout restored. `PooledEncoderStack.forward`: the whole forward
  of an encoder with token types and an optional [CLS] pooler (BERT, RoBERTa, ALBERT).

Parameter names are the ones every hf_xfmr model uses (`q_proj`, `k_proj`, `v_proj`, `o_proj`; `dense`,
`norm`, `decoder`), so state-dict keys and the converters' tables are the same as before the sharing.

Shapes: B batch, T sequence length, C hidden size, E width of the MLM head (C, or ALBERT's embedding
size), H heads, D head size (C / H), V vocabulary size, N number of real (unpadded) tokens.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..layers.attention import FUSED_DROPOUT_MIN_SCORES, resolve_kernel, self_attention
from ..layers.dropout import Dropout
from ..layers.mlp import MLP, get_activation
from ..layers.masks import positions_in_sequences, ready_mask
from ..layers.padding import encoder_padding
from .input_checks import check_encoder_inputs
from .packing import check_packed_positions, packed_sequence_starts
from .pretrained import collect


class EncoderSelfAttention(nn.Module):
    """Multi-head self-attention; the kernel (eager, sdpa, ...) is picked by `config._attn_implementation`.

    `config` is kept for its `_attn_implementation` (read at every call: `set_attn_implementation` changes
    it); the sizes are passed explicitly because the architectures name their config fields differently.
    """

    is_causal = False  # read by transformers' kernels: never treat a missing mask as causal

    def __init__(self, config, hidden_size: int, num_heads: int, dropout: float, bias: bool = True):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout_p = dropout
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=bias)

    def kernel(self, output_attentions: bool = False):
        """The padded attention kernel for this call (eager when the weights are asked for; in CPU training with
        attention dropout, the fused softmax-dropout-product kernel: 1.47x faster at 8 x 4 heads x 512)."""
        return resolve_kernel(self.config._attn_implementation, output_attentions,
                              fused_cpu_dropout_from=FUSED_DROPOUT_MIN_SCORES)

    def queries_keys_values(self, hidden_states):
        """(..., C) -> q, k, v (..., H, D): (B, T, H, D) padded or (N, H, D) unpadded."""
        heads = (*hidden_states.shape[:-1], self.num_heads, self.head_dim)
        return tuple(proj(hidden_states).view(heads) for proj in (self.q_proj, self.k_proj, self.v_proj))

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, varlen=None):
        """Padded (B, T, C) with a mask, or unpadded (N, C) with `varlen` (a VarlenBatch).
        Returns (out (..., C), weights (B, H, T, T) or None)."""
        tokens = hidden_states.shape[:-1]  # (B, T) or (N,)
        q, k, v = self.queries_keys_values(hidden_states)  # (..., H, D)
        out, weights = self_attention(self, self.kernel(output_attentions), q, k, v, attention_mask, varlen,
                                      scaling=self.scaling, dropout=self.dropout_p if self.training else 0.0)
        return self.o_proj(out.reshape(*tokens, -1)), weights  # (..., H, D) -> (..., C)


class PostNormEncoderLayer(GradientCheckpointingLayer):
    """Post-LN block: x = LN(x + dropout(Attn(x))); x = LN(x + MLP(x)), MLP dropout inside `MLP`.

    `attn` is the layer's self-attention module (an `EncoderSelfAttention`); `attn_dropout` None leaves the
    attention output undropped before its residual add (DistilBERT). One instance may run many times
    (ALBERT's shared layers)."""

    def __init__(self, attn: nn.Module, hidden_size: int, intermediate_size: int, activation: str, eps: float,
                 mlp_dropout: float, attn_dropout: float | None = None):
        super().__init__()
        self.attn = attn
        self.attn_dropout = None if attn_dropout is None else Dropout(attn_dropout)
        self.attn_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = MLP(hidden_size, intermediate_size, activation, dropout=mlp_dropout)
        self.mlp_norm = nn.LayerNorm(hidden_size, eps=eps)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, varlen=None):
        """(B, T, C) padded with a mask, or (N, C) unpadded with `varlen` -> (same shape, weights or None)."""
        attn_out, weights = self.attn(hidden_states, attention_mask, output_attentions, varlen)
        if self.attn_dropout is not None:
            attn_out = self.attn_dropout(attn_out)
        hidden_states = self.attn_norm(hidden_states + attn_out)
        hidden_states = self.mlp_norm(hidden_states + self.mlp(hidden_states))
        return hidden_states, weights


class TanhPooler(nn.Module):
    """tanh(W h_[CLS] + b): (B, T, C) -> (B, C), the sentence representation used by sequence-level heads."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states):
        return torch.tanh(self.dense(hidden_states[:, 0]))  # (B, C)


class MaskedLMPredictionHead(nn.Module):
    """MLM head: dense C -> E, activation, LayerNorm, then the decoder E -> V (tied to the input embeddings)."""

    def __init__(self, hidden_size: int, width: int, vocab_size: int, activation: str, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, width)
        self.act = get_activation(activation)
        self.norm = nn.LayerNorm(width, eps=eps)
        self.decoder = nn.Linear(width, vocab_size)

    def forward(self, hidden_states):
        return self.decoder(self.norm(self.act(self.dense(hidden_states))))  # (..., C) -> (..., V)


class EncoderStack:
    """Mixin of a BERT-family encoder model: `run_encoder` is its forward between input checks and output.

    The model has `self.embeddings` (called with the inputs as keywords; `default_position_ids(input_ids,
    seq_len, device)` numbers a row) and `self.config.unpad_inputs`. Both layouts call the same modules in
    the same order, so the module sequence never depends on the batch (whether it has padding): under
    ZeRO-3 every process must run the same sequence, or they hang.
    """

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def run_encoder(self, layers, inputs: dict, attention_mask, shape: tuple, output_attentions: bool,
                    output_hidden_states: bool, packed: dict | None = None):
        """Embed `inputs` (the embeddings' keyword arguments, `position_ids` among them; `shape` their (B, T)) and
        run `layers`.

        One decision per forward (`layers.padding.encoder_padding`): the real tokens only, or the padded
        layout with a mask, or without one. A 4-D `attention_mask` is used as given, on the padded layout.
        `packed`: the forward's packed-sequence keywords (`models.packing`); packed sequences attend to
        themselves only and, without `position_ids`, are numbered from their own start. Returns (last hidden
        state (B, T, C), all hidden states or None, all attention weights or None); hidden states are zeros at
        padding positions when unpadded.
        """
        batch, seq_len = shape
        starts = packed_sequence_starts(self, batch, seq_len, attention_mask, inputs["position_ids"], packed=packed)
        check_packed_positions(self, inputs["position_ids"], starts, self.embeddings.first_position)
        if attention_mask is not None and attention_mask.dim() == 4:
            varlen, mask = None, ready_mask(attention_mask)
        else:
            varlen, mask = encoder_padding(attention_mask, unpad=self.config.unpad_inputs and not output_attentions,
                                           starts=starts)
        if starts is not None and inputs["position_ids"] is None:  # each sequence numbered from its start
            keep = None if attention_mask is None else attention_mask.bool()
            inputs["position_ids"] = positions_in_sequences(starts, keep) + self.embeddings.first_position
        if varlen is not None:  # the embeddings take the real tokens as one (1, N) row
            if inputs["position_ids"] is None:  # numbered in the padded layout (RoBERTa's depend on the padding)
                inputs["position_ids"] = self.embeddings.default_position_ids(
                    inputs.get("input_ids"), seq_len, varlen.cu_seqlens.device)
            inputs = dict(zip(inputs, varlen.unpad_inputs(*inputs.values())))
        hidden_states = self.embeddings(**inputs)  # (B, T, C)
        if varlen is not None:
            hidden_states = hidden_states.squeeze(0)  # (N, C)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in layers:
            hidden_states, weights = layer(hidden_states, mask, output_attentions, varlen)
            all_hidden_states = collect(all_hidden_states, hidden_states)
            all_attentions = collect(all_attentions, weights)
        if varlen is not None:  # back to (B, T, C), zeros at padding
            hidden_states, all_hidden_states = varlen.pad_outputs(hidden_states, all_hidden_states)
        return hidden_states, all_hidden_states, all_attentions


class PooledEncoderStack(EncoderStack):
    """Mixin: the forward of an encoder with token type embeddings and an optional [CLS] pooler (`self.pooler`,
    None without one), which returns a `BaseModelOutputWithPooling`. The model states `encoder_layers()`
    (its layers in the order they run) and `position_limits()` (`check_encoder_inputs`' position arguments)."""

    def encoder_layers(self):
        return self.layers

    def position_limits(self) -> dict:
        return {"max_positions": self.config.max_position_embeddings}

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **packed,
    ):
        """input_ids / token_type_ids / position_ids / attention_mask (B, T) (or a ready-made (B, 1, T, T) mask),
        or inputs_embeds (B, T, width of the word embeddings). `packed`: the boundaries of packed sequences
        (`models.packing`). `hidden_states` holds the embeddings' output and every layer's."""
        shape = check_encoder_inputs(
            input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids,
            vocab_size=self.config.vocab_size, type_vocab_size=self.config.type_vocab_size, **self.position_limits(),
        )
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)
        inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids, "position_ids": position_ids,
                  "inputs_embeds": inputs_embeds}
        hidden_states, all_hidden_states, all_attentions = self.run_encoder(
            self.encoder_layers(), inputs, attention_mask, shape, output_attentions, output_hidden_states, packed)
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        output = BaseModelOutputWithPooling(
            last_hidden_state=hidden_states, pooler_output=pooled,
            hidden_states=all_hidden_states, attentions=all_attentions,
        )
        return output if return_dict else output.to_tuple()


def default_position_ids(input_ids, seq_len: int, device) -> torch.Tensor:
    """(1, T) positions 0..T-1: what an absolute-position encoder numbers a row with by default."""
    return torch.arange(seq_len, device=device).unsqueeze(0)
