"""BigBird block-sparse attention (Zaheer et al., 2020, https://arxiv.org/abs/2007.14062), ITC form.

The sequence (B, H, T, D) is cut into n = T / b blocks of `block_size` b tokens. Query blocks 0 and n-1 are
global: they attend to every key. Every other query block i attends to 5 + r key blocks (paper section 2):

    [0 (global), i-1, i, i+1 (sliding window), rand_1 .. rand_r, n-1 (global)]

The kernel gathers, with one index tensor, the 5 + r key and value blocks of every middle query block (in the
(B, T, H, D) layout the projections give), then runs torch's fused attention (`scaled_dot_product_attention`) of
each query block over its (5 + r) b gathered keys with a boolean mask: no (.., b, (5+r) b) scores are kept for the
backward. The two global query blocks attend to all T keys in one more call. Cost O(T (7 + r) b) per head, never an
L x L matrix. Row 1's left window block is block 0 and row n-2's right window block is block n-1, which are also
their global blocks: those duplicate slots are masked, so rows 1 and n-2 see 4 + r distinct blocks, as in the
reference. Random blocks that repeat a window or global block (the reference's eval pattern: all zeros) are kept,
and counted twice in the softmax, as the reference does. On a padded batch, `skip_padding_blocks` computes only the
(row, query block) pairs that hold a real token (the last, global, block of a short row is all padding): their
outputs are the only ones kept, so the result is the same for less work.

Public functions (also used by BigBird-Pegasus):

    block_sparse_attention(query, key, value, key_padding_mask, block_size, random_blocks, scaling=None,
                           dropout=0.0, skip_padding_blocks=False) -> out (B, T, H, D)
        query/key/value (B, H, T, D) with T a multiple of block_size and T / block_size >= 5 (fastest as
        transposes of (B, T, H, D) tensors); key_padding_mask (B, T) bool/0-1 (True = real token) or None;
        random_blocks (H, n-2, r) or (B, H, n-2, r) int64 key-block ids for query blocks 1..n-2 (from
        random_block_pattern or fresh_random_block_pattern). Outputs at padding query positions are zeros (the
        reference's `from_mask`). `dropout` drops attention probabilities (the reference's sparse path has none:
        pass 0). `skip_padding_blocks`: skip the query blocks without a real token (same outputs; one host read,
        so not under torch.compile).
    random_block_pattern(seq_len, block_size, num_random_blocks, num_heads, *, seed, training, max_seq_len)
        -> (H, n-2, r) int64: the reference's pattern. Training: numpy's legacy generator seeded with `seed`
        (the reference seeds it with the layer index on every forward, so the pattern is the same each step).
        Eval: all zeros (the reference's "no randomness": every random slot is block 0). Lengths 1024, 3072 and
        4096 take the paper's older plan, drawn for `max_seq_len` and cut to n-2 rows, as the reference does.
        Cached (it depends on its arguments only); numpy's global generator is left alone.
    fresh_random_block_pattern(num_blocks, num_random_blocks, num_heads, *, batch_size=None, generator=None,
                               device=None) -> (H, n-2, r) or (B, H, n-2, r) int64
        new random blocks on every call, drawn with torch (`generator`), uniformly among each row's blocks
        outside its window and the two global blocks (distinct within a row): the paper's intent, where the
        reference repeats one pattern each step.
    layer_random_blocks(seq_len, block_size, num_random_blocks, num_heads, layer_idx, *, fresh, training,
                        max_seq_len, device=None) -> (H, n-2, r) int64
        what a layer uses: the reference's pattern seeded with the layer index, or fresh blocks in training
        when `fresh`.
    uses_full_attention(seq_len, block_size, num_random_blocks) -> bool
        the reference's rule: sequences of at most (5 + 2 r) blocks run full attention.
    log_full_attention_once(seq_len, block_size, num_random_blocks)
        logs (once per process and block layout) that a short input took the full-attention path.

Deviations: the reference pads with an additive -10000 and this kernel masks keys out (equal outputs whenever a
row sees a real key, which every real query does; its outputs at padding queries are zeros either way); the
reference decides full attention for good (`set_attention_type`) after one short input, callers of
`uses_full_attention` decide per forward.
Under torch.compile the reference's training pattern (numpy) is built outside the graph: one graph break per
call; the eval pattern, the fresh pattern and the kernel itself compile without breaks.
"""

import functools
import logging

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

_FULL_ATTENTION_LOGGED = set()


def uses_full_attention(seq_len: int, block_size: int, num_random_blocks: int) -> bool:
    """Whether a sequence of `seq_len` tokens is too short for the sparse layout: it has at most 2 global,
    3 window and 2 r random blocks' worth of tokens (the reference's rule), so full attention costs no more."""
    return seq_len <= (5 + 2 * num_random_blocks) * block_size


def log_full_attention_once(seq_len: int, block_size: int, num_random_blocks: int) -> None:
    """Say once per process (and block layout) that short inputs run full attention (not while compiling)."""
    key = (block_size, num_random_blocks)
    if key in _FULL_ATTENTION_LOGGED or torch.compiler.is_compiling():
        return
    _FULL_ATTENTION_LOGGED.add(key)
    limit = (5 + 2 * num_random_blocks) * block_size
    logger.warning(
        "Block-sparse attention: a sequence of %d tokens is at most (5 + 2 * num_random_blocks) * block_size = %d "
        "tokens, so it runs full attention (same cost, exact); longer inputs use the sparse layout. "
        "This is logged once.", seq_len, limit,
    )


def _check_pattern_args(seq_len: int, block_size: int, num_random_blocks: int):
    if seq_len % block_size:
        raise ValueError(f"seq_len {seq_len} is not a multiple of block_size {block_size}: pad it first.")
    if uses_full_attention(seq_len, block_size, num_random_blocks):
        raise ValueError(
            f"seq_len {seq_len} <= (5 + 2 * num_random_blocks) * block_size: such inputs take full attention "
            "(check uses_full_attention first); the sparse layout has no random-block pattern for them."
        )


def _legal_random_blocks(row: int, end: int, rng) -> list:
    """The reference's draw for one query block `row` among key blocks [0, end): a permutation of them, minus
    the window (row-1..row+1), the globals (0 and end-1), and the block across from row 1 / end-2."""
    illegal = {row - 1, row, row + 1, 0, end - 1}
    if row == 1:
        illegal.add(end - 2)
    if row == end - 2:
        illegal.add(1)
    return [block for block in rng.permutation(np.arange(end, dtype=np.int32)) if block not in illegal]


def _planned_pattern(num_blocks: int, r: int, num_heads: int, rng) -> np.ndarray:
    """(H, n, r) for lengths other than 1024/3072/4096 and n > 2r + 5 blocks (the only case that runs sparse):
    every query block draws its r random blocks among the first 2r + 5 key blocks, row by row, head by head."""
    plan_end = 2 * r + 5
    pattern = np.zeros((num_heads, num_blocks, r), dtype=np.int64)
    for row in range(1, num_blocks):
        for head in range(num_heads):
            pattern[head, row] = _legal_random_blocks(row, plan_end, rng)[:r]
    return pattern


def _paper_pattern(max_seq_len: int, block_size: int, r: int, num_heads: int, rng) -> np.ndarray:
    """(H, N-2, r) for lengths 1024, 3072 and 4096: the paper's plan, drawn over N = max_seq_len / block_size
    blocks with random blocks among the first 1024 tokens' blocks, head by head."""
    num_blocks = max_seq_len // block_size
    last = num_blocks - 1 if 1024 <= 2 * block_size else 1024 // block_size - 1
    middle = np.arange(1, num_blocks - 1, dtype=np.int32)  # candidate key blocks (not global)
    pattern = np.zeros((num_heads, num_blocks - 2, r), dtype=np.int64)
    for head in range(num_heads):
        for row in range(1, num_blocks - 1):
            if row == 1:
                candidates = middle[2:last]
            elif row == 2:
                candidates = middle[3:last]
            elif row >= num_blocks - 3:  # the reference does not exclude these rows' windows
                candidates = middle[:last]
            elif row - 2 > last:
                candidates = middle[:last]
            elif row + 1 == last:
                candidates = middle[:row - 2]
            else:
                candidates = np.concatenate((middle[:row - 2], middle[row + 1:last]))
            pattern[head, row - 1] = rng.permutation(candidates)[:r]
    return pattern


@functools.lru_cache(maxsize=64)
def _reference_pattern(seq_len, block_size, r, num_heads, seed, max_seq_len) -> np.ndarray:
    num_blocks = seq_len // block_size
    rng = np.random.RandomState(seed)  # the generator np.random.seed(seed) resets, kept private here
    if seq_len in (1024, 3072, 4096):
        if max_seq_len is None or max_seq_len < seq_len:
            raise ValueError(f"max_seq_len (max_position_embeddings) >= {seq_len} is needed for this length.")
        pattern = _paper_pattern(max_seq_len, block_size, r, num_heads, rng)[:, :num_blocks - 2]
    else:
        pattern = _planned_pattern(num_blocks, r, num_heads, rng)[:, 1:num_blocks - 1]
    pattern.setflags(write=False)
    return pattern


@torch.compiler.disable  # numpy's generator cannot be traced: under torch.compile, one graph break here
def _reference_pattern_tensor(seq_len, block_size, r, num_heads, seed, max_seq_len) -> torch.Tensor:
    return torch.tensor(_reference_pattern(seq_len, block_size, r, num_heads, seed, max_seq_len), dtype=torch.long)


def random_block_pattern(seq_len: int, block_size: int, num_random_blocks: int, num_heads: int, *,
                         seed: int = 0, training: bool = True, max_seq_len: int | None = None,
                         device=None) -> torch.Tensor:
    """The reference's random key blocks (H, n-2, r) int64 of query blocks 1..n-2 (n = seq_len / block_size).

    training: numpy's legacy generator seeded with `seed` (the reference passes the layer index); eval: zeros.
    max_seq_len: the model's max_position_embeddings (read for lengths 1024, 3072 and 4096 only).
    """
    _check_pattern_args(seq_len, block_size, num_random_blocks)
    num_blocks = seq_len // block_size
    if not training or num_random_blocks == 0:
        return torch.zeros(num_heads, num_blocks - 2, num_random_blocks, dtype=torch.long, device=device)
    pattern = _reference_pattern_tensor(seq_len, block_size, num_random_blocks, num_heads, seed, max_seq_len)
    return pattern.to(device)


def fresh_random_block_pattern(num_blocks: int, num_random_blocks: int, num_heads: int, *,
                               batch_size: int | None = None, generator: torch.Generator | None = None,
                               device=None) -> torch.Tensor:
    """New random key blocks on every call: (H, n-2, r), or (B, H, n-2, r) given `batch_size`, int64.

    Row i (query block i, 1 <= i <= n-2) draws r distinct blocks uniformly among the blocks outside its window
    (i-1..i+1) and the two global blocks (0, n-1): top-r of uniform noise over the legal blocks, one call."""
    r = num_random_blocks
    if num_blocks - 5 < r:
        raise ValueError(f"{num_blocks} blocks leave fewer than num_random_blocks={r} legal random blocks per row.")
    lead = (num_heads,) if batch_size is None else (batch_size, num_heads)
    device = generator.device if generator is not None and device is None else device
    rows = torch.arange(1, num_blocks - 1, device=device)[:, None]  # (n-2, 1) query blocks
    cols = torch.arange(num_blocks, device=device)[None, :]  # (1, n) key blocks
    legal = ((cols - rows).abs() > 1) & (cols > 0) & (cols < num_blocks - 1)  # (n-2, n)
    noise = torch.rand(*lead, num_blocks - 2, num_blocks, generator=generator, device=device)
    noise = noise.masked_fill(~legal, -1.0)  # illegal blocks never win the top-r
    return noise.topk(r, dim=-1).indices  # (*lead, n-2, r)


def layer_random_blocks(seq_len: int, block_size: int, num_random_blocks: int, num_heads: int, layer_idx: int, *,
                        fresh: bool, training: bool, max_seq_len: int | None, device=None) -> torch.Tensor:
    """(H, n-2, r) random key blocks of layer `layer_idx` for `seq_len` tokens, as the models' `random_blocks`
    config chooses: the reference's (`fresh=False`: seeded with the layer index in training, the same every step;
    zeros in eval), or `fresh`: new ones at every training call and the seeded pattern in eval."""
    if fresh and training:
        return fresh_random_block_pattern(seq_len // block_size, num_random_blocks, num_heads, device=device)
    return random_block_pattern(seq_len, block_size, num_random_blocks, num_heads, seed=layer_idx,
                                training=training or fresh, max_seq_len=max_seq_len, device=device)


def band_block_indices(random_blocks: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """(..., n-2, 5 + r) key blocks of query blocks 1..n-2: [0, i-1, i, i+1, random..., n-1]."""
    rows = torch.arange(1, num_blocks - 1, device=random_blocks.device)  # (n-2,)
    lead = random_blocks.shape[:-2]
    window = torch.stack([torch.zeros_like(rows), rows - 1, rows, rows + 1], dim=-1)  # (n-2, 4)
    last = torch.full_like(rows, num_blocks - 1)[:, None]  # (n-2, 1)
    return torch.cat([window.expand(*lead, -1, -1), random_blocks, last.expand(*lead, -1, -1)], dim=-1)


def _gather_band(x: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, block_size: int) -> torch.Tensor:
    """x (B, T, H, D), rows (P,) and index (P, H, S) key-block ids -> (P, S b, H, D): for pair p and head h, the
    blocks index[p, h] of batch row rows[p]. One index_select of (D,) rows, in the layout the fused attention
    kernel keeps its gradients in (so its backward copies nothing)."""
    batch, seq_len, heads, dim = x.shape
    num_blocks = seq_len // block_size
    start = (rows[:, None, None] * num_blocks + index).permute(0, 2, 1) * block_size  # (P, S, H) first tokens
    offsets = torch.arange(block_size, device=index.device)[None, None, :, None]  # (1, 1, b, 1)
    ids = (start[:, :, None, :] + offsets) * heads + torch.arange(heads, device=index.device)  # (P, S, b, H)
    picked = x.reshape(batch * seq_len * heads, dim).index_select(0, ids.flatten())  # (P S b H, D)
    return picked.view(index.shape[0], index.shape[2] * block_size, heads, dim)


def _attend(query, key, value, mask, scaling, dropout):
    """Softmax attention of (..., Q, D) queries over (..., K, D) keys, `mask` (bool, True = attend, broadcast to
    (..., Q, K)) or None: torch's fused kernel (no (..., Q, K) scores kept for the backward)."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)


def _global_rows(query, key, value, keep, block_size, scaling, dropout, last_rows):
    """Query blocks 0 (of every row) and n-1 (of rows `last_rows` (L,), None: every row) attend to every key:
    (B, H, b, D) and (L, H, b, D)."""
    mask = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, T)
    first, last = query[:, :, :block_size], query[:, :, -block_size:]  # (B, H, b, D) each
    if last_rows is None:  # one call for both
        out = _attend(torch.cat([first, last], dim=2), key, value, mask, scaling, dropout)  # (B, H, 2b, D)
        return out[:, :, :block_size], out[:, :, block_size:]
    first = _attend(first, key, value, mask, scaling, dropout)
    mask = None if mask is None else mask[last_rows]
    return first, _attend(last[last_rows], key[last_rows], value[last_rows], mask, scaling, dropout)


def _band_rows(query, key, value, keep, block_size, random_blocks, scaling, dropout, rows, blocks):
    """Middle query blocks `blocks` (P,) (each in 1..n-2) of batch rows `rows` (P,) attend to their 5 + r
    gathered key blocks. query/key/value (B, T, H, D) -> (P, b, H, D)."""
    batch, seq_len, heads, dim = query.shape
    num_blocks = seq_len // block_size
    index = band_block_indices(random_blocks, num_blocks)  # (H, n-2, S) or (B, H, n-2, S), S = 5 + r
    if index.dim() == 3:
        index = index[:, blocks - 1].transpose(0, 1)  # (P, H, S)
    else:
        index = index[rows, :, blocks - 1]  # (P, H, S)
    pairs, slots = blocks.shape[0], index.shape[-1]
    q_band = query.reshape(batch * num_blocks, block_size, heads, dim).index_select(0, rows * num_blocks + blocks)
    k_band = _gather_band(key, rows, index, block_size)  # (P, S b, H, D)
    v_band = _gather_band(value, rows, index, block_size)
    # Hidden slots: the duplicate globals of rows 1 (its left window block is block 0) and n-2 (its right one is
    # block n-1), and the padding keys of the gathered blocks.
    visible = torch.ones(pairs, 1, slots, block_size, dtype=torch.bool, device=query.device)  # (P, 1, S, b)
    visible[:, 0, 1] = (blocks != 1)[:, None]
    visible[:, 0, -1] = (blocks != num_blocks - 2)[:, None]
    if keep is not None:
        keep_blocks = keep.reshape(-1, block_size)  # (B n, b)
        keep_band = keep_blocks[(rows[:, None, None] * num_blocks + index)]  # (P, H, S, b)
        visible = visible & keep_band
    mask = visible.reshape(pairs, visible.shape[1], 1, -1)  # (P, H|1, 1, S b)
    out = _attend(q_band.transpose(1, 2), k_band.transpose(1, 2), v_band.transpose(1, 2), mask, scaling, dropout)
    return out.transpose(1, 2)  # (P, b, H, D)


def _query_pairs(keep, batch: int, num_blocks: int, block_size: int, skip_padding_blocks: bool, device):
    """The middle query blocks to compute, as (rows (P,), blocks (P,)) in row-major order, and the rows whose
    last block is computed (None: every row). Skipping: only blocks holding a real token (one host read)."""
    if not skip_padding_blocks or keep is None:
        rows = torch.arange(batch, device=device).repeat_interleave(num_blocks - 2)  # (B (n-2),)
        blocks = torch.arange(1, num_blocks - 1, device=device).repeat(batch)
        return rows, blocks, None
    real = keep.view(batch, num_blocks, block_size).any(dim=-1)  # (B, n)
    rows, blocks = real[:, 1:-1].nonzero().unbind(-1)  # (P,) each
    return rows, blocks + 1, real[:, -1].nonzero().flatten()


def block_sparse_attention(query, key, value, key_padding_mask, block_size: int, random_blocks: torch.Tensor,
                           scaling: float | None = None, dropout: float = 0.0,
                           skip_padding_blocks: bool = False) -> torch.Tensor:
    """BigBird ITC attention of (B, H, T, D) inputs -> (B, T, H, D) (the layout of the other kernels).

    key_padding_mask: (B, T), True/1 = real token, or None. random_blocks: (H, n-2, r) or (B, H, n-2, r).
    Outputs at padding query positions are zeros. `dropout` > 0 drops attention probabilities.
    skip_padding_blocks: do not compute the query blocks that hold no real token (their outputs are zeros
    anyway): the same outputs for less work on a padded batch, at the cost of a host read (not for torch.compile).
    """
    batch, heads, seq_len, dim = query.shape
    if seq_len % block_size:
        raise ValueError(f"Sequence length {seq_len} is not a multiple of block_size {block_size}: pad it first.")
    num_blocks = seq_len // block_size
    if num_blocks < 5:
        raise ValueError(f"Block-sparse attention needs at least 5 blocks, got {num_blocks}: use full attention.")
    if random_blocks.dim() not in (3, 4) or random_blocks.shape[-2] != num_blocks - 2 \
            or random_blocks.shape[-3] != heads:
        raise ValueError(f"random_blocks must be (H={heads}, n-2={num_blocks - 2}, r) or (B, H, n-2, r), "
                         f"got {tuple(random_blocks.shape)}.")
    scaling = dim ** -0.5 if scaling is None else scaling
    keep = None if key_padding_mask is None else key_padding_mask.bool()
    rows, blocks, last_rows = _query_pairs(keep, batch, num_blocks, block_size, skip_padding_blocks, query.device)
    first, last = _global_rows(query, key, value, keep, block_size, scaling, dropout, last_rows)  # (B|L, H, b, D)
    first, last = first.transpose(1, 2), last.transpose(1, 2)  # (B|L, b, H, D)
    # The band in the (B, T, H, D) layout (free when the inputs are transposes of it, as the projections give).
    query, key, value = (x.transpose(1, 2) for x in (query, key, value))  # (B, T, H, D)
    band = _band_rows(query, key, value, keep, block_size, random_blocks.long(), scaling, dropout, rows, blocks)
    if last_rows is None:  # every block computed: (B, n, b, H, D) in order
        band = band.reshape(batch, num_blocks - 2, block_size, heads, dim)
        out = torch.cat([first[:, None], band, last[:, None]], dim=1).view(batch, seq_len, heads, dim)  # (B, T, H, D)
    else:  # the computed blocks into a zero (B n, b, H, D) grid
        row_ids = torch.arange(batch, device=query.device)
        places = torch.cat([row_ids * num_blocks, rows * num_blocks + blocks, last_rows * num_blocks + num_blocks - 1])
        computed = torch.cat([first, band, last])  # (B + P + L, b, H, D)
        out = query.new_zeros(batch * num_blocks, block_size, heads, dim).index_copy(0, places, computed)
        out = out.view(batch, seq_len, heads, dim)  # (B, T, H, D)
    if keep is not None:
        out = out * keep[:, :, None, None].to(out.dtype)  # padding queries: zeros, as the reference's from_mask
    return out
