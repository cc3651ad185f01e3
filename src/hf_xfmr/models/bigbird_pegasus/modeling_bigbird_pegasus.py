"""BigBird-Pegasus: Pegasus's pre-norm encoder-decoder whose encoder attends block-sparsely (BigBird).

Papers: Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences" (https://arxiv.org/abs/2007.14062),
sec. 2 (ITC block-sparse attention: a sliding window of 3 blocks, 2 global blocks, r random blocks per query
block) and app. E.5 (long-document summarization with a Pegasus decoder); Zhang et al., 2020, "PEGASUS"
(https://arxiv.org/abs/1912.08777): the pre-norm Transformer (LayerNorm before each sub-layer and once at the end of
each stack), learned absolute positions, sqrt(d_model)-scaled token embeddings shared by encoder, decoder and
output layer, and a (non-trained) `final_logits_bias`. Parity reference: transformers' `BigBirdPegasusModel`,
`BigBirdPegasusForConditionalGeneration`, `BigBirdPegasusForSequenceClassification`,
`BigBirdPegasusForQuestionAnswering` and `BigBirdPegasusForCausalLM`, through `convert_bigbird_pegasus.py`.

The encoder (`config.attention_type`):
- "block_sparse": inputs longer than (5 + 2r) blocks are padded inside to a multiple of `block_size` and run through
  `layers.block_sparse.block_sparse_attention` (batched block products, no L x L matrix), the outputs trimmed back.
  The random blocks are the reference's: in training the pattern numpy draws from the layer index as seed (the same
  every step), in eval mode all zeros (every random slot is block 0); `config.random_blocks="fresh"` draws new ones
  at every training forward. Shorter inputs run full attention (logged once).
- "original_full": full attention at every length.

Deliberate deviations from the reference (outputs at real positions unchanged):
- projections use the names every hf_xfmr model uses (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `up_proj`,
  `down_proj`); per layer `attn`, `cross_attn`, `mlp` and their norms `attn_norm`, `cross_attn_norm`, `mlp_norm`;
  each stack's final LayerNorm is `final_norm` (the reference's `layernorm_embedding`, which runs last).
- the choice of full attention for short inputs is made per forward; the reference switches the whole model to
  full attention for good after one short input (`set_attention_type`).
- block-sparse mode: the encoder's intermediate hidden states are returned trimmed to the input length (the
  reference returns them at the padded length); encoder attention weights are not available (use
  `attention_type="original_full"` to inspect them).
- unpadding (`config.unpad_inputs`, on by default): with full attention the encoder runs a right-padded batch on
  its real tokens only (as BART); block-sparse, the projections and feed-forward blocks run on the real tokens and
  attention on the block layout (the random-block pattern depends on the padded length, so the layout is the
  reference's). Encoder outputs are zeros at padding positions; the decoder keeps the padded layout, its outputs,
  logits and losses equal the reference's everywhere (its cross-attention hides the encoder's padding).
- in training mode with labels the LM loss is computed chunk by chunk without the (B, T, V) logits, the bias
  included (`config.chunked_lm_loss`; `logits` is then None).
- the classification / QA heads name their layers `classifier` / `qa_outputs` (reference: `classification_head`).
- `XfmrBigBirdPegasusForCausalLM` numbers the positions of a left-padded row from its first real token (the
  reference from the first pad); as in the reference its labels are NOT shifted.
- no fp16 clamping of the residual stream (train in bf16 or fp32).

Shapes: B batch, S encoder tokens, L S padded to a multiple of the block size, T decoder (or stack) tokens,
P cached decoder tokens, C d_model, H heads, D head size (C / H), F ffn dim, V vocabulary, N real encoder tokens.
"""

import copy
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput

from ...layers.block_sparse import (
    block_sparse_attention,
    layer_random_blocks,
    log_full_attention_once,
    uses_full_attention,
)
from ...layers.dropout import Dropout
from ...layers.init import normal_init_
from ...layers.masks import decoder_attention_mask, document_ids_from_starts, positions_in_sequences, ready_mask
from ...layers.mlp import get_activation
from ...layers.padding import VarlenBatch, encoder_padding
from ..bart.modeling_bart import XfmrBartAttention
from ..causal_lm import CausalLMHead
from ..generation import cached_length
from ..heads import QuestionAnsweringHead, SequenceClassificationHead
from ..input_checks import check_encoder_inputs
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel, collect
from ..seq2seq import (
    DecoderAloneModel,
    DecoderInputsFromInputs,
    EosClassifier,
    FinalLogitsBias,
    Seq2SeqLMHead,
    SharedEmbeddingsEncoderDecoder,
    cross_attention_mask,
)
from .configuration_bigbird_pegasus import XfmrBigBirdPegasusConfig


class BlockLayout(NamedTuple):
    """Where the encoder's tokens sit in the block-sparse layout of one forward.

    key_mask: (B, L) bool, True at real tokens (the padding to a multiple of the block size is False).
    seq_len: S, the input length (outputs are trimmed back to it).
    varlen: the real tokens when the layers run unpadded ((N, C) hidden states), else None ((B, L, C)).
    grid_index: unpadded, (N,) the real tokens' places in the flattened (B * L) block layout; else None.
    """

    key_mask: torch.Tensor
    seq_len: int
    varlen: VarlenBatch | None = None
    grid_index: torch.Tensor | None = None

    @classmethod
    def build(cls, key_mask, seq_len: int, varlen: VarlenBatch | None):
        grid_index = None
        if varlen is not None:  # a token's place in (B * S) -> its place in (B * L)
            padded_len = key_mask.shape[1]
            grid_index = varlen.indices // seq_len * padded_len + varlen.indices % seq_len  # (N,)
        return cls(key_mask, seq_len, varlen, grid_index)

    def to_blocks(self, x):
        """(N, ...) unpadded or (B, L, ...) tokens -> (B, L, ...), zeros where no real token is."""
        if self.varlen is None:
            return x
        batch, padded_len = self.key_mask.shape
        grid = x.new_zeros(batch * padded_len, *x.shape[1:]).index_copy(0, self.grid_index, x)  # (B * L, ...)
        return grid.view(batch, padded_len, *x.shape[1:])

    def from_blocks(self, x):
        """(B, L, ...) -> the layers' layout: (N, ...) unpadded, else (B, L, ...) as it is."""
        return x if self.varlen is None else x.flatten(0, 1).index_select(0, self.grid_index)

    def trimmed(self, x):
        """A hidden state of the layers' layout as the encoder returns it: (B, S, ...), zeros at padding
        when unpadded."""
        return self.varlen.pad(x) if self.varlen is not None else x[:, :self.seq_len]


class XfmrBigBirdPegasusAttention(XfmrBartAttention):
    """BART's attention with biases per `config.use_bias`: the encoder's self-attention (full, or block-sparse on
    a `BlockLayout`), the decoder's self-attention (a KV cache) or its cross-attention over the encoder output."""

    def __init__(self, config, num_heads: int, layer_idx: int, is_cross_attention: bool = False):
        super().__init__(config, num_heads, layer_idx, is_cross_attention, bias=config.use_bias)

    def forward(self, hidden_states, attention_mask=None, is_causal=False, key_value_states=None,
                past_key_values=None, output_attentions=False, varlen=None, blocks=None):
        """BART's (see `XfmrBartAttention.forward`); `blocks` (a BlockLayout and the (H, L/b - 2, r) random
        blocks): block-sparse encoder attention."""
        if blocks is not None:
            return self.block_sparse(hidden_states, *blocks), None
        return super().forward(hidden_states, attention_mask, is_causal, key_value_states, past_key_values,
                               output_attentions, varlen)

    def block_sparse(self, hidden_states, layout: BlockLayout, random_blocks):
        """(N, C) or (B, L, C) -> the same layout: BigBird attention on the (B, H, L, D) block layout (the reference
        has no attention dropout on this path)."""
        batch, padded_len = layout.key_mask.shape

        def heads(proj):  # the layers' layout -> (B, H, L, D)
            x = layout.to_blocks(proj(hidden_states))  # (B, L, C)
            return x.view(batch, padded_len, self.num_heads, self.head_dim).transpose(1, 2)

        # An unpadded batch skips the query blocks past each row's end (their outputs are dropped).
        out = block_sparse_attention(heads(self.q_proj), heads(self.k_proj), heads(self.v_proj), layout.key_mask,
                                     self.config.block_size, random_blocks, scaling=self.scaling,
                                     skip_padding_blocks=layout.varlen is not None)  # (B, L, H, D)
        return self.o_proj(layout.from_blocks(out.reshape(batch, padded_len, -1)))


class XfmrBigBirdPegasusMLP(nn.Module):
    """(..., C) -> (..., C): down_proj(dropout(act(up_proj(x)))) (Pegasus's fc1 / fc2; the activation dropout only
    in the decoder, as in the reference)."""

    def __init__(self, config, ffn_dim: int, activation_dropout: float):
        super().__init__()
        self.up_proj = nn.Linear(config.d_model, ffn_dim)
        self.act = get_activation(config.activation_function)
        self.dropout = Dropout(activation_dropout)
        self.down_proj = nn.Linear(ffn_dim, config.d_model)

    def forward(self, x):
        return self.down_proj(self.dropout(self.act(self.up_proj(x))))


class XfmrBigBirdPegasusEncoderLayer(GradientCheckpointingLayer):
    """Pre-norm block: x = x + Attn(norm(x)); x = x + MLP(norm(x)), with dropout on each sub-layer output."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attn = XfmrBigBirdPegasusAttention(config, config.encoder_attention_heads, layer_idx)
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.mlp = XfmrBigBirdPegasusMLP(config, config.encoder_ffn_dim, activation_dropout=0.0)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, varlen=None, blocks=None):
        attn_out, weights = self.attn(self.attn_norm(hidden_states), attention_mask,
                                      output_attentions=output_attentions, varlen=varlen, blocks=blocks)
        hidden_states = hidden_states + self.dropout(attn_out)
        hidden_states = hidden_states + self.dropout(self.mlp(self.mlp_norm(hidden_states)))
        return hidden_states, weights


class XfmrBigBirdPegasusDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm block: x = x + Attn(norm(x)); [x = x + CrossAttn(norm(x), encoder)]; x = x + MLP(norm(x))."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        heads = config.decoder_attention_heads
        self.attn = XfmrBigBirdPegasusAttention(config, heads, layer_idx)
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.cross_attn = XfmrBigBirdPegasusAttention(config, heads, layer_idx, is_cross_attention=True)
        self.cross_attn_norm = nn.LayerNorm(config.d_model)
        self.mlp = XfmrBigBirdPegasusMLP(config, config.decoder_ffn_dim, config.activation_dropout)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask=None, is_causal=False, encoder_hidden_states=None,
                encoder_attention_mask=None, past_key_values=None, output_attentions=False):
        attn_out, self_weights = self.attn(self.attn_norm(hidden_states), attention_mask, is_causal,
                                           past_key_values=past_key_values, output_attentions=output_attentions)
        hidden_states = hidden_states + self.dropout(attn_out)
        cross_weights = None
        if encoder_hidden_states is not None:
            cross_out, cross_weights = self.cross_attn(
                self.cross_attn_norm(hidden_states), encoder_attention_mask, key_value_states=encoder_hidden_states,
                past_key_values=past_key_values, output_attentions=output_attentions,
            )
            hidden_states = hidden_states + self.dropout(cross_out)
        hidden_states = hidden_states + self.dropout(self.mlp(self.mlp_norm(hidden_states)))
        return hidden_states, self_weights, cross_weights


def _last_hidden(all_hidden, hidden_states):
    """The collected hidden states with the last entry replaced by the stack's normed output, as the reference
    reports them: (embeddings, layer 1, ..., layer n-1, final_norm(layer n)); None kept."""
    return None if all_hidden is None else all_hidden[:-1] + (hidden_states,)


class XfmrBigBirdPegasusEncoder(nn.Module):
    """Learned positions added to the embedded tokens, dropout, the pre-norm layers, `final_norm`; full or
    block-sparse self-attention (see the module docstring)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList(XfmrBigBirdPegasusEncoderLayer(config, i) for i in range(config.encoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def block_sparse(self, seq_len: int) -> bool:
        """Whether an input of `seq_len` tokens runs block-sparse (logs once when a short one does not)."""
        config = self.config
        if config.attention_type != "block_sparse":
            return False
        if uses_full_attention(seq_len, config.block_size, config.num_random_blocks):
            log_full_attention_once(seq_len, config.block_size, config.num_random_blocks)
            return False
        return True

    def random_blocks(self, layer_idx: int, padded_len: int) -> torch.Tensor:
        """(H, L/b - 2, r) random key blocks of layer `layer_idx` (see `config.random_blocks`): the reference's
        pattern seeded with the layer index in training (the same every step) and zeros in eval; or fresh ones at
        every training forward and the seeded pattern in eval."""
        config = self.config
        return layer_random_blocks(padded_len, config.block_size, config.num_random_blocks,
                                   config.encoder_attention_heads, layer_idx, fresh=config.random_blocks == "fresh",
                                   training=self.training, max_seq_len=config.max_position_embeddings)

    def run_layers(self, hidden_states, output_hidden_states, output_attentions, attention_mask=None, varlen=None,
                   layout=None):
        """The layers with LayerDrop, then `final_norm`, on the layout they are given: padded with a mask, unpadded
        (`varlen`) or block-sparse (`layout`). Returns (hidden, collected hidden states or None, collected
        attentions or None), in that layout."""
        all_hidden = (hidden_states,) if output_hidden_states else None
        all_attn = () if output_attentions else None
        layerdrop = self.config.encoder_layerdrop
        for i, layer in enumerate(self.layers):
            if self.training and layerdrop > 0.0 and torch.rand([]) < layerdrop:
                continue  # LayerDrop (Fan et al., 2019): skip the whole layer
            blocks = None
            if layout is not None:
                random_blocks = self.random_blocks(i, layout.key_mask.shape[1])  # (H, L/b - 2, r)
                blocks = (layout, random_blocks.to(hidden_states.device))
            hidden_states, weights = layer(hidden_states, attention_mask, output_attentions=output_attentions,
                                           varlen=varlen, blocks=blocks)
            all_hidden, all_attn = collect(all_hidden, hidden_states), collect(all_attn, weights)
        hidden_states = self.final_norm(hidden_states)
        return hidden_states, _last_hidden(all_hidden, hidden_states), all_attn

    def forward(self, inputs_embeds, attention_mask=None, position_ids=None, output_attentions=False,
                output_hidden_states=False, starts=None):
        """inputs_embeds (B, S, C) scaled token embeddings; attention_mask (B, S) 0/1 or a ready-made (B, 1, S, S)
        mask; position_ids (1 or B, S), default arange(S); `starts` (B, S) bool, where packed sequences begin
        (full attention only: each is numbered from its start and attends to itself only)."""
        batch, seq_len, _ = inputs_embeds.shape
        if self.block_sparse(seq_len):
            return self.forward_block_sparse(inputs_embeds, attention_mask, position_ids, output_attentions,
                                             output_hidden_states, starts)
        two_d = attention_mask is not None and attention_mask.dim() == 2
        if position_ids is None and starts is not None:  # each packed sequence numbered from its start
            position_ids = positions_in_sequences(starts, attention_mask.bool() if two_d else None)  # (B, S)
        elif position_ids is None:
            position_ids = torch.arange(seq_len, device=inputs_embeds.device)[None]  # (1, S)
        # One decision per forward (one host read, none when compiling): a right-padded batch runs on its real
        # tokens only; otherwise the padded layout with a mask, or without one when nothing is padded.
        varlen = mask = None
        if starts is not None or (two_d and not torch.compiler.is_compiling()):
            unpad = self.config.unpad_inputs and not output_attentions
            varlen, mask = encoder_padding(attention_mask, unpad=unpad, starts=starts)
        elif attention_mask is not None:  # (B, 1, 1, S) padding, or a ready-made 4-D mask as given
            mask = ready_mask(attention_mask) if attention_mask.dim() == 4 else attention_mask.bool()[:, None, None, :]
        if varlen is not None:  # the embeddings take the real tokens as one (1, N) row, with their positions
            inputs_embeds, position_ids = varlen.unpad_inputs(inputs_embeds, position_ids)
        hidden_states = self.dropout(inputs_embeds + self.embed_positions(position_ids))  # (B, S, C) or (1, N, C)
        if varlen is not None:
            hidden_states = hidden_states.squeeze(0)  # (N, C)
        hidden_states, all_hidden, all_attn = self.run_layers(hidden_states, output_hidden_states, output_attentions,
                                                              attention_mask=mask, varlen=varlen)
        if varlen is not None:  # back to (B, S, C), zeros at padding
            hidden_states, all_hidden = varlen.pad_outputs(hidden_states, all_hidden)
        return hidden_states, all_hidden, all_attn

    def forward_block_sparse(self, inputs_embeds, attention_mask, position_ids, output_attentions,
                             output_hidden_states, starts):
        """The block-sparse path: the tokens padded to L, a multiple of the block size (unpadded: the real tokens
        only, scattered to the block layout around each attention), the outputs trimmed back to (B, S, C)."""
        config = self.config
        batch, seq_len, _ = inputs_embeds.shape
        if starts is not None or (attention_mask is not None and attention_mask.dim() == 4):
            raise ValueError(
                "Block-sparse attention takes one sequence per row with a (batch, seq_len) padding mask; got packed "
                "sequences or a 4-D attention mask. Pad one sequence per row, or build the model with "
                "attention_type='original_full'."
            )
        if output_attentions:
            raise ValueError(
                "output_attentions=True is not available with block-sparse attention (it never forms the "
                f"{seq_len} x {seq_len} weights); build the model with attention_type='original_full' to inspect them."
            )
        padded_len = -(-seq_len // config.block_size) * config.block_size  # L: S rounded up to whole blocks
        keep = torch.ones(batch, seq_len, dtype=torch.bool, device=inputs_embeds.device) if attention_mask is None \
            else attention_mask.bool()
        key_mask = F.pad(keep, (0, padded_len - seq_len), value=False)  # (B, L)
        varlen = None
        if attention_mask is not None and not torch.compiler.is_compiling():
            varlen, _ = encoder_padding(attention_mask, unpad=config.unpad_inputs)  # None: the padded layout
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=inputs_embeds.device)[None]  # (1, S)
        hidden_states = inputs_embeds + self.embed_positions(position_ids)  # (B, S, C)
        if varlen is not None:
            hidden_states = self.dropout(varlen.unpad(hidden_states))  # (N, C)
        else:
            hidden_states = F.pad(self.dropout(hidden_states), (0, 0, 0, padded_len - seq_len))  # (B, L, C)
        layout = BlockLayout.build(key_mask, seq_len, varlen)
        hidden_states, all_hidden, _ = self.run_layers(hidden_states, output_hidden_states, False, layout=layout)
        all_hidden = None if all_hidden is None else tuple(layout.trimmed(h) for h in all_hidden)
        return layout.trimmed(hidden_states), all_hidden, None  # (B, S, C)


class XfmrBigBirdPegasusDecoder(nn.Module):
    """The causal, cross-attending stack over embedded tokens: learned positions added, dropout, the pre-norm
    layers, `final_norm`."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.d_model)
        self.layers = nn.ModuleList(XfmrBigBirdPegasusDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def positions(self, seq_len: int, past_length: int, device):
        """(1, T) positions past_length + arange(T), or a ValueError past the position table."""
        limit = self.config.max_position_embeddings
        if past_length + seq_len > limit:
            cached = f" after {past_length} cached tokens" if past_length else ""
            raise ValueError(f"{seq_len} decoder inputs{cached} exceed the {limit} positions this model has "
                             f"(`max_position_embeddings`); truncate them or, when generating, lower `max_new_tokens`.")
        return torch.arange(past_length, past_length + seq_len, device=device)[None]  # (1, T)

    def forward(self, inputs_embeds, attention_mask=None, position_ids=None, encoder_hidden_states=None,
                encoder_attention_mask=None, past_key_values=None, output_attentions=False,
                output_hidden_states=False, starts=None):
        """inputs_embeds (B, T, C) scaled token embeddings; attention_mask (B, P + T) 0/1 over cached and new
        tokens or a ready-made (B, 1, T, P + T) mask; position_ids (1 or B, T), default P + arange(T);
        encoder_attention_mask (B, S) 0/1 or the encoder's 4-D mask; `starts` (B, T) bool, where packed sequences
        begin: each is numbered from its start and attends causally to itself only."""
        batch, seq_len, _ = inputs_embeds.shape
        device = inputs_embeds.device
        self_cache = (past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache)
                      else past_key_values)
        past_length = cached_length(self_cache)
        two_d = attention_mask is not None and attention_mask.dim() == 2
        documents = None  # packed sequences: ids for a block-diagonal causal mask
        if starts is not None:
            keep = attention_mask.bool() if two_d else None
            if position_ids is None:
                position_ids = positions_in_sequences(starts, keep)  # (B, T)
            documents = document_ids_from_starts(starts, keep)  # (B, T)
        elif position_ids is None:
            position_ids = self.positions(seq_len, past_length, device)
        if two_d and not torch.compiler.is_compiling() and bool(attention_mask.all()):
            attention_mask = None  # nothing hidden: SDPA's causal kernel
        hidden_states = self.dropout(inputs_embeds + self.embed_positions(position_ids))  # (B, T, C)
        mask, is_causal = decoder_attention_mask(attention_mask, seq_len, past_length + seq_len, documents,
                                                 device=device)
        cross_mask = cross_attention_mask(encoder_hidden_states, encoder_attention_mask)
        all_hidden = (hidden_states,) if output_hidden_states else None
        all_self, all_cross = ((), ()) if output_attentions else (None, None)
        layerdrop = self.config.decoder_layerdrop
        for layer in self.layers:
            if self.training and layerdrop > 0.0 and torch.rand([]) < layerdrop:
                continue  # LayerDrop (Fan et al., 2019): skip the whole layer
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, mask, is_causal, encoder_hidden_states, cross_mask, past_key_values=past_key_values,
                output_attentions=output_attentions,
            )
            all_hidden = collect(all_hidden, hidden_states)
            all_self, all_cross = collect(all_self, self_weights), collect(all_cross, cross_weights)
        hidden_states = self.final_norm(hidden_states)
        return hidden_states, _last_hidden(all_hidden, hidden_states), all_self, all_cross


class XfmrBigBirdPegasusPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrBigBirdPegasusConfig
    _no_split_modules = ["XfmrBigBirdPegasusEncoderLayer", "XfmrBigBirdPegasusDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]

    def _init_weights(self, module):
        """Linear and embedding weights ~ N(0, init_std), biases 0, the padding row 0, norms to identity."""
        normal_init_(module, self.config.init_std)


class XfmrBigBirdPegasusModel(SharedEmbeddingsEncoderDecoder, XfmrBigBirdPegasusPreTrainedModel):
    """Encoder and decoder sharing one embedding matrix (`BigBirdPegasusModel`):
    `seq2seq.SharedEmbeddingsEncoderDecoder` over the block-sparse encoder and Pegasus's decoder."""

    def build_encoder(self, config):
        return XfmrBigBirdPegasusEncoder(config)

    def build_decoder(self, config):
        return XfmrBigBirdPegasusDecoder(config)

    def run_encoder(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                    output_hidden_states=None, position_ids=None, **packed):
        """The encoder over `input_ids` (B, S) with a (B, S) 0/1 or ready-made (B, 1, S, S) mask. Packed sequences
        (`models.packing`) attend to themselves only and are numbered from their own start (or by `position_ids`);
        full attention only."""
        config = self.config
        output_attentions, output_hidden_states, _ = self.output_flags(output_attentions, output_hidden_states, None)
        limit = None if position_ids is not None or packed else config.max_position_embeddings
        embeds = self.embed(input_ids, inputs_embeds, limit)  # (B, S, C)
        check_encoder_inputs(None, embeds, attention_mask, None, position_ids, vocab_size=config.vocab_size,
                             type_vocab_size=None, max_positions=None,
                             position_table_size=config.max_position_embeddings)  # the mask, the positions
        starts = packed_sequence_starts(self, *embeds.shape[:2], attention_mask, position_ids, packed=packed)
        hidden, all_hidden, all_attn = self.encoder(embeds, attention_mask, position_ids,
                                                    output_attentions=output_attentions,
                                                    output_hidden_states=output_hidden_states, starts=starts)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=all_hidden, attentions=all_attn)


class XfmrBigBirdPegasusDecoderModel(DecoderAloneModel, XfmrBigBirdPegasusPreTrainedModel):
    """The decoder alone (`BigBirdPegasusForCausalLM`'s backbone): `seq2seq.DecoderAloneModel` over the Pegasus
    decoder stack."""

    def build_decoder(self, config):
        return XfmrBigBirdPegasusDecoder(config)


# -- heads (shared machinery in models/heads.py, models/seq2seq.py and models/causal_lm.py) ----------
class XfmrBigBirdPegasusForConditionalGeneration(FinalLogitsBias, Seq2SeqLMHead, XfmrBigBirdPegasusPreTrainedModel):
    """Sequence-to-sequence LM: decoder output -> `lm_head` (tied to `shared`) + `final_logits_bias`; `generate()`."""

    base_model_class = XfmrBigBirdPegasusModel


class XfmrBigBirdPegasusForSequenceClassification(DecoderInputsFromInputs, SequenceClassificationHead,
                                                  XfmrBigBirdPegasusPreTrainedModel):
    """Encoder-decoder over the input; the decoder state at each row's last <eos> -> `classifier`."""

    base_model_class = XfmrBigBirdPegasusModel
    pooling = "eos"

    def build_classifier(self, config, num_outputs):
        return EosClassifier(config.d_model, num_outputs, config.classifier_dropout)


class XfmrBigBirdPegasusForQuestionAnswering(DecoderInputsFromInputs, QuestionAnsweringHead,
                                             XfmrBigBirdPegasusPreTrainedModel):
    """Encoder-decoder over the input; `qa_outputs` scores each decoder position as answer start / end."""

    base_model_class = XfmrBigBirdPegasusModel
    mask_padding = False  # it reads the decoder, which is never unpadded: the reference's logits and loss


class XfmrBigBirdPegasusForCausalLM(CausalLMHead, XfmrBigBirdPegasusPreTrainedModel):
    """The decoder alone as a language model (`BigBirdPegasusForCausalLM`): `lm_head` over the decoder output;
    `generate()`. As in the reference, `lm_head` is its own matrix, not tied to the token embeddings (whatever
    `tie_word_embeddings` says), and labels are not shifted (`labels[t]` is the target of position t)."""

    base_model_class = XfmrBigBirdPegasusDecoderModel
    shift_labels = False

    def __init__(self, config):
        config = copy.deepcopy(config)  # a decoder-only view; the caller's config stays as it was
        config.is_encoder_decoder, config.is_decoder = False, True
        super().__init__(config)

    def generation_position_limit(self):
        return self.config.max_position_embeddings


__all__ = [
    "XfmrBigBirdPegasusPreTrainedModel",
    "XfmrBigBirdPegasusModel",
    "XfmrBigBirdPegasusDecoderModel",
    "XfmrBigBirdPegasusForConditionalGeneration",
    "XfmrBigBirdPegasusForSequenceClassification",
    "XfmrBigBirdPegasusForQuestionAnswering",
    "XfmrBigBirdPegasusForCausalLM",
]
