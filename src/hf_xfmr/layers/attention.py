"""Attention kernels: softmax(q k^T * scaling + mask) v, separate from the projections around them.

The padded kernels follow the transformers 5 attention-interface signature
`(module, query, key, value, attention_mask, scaling, dropout, **kwargs) -> (out, weights)` with
query/key/value as (B, H, T, D) and out as (B, Tq, H, D), so a model can dispatch to ours or to
transformers' registry the same way. `module` is only read for `.training` (dropout on or off).

Masks are either bool (True = attend) or an additive float bias, broadcastable to (B, H, Tq, Tk).
Rows with no visible key return zeros rather than NaN, with finite gradients, in every kernel.

The varlen kernels work on unpadded tokens (N, H, D) described by `cu_seqlens` (see padding.py):
`flash_varlen_attention` uses flash-attn on GPU; `varlen_attention` runs any padded kernel (eager,
sdpa) document by document, so unpadded models also run on CPU without a mask over all N tokens;
`varlen_attention_reference` is the one-call block-diagonal version used to check both.
`self_attention` is what an encoder layer calls on either layout: padded (B, T, H, D) with a mask, or
unpadded (N, H, D) with a `VarlenBatch`.
`local_attention` computes a sliding window block by block: O(T * window), not O(T^2).
"""

import math

import torch
import torch.nn.functional as F

from .dropout import dropout as apply_dropout
from .fused_dropout import attention_with_dropout
from .masks import block_diagonal_mask, causal_mask, combine_masks, document_ids_from_cu_seqlens
from .masks import causal_window_mask, restrict_mask, sliding_window_mask


def _is_training(module):
    """Dropout is on for a bare call (module None) and for a module in training mode."""
    return module is None or module.training


def _rows_with_keys(mask):
    """Bool (..., Tq, 1): which query rows can see at least one key under `mask`.

    Float masks mark hidden keys with finfo(mask.dtype).min or -inf (see to_additive_mask).
    """
    keep = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min
    return keep.any(dim=-1, keepdim=True)


def _with_causal(attention_mask, is_causal, q_len, k_len, device):
    """AND a causal constraint into `attention_mask` (bool or float) when is_causal is set."""
    if not is_causal:
        return attention_mask
    causal = causal_mask(q_len, k_len, device=device)  # (Tq, Tk)
    if attention_mask is None or attention_mask.dtype == torch.bool:
        return combine_masks(attention_mask, causal)
    return attention_mask.masked_fill(~causal, torch.finfo(attention_mask.dtype).min)


def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Attention written out in torch ops; the one kernel that can return the attention weights.

    The mask and softmax are applied in float32 (a bf16/fp16 softmax loses small probabilities),
    then the probabilities are cast back to the input dtype. Honours `is_causal=True` in kwargs,
    like the sdpa kernel.
    Returns (out (B, Tq, H, D), weights (B, H, Tq, Tk)).
    """
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    attention_mask = _with_causal(
        attention_mask, kwargs.get("is_causal", False), query.shape[-2], key.shape[-2], query.device
    )
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, H, Tq, Tk)
    scores = scores.float()  # a fresh tensor either way: masking it in place saves a (B, H, Tq, Tk) copy
    if attention_mask is not None:
        min_value = torch.finfo(scores.dtype).min
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill_(~attention_mask, min_value)
        else:  # additive bias; clamp -inf so fully masked rows stay finite (no NaN in backward)
            scores = scores.add_(attention_mask.float().clamp(min=min_value))
    probs = scores.softmax(dim=-1)
    if attention_mask is not None:
        rows = _rows_with_keys(attention_mask)  # (..., Tq, 1)
        # Zero fully masked rows; skipped (one pass over the probabilities and its backward) when there
        # are none, e.g. under a causal mask. A compiled graph always fills (no data-dependent branch).
        if torch.compiler.is_compiling() or not bool(rows.all()):
            probs = probs.masked_fill(~rows, 0.0)
    probs = apply_dropout(probs, dropout, training=_is_training(module)).to(query.dtype)
    out = torch.matmul(probs, value)  # (B, H, Tq, D)
    return out.transpose(1, 2).contiguous(), probs  # (B, Tq, H, D)


def sdpa_attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=False, **kwargs
):
    """torch's fused scaled_dot_product_attention behind the same signature; returns (out, None).

    Causal only when asked: encoders call this too. Fully masked rows are let to attend to every
    key and then zeroed, matching the eager kernel: torch >= 2.5 on CPU already returns zeros
    there, but torch 2.4 and some CUDA backends return NaN, which would also poison the gradients.
    """
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    dropout = dropout if _is_training(module) else 0.0
    if dropout > 0.0 and query.device.type == "cpu":
        # torch has no fused CPU kernel with dropout: it falls back to the same math as the eager
        # kernel, only with a slower dropout and extra -inf bookkeeping. Ours is the same function.
        out, _ = eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout,
                                         is_causal=is_causal)
        return out, None
    rows = None
    if attention_mask is not None:
        attention_mask = _with_causal(attention_mask, is_causal, query.shape[-2], key.shape[-2], query.device)
        is_causal = False
        rows = _rows_with_keys(attention_mask)  # (..., Tq, 1)
        if attention_mask.dtype == torch.bool:
            attention_mask = attention_mask | ~rows
        else:  # sdpa wants the bias in the query dtype; clamp -inf so nothing turns into NaN
            attention_mask = attention_mask.to(query.dtype).clamp(min=torch.finfo(query.dtype).min)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, is_causal=is_causal, scale=scaling
    )  # (B, H, Tq, D)
    if rows is not None:
        out = out.masked_fill(~rows, 0.0)
    return out.transpose(1, 2).contiguous(), None  # (B, Tq, H, D)


def sdpa_unchecked_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=False,
                           **kwargs):
    """torch's fused kernel as it is, for masks that are finite and leave no query row without a key
    (T5's biases, a band that holds its diagonal): `sdpa_attention_forward` without its empty-row pass
    over the output. Returns (out (B, Tq, H, D), None); the output is not made contiguous."""
    dropout = dropout if _is_training(module) else 0.0
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.to(query.dtype)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         is_causal=is_causal, scale=scaling)  # (B, H, Tq, D)
    return out.transpose(1, 2), None  # (B, Tq, H, D)


def with_fused_cpu_dropout(kernel, min_scores: int = 0):
    """`kernel`, except in fp32 CPU training with dropout on at least `min_scores` attention scores, where
    `fused_dropout.attention_with_dropout` runs instead: torch has no fused CPU kernel with dropout, and this one
    keeps two (B, H, Tq, Tk) tensors for the backward, not three. Honours `is_causal` and the interface
    signature."""

    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=False, **kwargs):
        if dropout > 0.0 and _is_training(module) and query.device.type == "cpu" and query.dtype == torch.float32 \
                and query.shape[:-1].numel() * key.shape[-2] >= min_scores:  # B x H x Tq x Tk scores
            mask = _with_causal(attention_mask, is_causal, query.shape[-2], key.shape[-2], query.device)
            scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
            return attention_with_dropout(query, key, value, mask, scaling=scaling, p=dropout), None
        return kernel(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                      is_causal=is_causal, **kwargs)

    return attend


ATTENTION_KERNELS = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}
# From this many attention scores (B x H x Tq x Tk) the BERT family and GPT train on CPU with the fused
# softmax-dropout-product kernel (1.47x faster at 8 x 4 x 512 x 512); below it `layers.dropout` hands over to
# torch's dropout anyway (fixed costs), and the plain kernel keeps that.
FUSED_DROPOUT_MIN_SCORES = 2**14


def resolve_kernel(implementation: str, output_attentions: bool = False, *,
                   fused_cpu_dropout_from: int | None = None, finite_masks: bool = False):
    """The one place a model picks its attention kernel from a config's `_attn_implementation`.

    Ours for "eager" and "sdpa", any other name (flex, a custom registration) from transformers'
    registry, with ours eager where it has none. Options, for the callers that need them:
        output_attentions: the weights are asked for, so eager (the one kernel that returns them).
        finite_masks: the caller's masks are finite and leave no row empty: sdpa is torch's kernel as it
            is (`sdpa_unchecked_forward`).
        fused_cpu_dropout_from: ours ("eager", "sdpa") run `with_fused_cpu_dropout` in CPU training from this many
            attention scores on (0: BART, T5; `FUSED_DROPOUT_MIN_SCORES`: the BERT family and GPT, below which the
            plain kernel's dropout, torch's, runs as it always has); None: never.
    """
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if output_attentions:
        implementation = "eager"
    if implementation not in ATTENTION_KERNELS:
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    kernel = sdpa_unchecked_forward if finite_masks and implementation == "sdpa" else ATTENTION_KERNELS[implementation]
    return kernel if fused_cpu_dropout_from is None else with_fused_cpu_dropout(kernel, fused_cpu_dropout_from)


def resolve_varlen_kernel(implementation: str):
    """The kernel for packed unpadded tokens (N, H, D) under a config's `_attn_implementation`:
    `flash_varlen_attention` for "flash_attention_2"; None for every other name, whose padded kernel
    (`resolve_kernel`) then runs document by document (`varlen_attention`)."""
    return flash_varlen_attention if implementation == "flash_attention_2" else None


def _import_flash_attn():
    """Import flash_attn on demand: it is an optional, CUDA-only dependency."""
    try:
        import flash_attn
    except ImportError as err:
        raise ImportError(
            "flash_attention_2 needs the `flash_attn` package, which is not installed. It runs only on "
            "CUDA GPUs (Ampere or newer) with fp16/bf16 inputs: `pip install flash-attn "
            "--no-build-isolation`. On CPU use attn_implementation='sdpa' or 'eager'."
        ) from err
    return flash_attn


def _window_size(window):
    """Our total-width window -> flash-attn's (left, right) reach; (-1, -1) means unlimited."""
    return (-1, -1) if window is None else (window // 2, window // 2)


def flash_attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=False, window=None,
    **kwargs,
):
    """flash-attn's dense kernel behind the interface signature; returns (out, None).

    flash_attn_func takes no mask: pad-free batches only (unpad and use flash_varlen_attention).
    """
    if attention_mask is not None:
        raise ValueError(
            "flash_attention_2 takes no attention_mask; unpad the batch and use flash_varlen_attention"
        )
    flash_attn = _import_flash_attn()
    out = flash_attn.flash_attn_func(
        query.transpose(1, 2),  # (B, Tq, H, D): flash-attn's layout
        key.transpose(1, 2),
        value.transpose(1, 2),
        dropout_p=dropout if _is_training(module) else 0.0,
        softmax_scale=scaling,
        causal=is_causal,
        window_size=_window_size(window),
    )
    return out, None  # (B, Tq, H, D)


def attention_kernel(name):
    """Kernel function for an `attn_implementation` name; flash_attention_2 checks its import now."""
    if name == "flash_attention_2":
        _import_flash_attn()
        return flash_attention_forward
    if name not in ATTENTION_KERNELS:
        valid = ", ".join(repr(n) for n in [*ATTENTION_KERNELS, "flash_attention_2"])
        raise ValueError(f"unknown attention implementation {name!r}; valid names are {valid}")
    return ATTENTION_KERNELS[name]


def flash_varlen_attention(query, key, value, cu_seqlens, max_seqlen, dropout=0.0, scaling=None, window=None):
    """Bidirectional attention over packed unpadded tokens (N, H, D) with flash-attn -> (N, H, D).

    `cu_seqlens` (B+1,) delimits the sequences; `window` is a total local-attention width as in
    sliding_window_mask. The caller passes dropout=0 in eval (there is no module to ask).
    """
    flash_attn = _import_flash_attn()
    cu_seqlens = cu_seqlens.to(torch.int32)
    return flash_attn.flash_attn_varlen_func(
        query,
        key,
        value,
        cu_seqlens_q=cu_seqlens,
        cu_seqlens_k=cu_seqlens,
        max_seqlen_q=max_seqlen,
        max_seqlen_k=max_seqlen,
        dropout_p=dropout,
        softmax_scale=scaling,
        causal=False,
        window_size=_window_size(window),
    )


def varlen_attention_reference(
    query, key, value, cu_seqlens, scaling=None, window=None, dropout=0.0, training=False
):
    """Pure-torch `flash_varlen_attention`: one sdpa call over all N tokens with a block-diagonal mask.

    Memory is O(N^2) in the packed length: meant for CPU, tests and small batches. Within one
    document, packed index distance equals in-document distance, so the window mask applies as is.
    Tokens past cu_seqlens[-1] attend only to themselves.
    """
    n = query.shape[0]
    doc_ids = document_ids_from_cu_seqlens(cu_seqlens, n)  # (N,)
    mask = block_diagonal_mask(doc_ids[None])  # (1, 1, N, N)
    if window is not None:
        mask = combine_masks(mask, sliding_window_mask(n, window, device=query.device))
    q, k, v = (t.transpose(0, 1)[None] for t in (query, key, value))  # (1, H, N, D)
    dropout = dropout if training else 0.0
    out, _ = sdpa_attention_forward(None, q, k, v, mask, scaling=scaling, dropout=dropout)
    return out[0]  # (N, H, D)


def _band_attention(module, kernel, query, key, value, mask, scaling, dropout):
    """`kernel` under a mask that leaves no row empty (a band always holds its diagonal). For sdpa that
    is torch's fused kernel directly: the wrapper's empty-row bookkeeping would cost a pass over the output."""
    if kernel is sdpa_attention_forward and (dropout == 0.0 or query.device.type != "cpu"):
        return sdpa_unchecked_forward(module, query, key, value, mask, scaling=scaling, dropout=dropout)[0]
    return kernel(module, query, key, value, mask, scaling=scaling, dropout=dropout)[0]


def local_attention(module, kernel, query, key, value, window, scaling=None, dropout=0.0, band=None):
    """Sliding-window attention (|i - j| <= window // 2) in O(T * window): (B, H, T, D) -> (B, T, H, D).

    Long sequences are cut into blocks of `reach = window // 2` queries; the keys a block can see lie in
    that block and its two neighbours, so each block attends over 3 * reach keys under a band mask
    instead of over all T keys. `kernel` is a padded kernel (eager_attention_forward,
    sdpa_attention_forward); the result equals `kernel` with `sliding_window_mask(T, window)`.

        keys:     | n-1 | n | n+1 |      (3 * reach keys, zero-padded at both ends of the sequence)
        queries:        | n |            (reach queries)

    Up to 4 windows long, one dense band-masked call is cheaper than the blocks' copies (measured on CPU).
    `band` optionally passes a ready `sliding_window_mask` of at least T x T (its top-left corner is used).
    """
    batch, heads, seq_len, dim = query.shape
    reach = window // 2
    if seq_len <= reach + 1:  # every key lies within reach of every query: plain attention
        out, _ = kernel(module, query, key, value, None, scaling=scaling, dropout=dropout)
        return out
    if seq_len <= 4 * window:
        if band is None or band.shape[-1] < seq_len:
            band = sliding_window_mask(seq_len, window, device=query.device)
        mask = band[:seq_len, :seq_len][None, None]  # (1, 1, T, T)
        return _band_attention(module, kernel, query, key, value, mask, scaling, dropout)
    blocks = math.ceil(seq_len / reach)
    tail = blocks * reach - seq_len
    q = F.pad(query, (0, 0, 0, tail)).view(batch, heads, blocks, reach, dim)  # (B, H, nb, r, D)
    k, v = (F.pad(t, (0, 0, reach, tail + reach)).unfold(2, 3 * reach, reach).transpose(-1, -2)
            for t in (key, value))  # (B, H, nb, 3r, D): block n sees keys of blocks n-1, n, n+1
    q, k, v = (t.transpose(1, 2).reshape(batch * blocks, heads, -1, dim) for t in (q, k, v))  # (B*nb, H, ., D)
    block = torch.arange(blocks, device=query.device)[:, None, None]  # (nb, 1, 1)
    q_pos = block * reach + torch.arange(reach, device=query.device)[None, :, None]  # (nb, r, 1)
    k_pos = (block - 1) * reach + torch.arange(3 * reach, device=query.device)[None, None, :]  # (nb, 1, 3r)
    mask = ((q_pos - k_pos).abs() <= reach) & (k_pos >= 0) & (k_pos < seq_len)  # (nb, r, 3r)
    mask = mask | (q_pos >= seq_len)  # queries past the end (discarded) see everything: no empty rows
    mask = mask[:, None].repeat(batch, 1, 1, 1)  # (B*nb, 1, r, 3r)
    out = _band_attention(module, kernel, q, k, v, mask, scaling, dropout)  # (B*nb, r, H, D)
    return out.reshape(batch, blocks * reach, heads, dim)[:, :seq_len]  # (B, T, H, D)


def varlen_attention(module, kernel, query, key, value, bounds, scaling=None, window=None, dropout=0.0):
    """Attention within each packed document of unpadded tokens (N, H, D) -> (N, H, D), on CPU kernels.

    `bounds` is `cu_seqlens` as a Python list [0, l1, l1 + l2, ..., N] (read to the host once per forward
    by the caller). Documents of equal length go through `kernel` as one batch (e.g. a batch without
    padding); otherwise one call per document, each without any mask: attention costs sum(l_i^2)
    instead of B * T^2 for a padded batch or N^2 for a block-diagonal mask. `window` (a total width, as
    in `sliding_window_mask`) makes every call a `local_attention`.
    """
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    # One band mask for the longest document; shorter ones use its top-left corner (it is shift-invariant).
    band = None if window is None else sliding_window_mask(min(max(lengths), 4 * window), window, device=query.device)

    def attend(q, k, v):  # (b, H, L, D) -> (b, L, H, D)
        if window is None:
            return kernel(module, q, k, v, None, scaling=scaling, dropout=dropout)[0]
        return local_attention(module, kernel, q, k, v, window, scaling=scaling, dropout=dropout, band=band)

    heads, dim = query.shape[1:]
    if len(set(lengths)) == 1:  # equal lengths: one batched call
        docs, length = len(lengths), lengths[0]
        q, k, v = (t[bounds[0]:bounds[-1]].view(docs, length, heads, dim).transpose(1, 2)
                   for t in (query, key, value))  # (docs, H, L, D)
        return attend(q, k, v).reshape(-1, heads, dim)  # (N, H, D)
    # split, not slicing: the backward of one split is one concatenation, while each slice's backward
    # would fill and add a whole (N, H, D) gradient (O(documents * N)).
    outs = []
    for q, k, v in zip(*(t.split(lengths) for t in (query, key, value))):
        if q.shape[0]:
            # (1, H, L, D) in, (1, L, H, D) out; squeeze, not [0]: a select's backward zero-fills a copy
            outs.append(attend(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))).squeeze(0))  # (L, H, D)
    return torch.cat(outs)  # (N, H, D)


def self_attention(module, kernel, query, key, value, attention_mask=None, varlen=None, scaling=None, dropout=0.0):
    """Bidirectional attention of an encoder layer on either layout, through a padded `kernel`.

    Padded: query/key/value (B, T, H, D) and an optional mask -> (out (B, T, H, D), weights or None).
    Unpadded: (N, H, D) with `varlen` (a `padding.VarlenBatch`) -> (out (N, H, D), None), attention within
    each sequence. On CPU one kernel call per sequence (`varlen_attention`: sum(l_i^2) work). Where
    `varlen.dense_index` is set (GPUs: measured on an H100, a launch per sequence made a BERT step 2-4x
    slower than the padded one), the sequences are padded to the longest for one masked call, the padded
    attention's cost, while the projections and MLPs around it still run on the real tokens only.
    The projections around it are the caller's.
    """
    if varlen is not None and varlen.dense_index is not None:
        docs, length = varlen.dense_mask.shape[0], varlen.dense_mask.shape[-1]
        heads, dim = query.shape[1:]

        def dense(x):  # (N, H, D) -> (docs, H, L, D), zeros past each sequence's end
            grid = x.new_zeros(docs * length, heads, dim).index_copy(0, varlen.dense_index, x)
            return grid.view(docs, length, heads, dim).transpose(1, 2)

        out, _ = kernel(module, dense(query), dense(key), dense(value), varlen.dense_mask, scaling=scaling,
                        dropout=dropout)  # (docs, L, H, D)
        return out.reshape(docs * length, heads, dim).index_select(0, varlen.dense_index), None  # (N, H, D)
    if varlen is not None:
        out = varlen_attention(module, kernel, query, key, value, varlen.bounds, scaling=scaling, dropout=dropout)
        return out, None
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (B, H, T, D)
    return kernel(module, q, k, v, attention_mask, scaling=scaling, dropout=dropout)


def repeat_kv_heads(x, groups: int, dim: int):
    """Grouped-query attention (Ainslie et al., 2023, "GQA"): each of the Hkv key/value heads along `dim` serves
    `groups` consecutive query heads. (..., Hkv, ...) -> (..., Hkv * groups, ...); a no-op for groups == 1."""
    if groups == 1:
        return x
    dim = dim % x.dim()
    shape = list(x.shape)
    expanded = x.unsqueeze(dim + 1).expand(*shape[:dim + 1], groups, *shape[dim + 1:])  # (..., Hkv, g, ...)
    return expanded.flatten(dim, dim + 1)  # (..., Hkv * g, ...)


def causal_window_kernel(kernel, window=None):
    """`kernel` made causal, and with `window` limited to the last `window` keys (`masks.causal_window_mask`),
    for calls on one sequence whose queries are the last of its keys (the varlen path, document by document).
    A mask the caller passes (padding of a dense layout) is kept and the causal band ANDed into it; without a
    window, or when every key lies within it, the kernel's own causal path runs."""

    def attend(module, query, key, value, attention_mask, **kwargs):
        q_len, k_len = query.shape[-2], key.shape[-2]
        if window is None or k_len <= window:
            return kernel(module, query, key, value, attention_mask, is_causal=True, **kwargs)
        band = causal_window_mask(q_len, k_len, window, device=query.device)  # (Tq, Tk)
        return kernel(module, query, key, value, restrict_mask(attention_mask, band), **kwargs)

    return attend
