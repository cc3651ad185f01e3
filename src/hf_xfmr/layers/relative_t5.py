"""Bucketed relative position bias (T5: Raffel et al., 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", sec. 2.1; https://arxiv.org/abs/1910.10683).

Instead of position embeddings, every attention score gets a learned scalar per head that depends only
on the (clipped, bucketed) distance between key and query. Half of the buckets hold exact small
distances, the other half logarithmically wider ranges up to `max_distance`; everything farther shares
the last bucket. A bidirectional (encoder) bias also tells "before" from "after" (half the buckets each);
a causal (decoder) bias only sees keys at or before the query.

The bias depends only on (query, key) positions, so a model computes it once per stack and shares it
between all its layers (T5 learns one table per stack, owned by the first layer in the reference).
"""

import math

import torch


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool = True, num_buckets: int = 32,
                             max_distance: int = 128) -> torch.Tensor:
    """Bucket index in [0, num_buckets) of each `relative_position` = key position - query position.

    Same integer arithmetic as Mesh TensorFlow's `_relative_position_bucket` (and transformers' T5), so
    checkpoints keep their meaning.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = (relative_position > 0).long() * num_buckets  # keys after the query use the upper half
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # keys after the query (masked anyway) count as 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log(distance / max_exact) / log(max_distance / max_exact) spreads [max_exact, max_distance) over the rest
    scaled = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = (max_exact + scaled.to(torch.long)).clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


def relative_position_bias(table: torch.Tensor, q_len: int, k_len: int, *, bidirectional: bool,
                           max_distance: int, past_length: int = 0) -> torch.Tensor:
    """(1, H, q_len, k_len) additive attention bias from a learned (num_buckets, H) `table`.

    The queries are positions past_length .. past_length + q_len - 1 (new tokens after a cache) and the
    keys positions 0 .. k_len - 1.
    """
    device = table.device
    query = torch.arange(past_length, past_length + q_len, dtype=torch.long, device=device)[:, None]  # (Tq, 1)
    key = torch.arange(k_len, dtype=torch.long, device=device)[None, :]  # (1, Tk)
    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0], max_distance)  # (Tq, Tk)
    return torch.nn.functional.embedding(buckets, table).permute(2, 0, 1).unsqueeze(0)  # (1, H, Tq, Tk)
