"""XLNet: permutation language modelling with two-stream relative attention and segment memory.

Paper: Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for Language Understanding",
https://arxiv.org/abs/1906.08237 (sec. 2.3 two-stream attention, 2.4-2.5 Transformer-XL memory,
relative positions and relative segments). Parity reference: transformers' `XLNetModel`,
`XLNetLMHeadModel` and heads, through `convert_xlnet.py`.

The two streams of one layer (per query row; K = mems + current segment)::

        mems (M, C) ─┐            content stream h (L rows)           query stream g (P target rows)
                     ├─ K, V ◄── h: all L positions ─────┐            g⁰ = mask_emb (no token content)
    h (L, C) ────────┘   │                                 │                 │
                         │     q_h = h W_q                 │                 q_g = g W_q
                         ├──► attend(q_h, K, V; mask_h) ◄──┘                 │
                         │     mask_h: perm mask, own position VISIBLE       │
                         └──────────────────────────────────► attend(q_g, K, V; mask_g)
                               h' = LN(h + W_o ·)                mask_g: perm mask, own position HIDDEN
                               h' = LN(h' + FF(h'))              g' = LN(g + W_o ·); g' = LN(g' + FF(g'))

    Both streams read keys/values from the content stream only (plus the memory); a target's query row
    therefore knows its position (through the relative terms) but never its token. The LM head reads g.
    Every score has three terms (Transformer-XL sec. 3.3 + XLNet sec. 2.5):
        (q + r_w_bias) k_j  +  shift((q + r_r_bias) R_{i-j})  +  (q + r_s_bias) s_ij

Deliberate deviations from the reference (outputs, losses and gradients are the same):
- The query stream is computed only for the P target rows (`target_mapping` one-hot rows, or
  `target_positions`), not for all L positions mapped through `target_mapping` twice; a general
  (non one-hot) `target_mapping` falls back to the reference's mapping.
- Layouts are batch-first; the public `mems` keep the reference's (M, B, C) layout so they interoperate.
- The relative projection R W_r is computed once per step and shared by the batch; dropout on the
  relative table draws one mask per step (the reference draws one per batch row: same expectation).
- The segment term takes two dot products per query and one select (the reference builds a one-hot
  (L, K, B, 2) tensor); masks are bool and built from compact inputs when given: `perm_ranks` (B, L)
  and `target_positions` (B, P) replace `perm_mask` (B, L, L) and `target_mapping` (B, P, L).
- `output_attentions` for the query stream has P rows (the reference: L rows, mostly unused).
- Projections are `nn.Linear` named like every hf_xfmr model (`q_proj`, `k_proj`, `v_proj`, `o_proj`,
  `r_proj`, `up_proj`, `down_proj`); the converter reshapes the reference's (C, H, D) parameters.
- In training mode with labels the LM loss is computed chunk by chunk without the (B, P, V) logits
  (`config.chunked_lm_loss`; `logits` is then None).
- Packed sequences (several in one row: `models.packing`) attend to themselves only; the reference takes no
  such keywords and lets them attend to each other. `position_ids` are accepted only to mark them (restarts);
  the positions themselves stay relative. A 4-D `attention_mask` is refused, as the reference cannot take one.

Shapes: B batch, L segment length, M memory length, K = M + L keys, P target rows, C d_model,
H heads, D head size, J relative-table rows, V vocabulary.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput

from ...layers.attention import resolve_kernel, sdpa_unchecked_forward
from ...layers.dropout import Dropout
from ...layers.init import normal_init_
from ...layers.masks import document_ids_from_starts
from ...layers.mlp import get_activation
from ...layers.relative_xl import (
    additive_mask,
    causal_hidden,
    permutation_hidden,
    relative_attention,
    relative_distances,
    segment_query_features,
    sinusoid_table,
)
from ..causal_lm import lm_logits_and_loss
from ..heads import (
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    TaskHead,
)
from ..input_checks import check_encoder_inputs, check_value_range
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel
from .configuration_xlnet import XfmrXLNetConfig


@dataclass
class XfmrXLNetModelOutput(ModelOutput):
    """last_hidden_state: (B, L, C) content stream, or (B, P, C) query stream when targets are given.
    mems: one (M, B, C) tensor per layer, the memory for the next segment."""

    last_hidden_state: torch.Tensor | None = None
    mems: tuple | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


@dataclass
class XfmrXLNetLMHeadModelOutput(ModelOutput):
    """logits: (B, P, V) (or (B, L, V) without targets); loss: mean cross-entropy over labels != -100."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mems: tuple | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


class XfmrXLNetEmbeddings(nn.Module):
    """Token embeddings (content stream) and the learned mask embedding that starts the query stream."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.mask_emb = nn.Parameter(torch.zeros(1, 1, config.d_model))


@dataclass
class XLNetQueryRows:
    """Which rows the query stream computes: `positions` (B, P) and `valid` (B, P, 0 on unused slots) for
    one-hot targets, or a general `mapping` (B, P, L); `count` is P, None without targets."""

    positions: torch.Tensor | None = None
    valid: torch.Tensor | None = None
    mapping: torch.Tensor | None = None
    count: int | None = None


@dataclass
class XLNetKeys:
    """What both streams of one layer attend over, computed once per layer by `XfmrXLNetRelativeAttention.keys`.

    k, v: (B, H, K, D) from the memory and the content stream; k_r: (G, H, J, D) the projected relative
    table; key_types: (B, 1, K, S) one-hot segment ids of the keys, or None; qlen: L, the segment length.
    """

    k: torch.Tensor
    v: torch.Tensor
    k_r: torch.Tensor
    key_types: torch.Tensor | None
    qlen: int


class XfmrXLNetRelativeAttention(nn.Module):
    """Relative multi-head attention shared by both streams (same projections, same keys/values).

    A layer calls `keys` once, then the module once per stream: the content stream (all L rows) and the
    query stream (P target rows, or all L rows mapped through a general `target_mapping`)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_heads, self.head_dim = config.n_head, config.d_head
        inner = config.n_head * config.d_head
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(config.d_model, inner, bias=False)
        self.k_proj = nn.Linear(config.d_model, inner, bias=False)
        self.v_proj = nn.Linear(config.d_model, inner, bias=False)
        self.r_proj = nn.Linear(config.d_model, inner, bias=False)  # relative-position keys
        self.o_proj = nn.Linear(inner, config.d_model, bias=False)
        self.r_w_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # content bias u
        self.r_r_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # position bias v
        self.r_s_bias = nn.Parameter(torch.zeros(config.n_head, config.d_head))  # segment bias
        self.seg_embed = nn.Parameter(torch.zeros(2, config.n_head, config.d_head))  # same / different segment

    def heads(self, x):
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(-3, -2)  # (..., T, C) -> (..., H, T, D)

    def keys(self, h, mem, pos_emb, key_types=None) -> XLNetKeys:
        """Keys and values of the memory (B, M, C) or None and the content stream h (B, L, C); the relative
        table pos_emb (G, J, C) projected."""
        cat = h if mem is None else torch.cat([mem, h], dim=1)  # (B, K, C)
        k, v = self.heads(self.k_proj(cat)), self.heads(self.v_proj(cat))  # (B, H, K, D) each
        return XLNetKeys(k=k, v=v, k_r=self.heads(self.r_proj(pos_emb)), key_types=key_types, qlen=h.shape[1])

    def forward(self, x, keys: XLNetKeys, mask=None, *, query_types=None, rows: XLNetQueryRows | None = None,
                output_attentions=False):
        """One stream: x (B, R, C) -> (o_proj output (B, R, C), weights (B, H, R or L, K) or None).

        mask: (B, R, K) additive, or None. query_types: (B, R) segment ids of the query rows (with
        `keys.key_types`). rows: the query stream's target rows; None for the content stream (the L segment
        rows in order). With a general `rows.mapping` (B, P, L) the P rows of x are spread over the L
        positions and gathered back (the reference's route); `rows.valid` zeroes unused target slots.
        """
        positions, mapping, valid = (None, None, None) if rows is None else (rows.positions, rows.mapping, rows.valid)
        q = self.heads(self.q_proj(x))  # (B, H, R, D)
        if mapping is not None:
            q = torch.einsum("bhpd,bpl->bhld", q, mapping)  # (B, H, L, D)
        out, weights = self.attend(q, keys, mask, query_types, positions, output_attentions)  # (B, R, C)
        if mapping is not None:
            out = torch.einsum("blc,bpl->bpc", out, mapping)  # (B, P, C)
        if valid is not None:  # unused target slots (zero rows of target_mapping) read nothing
            out = out * valid[:, :, None]
        return self.o_proj(out), weights

    def attend(self, q, keys: XLNetKeys, mask, query_types, positions, output_attentions):
        """q (B, H, R, D) against the layer's keys; returns ((B, R, C) before o_proj, weights)."""
        seg = None
        if keys.key_types is not None:  # key_types: (B, 1, K, S) one-hot segment ids of the keys
            def seg(q_):
                num_types = keys.key_types.shape[-1]
                features = segment_query_features(q_ + self.r_s_bias[:, None], self.seg_embed, query_types, num_types)
                return features, keys.key_types
        # The relative terms make a finite bias that may leave a query row without a key (the reference
        # then spreads it evenly), so sdpa runs unchecked; XLNet's eager form is `relative_attention`'s own.
        kernel = resolve_kernel(self.config._attn_implementation, output_attentions, finite_masks=True)
        out, weights = relative_attention(
            q, keys.k, keys.v, keys.k_r, self.r_w_bias, self.r_r_bias, mask, seg, positions, qlen=keys.qlen,
            scale=self.scaling, dropout_p=self.config.dropout if self.training else 0.0,
            kernel=kernel if kernel is sdpa_unchecked_forward else None, module=self,
            return_weights=output_attentions,
        )
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1), weights  # (B, R, C)


class XfmrXLNetFeedForward(nn.Module):
    """Post-LN feed-forward: LN(x + dropout(down_proj(dropout(act(up_proj(x))))))."""

    def __init__(self, config):
        super().__init__()
        self.up_proj = nn.Linear(config.d_model, config.d_inner)
        self.act = get_activation(config.ff_activation)
        self.down_proj = nn.Linear(config.d_inner, config.d_model)
        self.dropout = Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, x):
        return self.norm(x + self.dropout(self.down_proj(self.dropout(self.act(self.up_proj(x))))))


class XfmrXLNetLayer(GradientCheckpointingLayer):
    """Both streams through one layer (see the diagram at the top)."""

    def __init__(self, config):
        super().__init__()
        self.attn = XfmrXLNetRelativeAttention(config)
        self.attn_dropout = Dropout(config.dropout)
        self.attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.mlp = XfmrXLNetFeedForward(config)

    def forward(self, h, g, pos_emb, mem=None, mask_h=None, mask_g=None, rows: XLNetQueryRows | None = None,
                token_types=None, key_types=None, output_attentions=False):
        """h (B, L, C) content stream, g (B, P, C) query stream or None (then `rows` too), mem (B, M, C) or
        None; masks additive (B, L, K) and (B, P, K); token_types (B, L), key_types (B, 1, K, S) or None.
        Returns (new h, new g or None, content weights, query weights or None)."""
        keys = self.attn.keys(h, mem, pos_emb, key_types)
        out, w_h = self.attn(h, keys, mask_h, query_types=token_types, output_attentions=output_attentions)
        new_h = self.mlp(self.attn_norm(h + self.attn_dropout(out)))  # (B, L, C)
        if g is None:
            return new_h, None, w_h, None
        query_types = token_types  # a general target_mapping: the reference's route over all L rows
        if rows.mapping is None and token_types is not None:
            query_types = token_types.gather(1, rows.positions)  # (B, P)
        out, w_g = self.attn(g, keys, mask_g, query_types=query_types, rows=rows, output_attentions=output_attentions)
        new_g = self.mlp(self.attn_norm(g + self.attn_dropout(out)))  # (B, P, C)
        return new_h, new_g, w_h, w_g


class XfmrXLNetPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrXLNetConfig
    _no_split_modules = ["XfmrXLNetLayer"]
    _supports_flash_attn = False  # the relative-position term is a per-pair bias

    def _init_weights(self, module):
        std = self.config.initializer_range
        normal_init_(module, std)
        if isinstance(module, XfmrXLNetRelativeAttention):
            for param in (module.r_w_bias, module.r_r_bias, module.r_s_bias, module.seg_embed):
                init.normal_(param, mean=0.0, std=std)
        elif isinstance(module, XfmrXLNetEmbeddings):
            init.normal_(module.mask_emb, mean=0.0, std=std)


def _is_one_hot_mapping(target_mapping: torch.Tensor) -> bool:
    """Every row of `target_mapping` picks at most one position, and no position twice (data read: eager only).

    Compiled, the data cannot be read without a graph break: the general path (exact for any mapping, only
    slower) is taken, never the one-hot shortcut, which would silently be wrong for a general mapping."""
    if torch.compiler.is_compiling():
        return False
    binary = bool(((target_mapping == 0) | (target_mapping == 1)).all())
    return binary and bool((target_mapping.sum(-1) <= 1).all()) and bool((target_mapping.sum(1) <= 1).all())


class XfmrXLNetModel(XfmrXLNetPreTrainedModel):
    """The XLNet encoder: embeddings, `n_layer` two-stream layers, memory in and out."""

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = XfmrXLNetEmbeddings(config)
        self.dropout = Dropout(config.dropout)
        self.layers = nn.ModuleList(XfmrXLNetLayer(config) for _ in range(config.n_layer))
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    # -- inputs -------------------------------------------------------------------------------------
    def _check_inputs(self, batch, seq_len, mems, perm_mask, target_mapping, perm_ranks, target_positions,
                      attention_mask, input_mask):
        config = self.config
        if attention_mask is not None and input_mask is not None:
            raise ValueError("Pass only one of `attention_mask` (1 = real token) and `input_mask` (1 = padding, "
                             "its negation); they say the same thing.")
        if input_mask is not None and tuple(input_mask.shape) != (batch, seq_len):
            raise ValueError(f"`input_mask` has shape {tuple(input_mask.shape)}; it must be (batch, seq_len) = "
                             f"({batch}, {seq_len}).")
        if perm_mask is not None and perm_ranks is not None:
            raise ValueError("Pass `perm_mask` (B, L, L) or its compact form `perm_ranks` (B, L), not both.")
        if target_mapping is not None and target_positions is not None:
            raise ValueError("Pass `target_mapping` (B, P, L) or its compact form `target_positions` (B, P), not both.")
        if perm_mask is not None:
            if tuple(perm_mask.shape) != (batch, seq_len, seq_len):
                raise ValueError(
                    f"`perm_mask` has shape {tuple(perm_mask.shape)}; it must be (batch, seq_len, seq_len) = "
                    f"({batch}, {seq_len}, {seq_len}), with perm_mask[b, i, j] = 1 when i may not attend to j.")
            if perm_mask.is_complex():
                raise ValueError(f"`perm_mask` must be bool or real-valued (1 = may not attend), got {perm_mask.dtype}.")
        if target_mapping is not None:
            if target_mapping.dim() != 3 or tuple(target_mapping.shape[::2]) != (batch, seq_len):
                raise ValueError(
                    f"`target_mapping` has shape {tuple(target_mapping.shape)}; it must be (batch, num_predict, "
                    f"seq_len) = ({batch}, P, {seq_len}) with target_mapping[b, p, j] = 1 when the p-th "
                    f"prediction is at position j.")
            if not target_mapping.is_floating_point():
                raise ValueError(f"`target_mapping` must be a float tensor (one-hot rows), got {target_mapping.dtype}; "
                                 f"pass target_mapping.float() (or the positions as `target_positions`).")
        for name, tensor, shape in (("perm_ranks", perm_ranks, (batch, seq_len)),
                                    ("target_positions", target_positions, None)):
            if tensor is None:
                continue
            if tensor.dtype.is_floating_point or tensor.dtype == torch.bool:
                raise ValueError(f"`{name}` must hold integer indices, got dtype {tensor.dtype}.")
            if shape is not None and tuple(tensor.shape) != shape:
                raise ValueError(f"`{name}` has shape {tuple(tensor.shape)}; it must be (batch, seq_len) = {shape}.")
        if target_positions is not None and (target_positions.dim() != 2 or target_positions.shape[0] != batch):
            raise ValueError(f"`target_positions` has shape {tuple(target_positions.shape)}; it must be "
                             f"(batch, num_predict) with batch = {batch} (-1 marks an unused slot).")
        if target_positions is not None:  # (an asynchronous assert when compiled, see input_checks)
            check_value_range("target_positions", target_positions, -1, seq_len,
                              f"Targets are positions of the {seq_len} input tokens; -1 marks an unused slot.",
                              what="the positions")
        if mems is not None:
            if len(mems) != config.n_layer:
                raise ValueError(f"`mems` has {len(mems)} entries but the model has n_layer={config.n_layer}; pass "
                                 f"the `mems` returned by this model (one (mem_len, batch, d_model) tensor per layer).")
            lengths = {m.shape[0] for m in mems}
            for m in mems:
                if m.dim() != 3 or m.shape[1] != batch or m.shape[2] != config.d_model or len(lengths) != 1:
                    raise ValueError(
                        f"`mems` entries must all be (mem_len, batch, d_model) = (M, {batch}, {config.d_model}); got "
                        f"{tuple(m.shape)}. They come from another model or batch size: pass the `mems` this model "
                        f"returned for the previous segment of the same rows, or none.")
        if config.bi_data and batch % 2:
            raise ValueError(f"bi_data=True reads the second half of the batch backwards and needs an even batch "
                             f"size, got {batch}; use an even batch or bi_data=False.")

    def _relative_table(self, qlen, klen, device, dtype):
        """(G, J, C) sinusoids of the relative distances (G = 2 with bi_data: forward and backward halves)."""
        config = self.config
        clamp = config.clamp_len if config.clamp_len > 0 else None
        dist = relative_distances(qlen, klen, config.attn_type, clamp, device=device)  # (J,)
        if config.bi_data:
            back = -dist if clamp is None else (-dist).clamp(-clamp, clamp)
            table = torch.stack([sinusoid_table(dist, config.d_model), sinusoid_table(back, config.d_model)])
        else:
            table = sinusoid_table(dist, config.d_model)[None]
        return self.dropout(table.to(dtype))  # (G, J, C)

    def _hidden_masks(self, batch, qlen, mlen, device, pad, perm_mask, perm_ranks, g_positions):
        """Bool masks, True = may not attend: content (B, L, K) with each own position visible, and query
        (B, P, K) for the target rows (or (B, L, K) on the general path); None where nothing is masked.
        `pad`: (B, L) True at padding keys, or (B, L, L) True where query i may not see key j (packed sequences)."""
        config = self.config
        klen = mlen + qlen
        arange = torch.arange(qlen, device=device)

        def rows(query_pos):  # query_pos None (= all L rows) or (B, R)
            cur = None if pad is None else pad[:, None, :] if pad.dim() == 2 else pad  # (B, 1, L) or (B, L, L)
            if cur is not None and cur.shape[1] > 1 and query_pos is not None:
                cur = cur.gather(1, query_pos[:, :, None].expand(-1, -1, qlen))  # (B, R, L)
            if perm_mask is not None:
                p = perm_mask > 0 if perm_mask.dtype != torch.bool else perm_mask
                if query_pos is not None:
                    p = p.gather(1, query_pos[:, :, None].expand(-1, -1, qlen))  # (B, R, L)
                cur = p if cur is None else cur | p
            if perm_ranks is not None:
                q_ranks = perm_ranks if query_pos is None else perm_ranks.gather(1, query_pos)
                p = permutation_hidden(perm_ranks, q_ranks)  # (B, R, L)
                if config.reuse_len:  # the cached block never sees the rest of the segment (XLNet sec. 2.5)
                    qp = arange[None] if query_pos is None else query_pos
                    p = p | ((qp < config.reuse_len)[:, :, None] & (arange >= config.reuse_len))
                cur = p if cur is None else cur | p
            causal = None
            if config.attn_type == "uni":
                qp = arange if query_pos is None else query_pos
                causal = causal_hidden(qp, klen, mlen, config.same_length)  # (R, K) or (B, R, K)
            if cur is None and causal is None:
                return None
            n_rows = qlen if query_pos is None else query_pos.shape[1]
            if cur is None:
                full = causal.expand(batch, n_rows, klen) if causal.dim() == 2 else causal
            else:
                cur = cur.expand(batch, n_rows, qlen)
                full = cur if mlen == 0 else torch.cat([cur.new_zeros(batch, n_rows, mlen), cur], dim=2)
                if causal is not None:
                    full = full | causal
            return full

        content = rows(None)
        if content is not None:  # the content stream sees its own token (sec. 2.3)
            own = torch.zeros(qlen, klen, dtype=torch.bool, device=device)
            own[arange, arange + mlen] = True
            content = content & ~own
        return content, (rows(g_positions) if g_positions is not None else rows(None))

    def _cache(self, h, prev):
        """The memory for the next segment from this layer's input h (B, L, C): (M', B, C), detached."""
        config = self.config
        if config.reuse_len:
            h = h[:, :config.reuse_len]
        new = h if prev is None else torch.cat([prev.transpose(0, 1), h], dim=1)
        if config.mem_len:
            new = new[:, -config.mem_len:]
        return new.transpose(0, 1).detach()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mems: tuple | list | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        input_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_mems: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        perm_ranks: torch.Tensor | None = None,
        target_positions: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **packed,
    ):
        """Inputs as `XLNetModel`, plus the compact forms of the permutation inputs and packed sequences:

        perm_mask (B, L, L): 1/True = i may not attend to j.  perm_ranks (B, L): -1 for positions all may
        see, k >= 0 for the k-th target of the factorization order (see layers.relative_xl.permutation_hidden);
        with config.reuse_len, positions before reuse_len never see later ones.
        target_mapping (B, P, L): one-hot rows at the predicted positions. target_positions (B, P): those
        positions directly, -1 for an unused slot. mems: per layer (M, B, C), as returned last time.
        packed: the boundaries of packed sequences (`models.packing`), which then attend to themselves only;
        `position_ids` (B, T) only mark where they restart (XLNet's positions are relative).
        """
        config = self.config
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4:
            raise ValueError("XLNet takes a (batch, seq_len) `attention_mask` (1 = real token), not a 4-D one: its "
                             "attention is shaped by `perm_mask`. To keep packed sequences apart, pass their "
                             "boundaries (`cu_seq_lens_q` / `cu_seqlens`, or restarting `position_ids`).")
        batch, qlen = check_encoder_inputs(input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids,
                                           vocab_size=config.vocab_size, type_vocab_size=None, max_positions=None)
        self._check_inputs(batch, qlen, mems, perm_mask, target_mapping, perm_ranks, target_positions,
                           attention_mask, input_mask)
        pad = None if input_mask is None else input_mask > 0  # (B, L) True at padding
        if attention_mask is not None:
            pad = attention_mask == 0
        real = None if pad is None else ~pad  # (B, L) True at real tokens
        starts = packed_sequence_starts(self, batch, qlen, real, position_ids, packed=packed)
        if starts is not None and mems is not None:
            raise ValueError("Packed sequences cannot read `mems`: the memory continues one text per row. Pass "
                             "one of them.")
        use_mems = self._use_mems(use_mems, qlen)
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)

        h = self.embeddings.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, L, C)
        device, dtype = h.device, h.dtype
        mlen = mems[0].shape[0] if mems is not None else 0
        # masks: the query stream's rows, then who may not attend to whom in each stream
        rows = self._query_rows(target_positions, target_mapping, dtype)
        if starts is not None:  # True where a token may not see another sequence's
            documents = document_ids_from_starts(starts, real)  # (B, L)
            other = documents[:, :, None] != documents[:, None, :]  # (B, L, L)
            pad = other if pad is None else other | pad[:, None, :]
        hidden_h, hidden_g = self._hidden_masks(batch, qlen, mlen, device, pad, perm_mask, perm_ranks, rows.positions)
        mask_h, mask_g = additive_mask(hidden_h, dtype), additive_mask(hidden_g, dtype)  # (B, L, K), (B, P, K)
        key_types = self._key_types(token_type_ids, batch, mlen, dtype)  # (B, 1, K, S) or None
        # positions: the relative table, then the two streams' inputs (dropout in this order)
        pos_emb = self._relative_table(qlen, mlen + qlen, device, dtype)  # (G, J, C)
        h = self.dropout(h)
        g = None
        if rows.count is not None:
            g = self.dropout(self.embeddings.mask_emb.to(dtype).expand(batch, rows.count, -1))  # (B, P, C)
        layer_inputs = dict(mask_h=mask_h, mask_g=mask_g, rows=rows if g is not None else None,
                            token_types=token_type_ids, key_types=key_types, output_attentions=output_attentions)
        h, g, new_mems, all_hidden, all_attn = self._run_layers(h, g, pos_emb, mems, use_mems, layer_inputs,
                                                                output_hidden_states)
        output = XfmrXLNetModelOutput(
            last_hidden_state=self.dropout(g if g is not None else h), mems=new_mems,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            attentions=tuple(all_attn) if output_attentions else None,
        )
        return output if return_dict else output.to_tuple()

    # -- forward, step by step -----------------------------------------------------------------------
    def _use_mems(self, use_mems, qlen: int) -> bool:
        """Whether this forward returns memory (the config's train / eval default when not given)."""
        config = self.config
        if use_mems is None:
            use_mems = config.use_mems_train if self.training else config.use_mems_eval
        if use_mems and self.training and config.reuse_len and config.reuse_len >= qlen:
            # (in eval mode a short input, e.g. a prompt, simply caches all of its positions)
            raise ValueError(f"reuse_len={config.reuse_len} must be shorter than the training segments ({qlen} "
                             f"tokens): only the first reuse_len positions are cached as memory. Use longer segments "
                             f"or a smaller reuse_len (XLNet: half of the segment).")
        return use_mems

    @staticmethod
    def _query_rows(target_positions, target_mapping, dtype) -> XLNetQueryRows:
        """The query stream's rows: target positions (given, or read from a one-hot mapping), or a general
        mapping; none without targets."""
        if target_positions is not None:
            return XLNetQueryRows(positions=target_positions.clamp(min=0), valid=(target_positions >= 0).to(dtype),
                                  count=target_positions.shape[1])
        if target_mapping is None:
            return XLNetQueryRows()
        if _is_one_hot_mapping(target_mapping):
            return XLNetQueryRows(positions=target_mapping.argmax(-1),  # (B, P)
                                  valid=target_mapping.sum(-1).to(dtype),  # (B, P): 0 on unused slots
                                  count=target_mapping.shape[1])
        return XLNetQueryRows(mapping=target_mapping.to(dtype), count=target_mapping.shape[1])

    @staticmethod
    def _key_types(token_type_ids, batch: int, mlen: int, dtype):
        """(B, 1, K, S) one-hot segment ids of the keys, memory counting as segment 0 (as the reference);
        None without `token_type_ids`."""
        if token_type_ids is None:
            return None
        if torch.compiler.is_compiling():
            num_types = 3  # XLNet's A, B and <cls> (a data-dependent count would break the graph)
            check_value_range("token_type_ids", token_type_ids, 0, num_types,
                              "Compiled, XLNet takes segment ids 0, 1 and 2 (A, B, <cls>); renumber the "
                              "segments or run uncompiled.", what="the compiled segment ids")
        else:
            num_types = int(token_type_ids.max()) + 1
            if int(token_type_ids.min()) < 0:
                raise ValueError("`token_type_ids` must be non-negative segment ids.")
        types = token_type_ids if mlen == 0 else torch.cat(
            [token_type_ids.new_zeros(batch, mlen), token_type_ids], dim=1)  # (B, K)
        return nn.functional.one_hot(types, num_types).to(dtype)[:, None]  # (B, 1, K, S)

    def _run_layers(self, h, g, pos_emb, mems, use_mems: bool, layer_inputs: dict, output_hidden_states: bool):
        """Both streams through every layer, caching each layer's input as memory.
        Returns (h, g, new mems or None, hidden states list or None, attention weights list or None)."""
        new_mems = () if use_mems else None
        all_hidden = [] if output_hidden_states else None
        all_attn = [] if layer_inputs["output_attentions"] else None
        for i, layer in enumerate(self.layers):
            mem = None if mems is None else mems[i]
            if use_mems:
                new_mems += (self._cache(h, mem),)
            if output_hidden_states:
                all_hidden.extend((h, g) if g is not None else (h,))
            mem = None if mem is None else mem.transpose(0, 1).to(h.dtype)  # (B, M, C)
            h, g, w_h, w_g = layer(h, g, pos_emb, mem=mem, **layer_inputs)
            if all_attn is not None:
                all_attn.append((w_h, w_g) if g is not None else w_h)
        if output_hidden_states:
            all_hidden.extend((h, g) if g is not None else (h,))
        return h, g, new_mems, all_hidden, all_attn


# -- heads (shared machinery in models/heads.py) -----------------------------------------------------
def _labelled_targets(target_mapping, target_positions, labels):
    """(target_positions, labels) keeping only the target slots that have a label, packed to the left
    ((B, P') with P' the most labelled slots of a row; -1 / -100 pad the rest). Unchanged when the
    targets are not given as one-hot rows or positions, or when the labels do not match them."""
    if target_positions is None:
        if target_mapping is None or target_mapping.dim() != 3 or not _is_one_hot_mapping(target_mapping):
            return target_positions, labels
        target_positions = target_mapping.argmax(-1).masked_fill(target_mapping.sum(-1) == 0, -1)  # (B, P)
    if tuple(labels.shape) != tuple(target_positions.shape):
        return (target_positions if target_mapping is None else None), labels
    keep = (labels != -100) & (target_positions >= 0)  # (B, P)
    width = max(1, int(keep.sum(1).max()))
    if width == keep.shape[1]:
        return target_positions, labels
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :width]  # labelled slots first
    kept = keep.gather(1, order)
    return (target_positions.gather(1, order).masked_fill(~kept, -1),
            labels.gather(1, order).masked_fill(~kept, -100))


class XfmrXLNetLMHeadModel(XfmrXLNetPreTrainedModel, GenerationMixin):
    """Permutation LM: the query stream's targets -> `lm_head` tied to the token embeddings.

    `generate()` feeds the prompt plus a placeholder token hidden from every position and predicts the
    placeholder from the query stream; `mems` carry the prefix between steps (the last two positions are
    recomputed each step, as the reference does)."""

    _tied_weights_keys = {"lm_head.weight": "model.embeddings.word_embeddings.weight"}
    accepts_loss_kwargs = True

    def __init__(self, config):
        super().__init__(config)
        self.model = XfmrXLNetModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=True)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def forward(self, input_ids=None, attention_mask=None, mems=None, perm_mask=None, target_mapping=None,
                token_type_ids=None, input_mask=None, inputs_embeds=None, labels=None, use_mems=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, perm_ranks=None,
                target_positions=None, num_items_in_batch=None, **kwargs):
        """`labels` (B, P): the target ids in the order of the target rows (-100 on unused slots); without
        targets, (B, L)."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        chunked = getattr(self.config, "chunked_lm_loss", True) and self.training and labels is not None
        if chunked and not (output_hidden_states or output_attentions or torch.compiler.is_compiling()):
            # Training: the loss is all that comes back, so target rows whose label is -100 (e.g. every
            # position transformers' collator does not predict) need no query stream at all.
            target_positions, labels = _labelled_targets(target_mapping, target_positions, labels)
            if target_positions is not None:
                target_mapping = None
        out = self.model(input_ids, attention_mask=attention_mask, mems=mems, perm_mask=perm_mask,
                         target_mapping=target_mapping, token_type_ids=token_type_ids, input_mask=input_mask,
                         inputs_embeds=inputs_embeds, use_mems=use_mems, output_attentions=output_attentions,
                         output_hidden_states=output_hidden_states, return_dict=True, perm_ranks=perm_ranks,
                         target_positions=target_positions, **kwargs)
        hidden = out.last_hidden_state  # (B, P, C)
        if labels is not None and tuple(labels.shape) != tuple(hidden.shape[:2]):
            raise ValueError(f"`labels` has shape {tuple(labels.shape)} but the model predicts "
                             f"{tuple(hidden.shape[:2])} tokens (batch, num_predict): one label per target row.")
        logits, loss = lm_logits_and_loss(self.lm_head, hidden, labels, shift=False, return_logits=not chunked,
                                          num_items_in_batch=num_items_in_batch)
        output = XfmrXLNetLMHeadModelOutput(loss=loss, logits=logits, mems=out.mems, hidden_states=out.hidden_states,
                                            attentions=out.attentions)
        return output if return_dict else output.to_tuple()

    # -- generation: a placeholder token predicted by the query stream, memory as the cache -----------
    def prepare_inputs_for_generation(self, input_ids, mems=None, use_mems=None, **kwargs):
        batch = input_ids.shape[0]
        placeholder = input_ids.new_zeros(batch, 1)
        if mems is not None:  # recompute the last two positions, the rest comes from memory
            input_ids = torch.cat([input_ids[:, -2:], placeholder], dim=1)
            mems = tuple(m[:-2] for m in mems)
        else:
            input_ids = torch.cat([input_ids, placeholder], dim=1)
        seq_len = input_ids.shape[1]
        ranks = torch.full((batch, seq_len), -1, dtype=torch.long, device=input_ids.device)
        ranks[:, -1] = 0  # the placeholder is the only target: nobody sees it
        inputs = {"input_ids": input_ids, "perm_ranks": ranks, "mems": mems, "use_mems": use_mems,
                  "target_positions": torch.full((batch, 1), seq_len - 1, dtype=torch.long, device=input_ids.device)}
        for key in ("output_attentions", "output_hidden_states", "return_dict"):
            if key in kwargs:
                inputs[key] = kwargs[key]
        return inputs

    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, is_encoder_decoder=False, num_new_tokens=1):
        model_kwargs = super()._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder,
                                                                   num_new_tokens)
        if getattr(outputs, "mems", None) is not None:
            model_kwargs["mems"] = outputs.mems
        return model_kwargs

    @staticmethod
    def _reorder_cache(mems, beam_idx):
        return tuple(m.index_select(1, beam_idx.to(m.device)) for m in mems)


class XfmrXLNetSequenceSummary(nn.Module):
    """XLNet's summary head on the pooled vector: [summary (C -> C) -> tanh] -> dropout -> out_proj."""

    def __init__(self, config, num_outputs: int):
        super().__init__()
        self.summary = nn.Linear(config.d_model, config.d_model) if config.summary_use_proj else nn.Identity()
        self.activation = nn.Tanh() if config.summary_activation == "tanh" else nn.Identity()
        self.dropout = Dropout(config.summary_last_dropout)
        self.out_proj = nn.Linear(config.d_model, num_outputs)

    def forward(self, pooled):
        return self.out_proj(self.dropout(self.activation(self.summary(pooled))))


class _XLNetSummaryPooling(TaskHead):
    """Pools as `config.summary_type` says: "last" (<cls> ends XLNet inputs), "first" or "mean" (all positions)."""

    def pool(self, output, input_ids=None, attention_mask=None):
        hidden = output.last_hidden_state
        if self.config.summary_type == "first":
            return hidden[:, 0]
        if self.config.summary_type == "mean":
            return hidden.mean(dim=1)
        return hidden[:, -1]

    def build_classifier(self, config, num_outputs):
        return XfmrXLNetSequenceSummary(config, num_outputs)


class XfmrXLNetForSequenceClassification(_XLNetSummaryPooling, SequenceClassificationHead, XfmrXLNetPreTrainedModel):
    base_model_class = XfmrXLNetModel


class XfmrXLNetForMultipleChoice(_XLNetSummaryPooling, MultipleChoiceHead, XfmrXLNetPreTrainedModel):
    base_model_class = XfmrXLNetModel


class XfmrXLNetForTokenClassification(TokenClassificationHead, XfmrXLNetPreTrainedModel):
    """A linear `classifier` on every token (no dropout before it, as the reference)."""

    base_model_class = XfmrXLNetModel

    def classifier_dropout_prob(self) -> float:
        return 0.0


class XfmrXLNetForQuestionAnsweringSimple(QuestionAnsweringHead, XfmrXLNetPreTrainedModel):
    base_model_class = XfmrXLNetModel


__all__ = [
    "XfmrXLNetPreTrainedModel",
    "XfmrXLNetModel",
    "XfmrXLNetLMHeadModel",
    "XfmrXLNetForSequenceClassification",
    "XfmrXLNetForTokenClassification",
    "XfmrXLNetForQuestionAnsweringSimple",
    "XfmrXLNetForMultipleChoice",
]
