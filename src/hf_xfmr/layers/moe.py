"""Sparse mixture-of-experts feed-forward: a top-k router over SwiGLU experts run as grouped matrix products.

Shazeer et al. 2017, "Outrageously Large Neural Networks", https://arxiv.org/abs/1701.06538 (top-k gating);
Fedus et al. 2021, "Switch Transformers", https://arxiv.org/abs/2101.03961 (load-balancing loss, eqs. 4-6);
Jiang et al. 2024, "Mixtral of Experts", https://arxiv.org/abs/2401.04088 (softmax, top-2, renormalised weights).
Parity reference: transformers' `MixtralSparseMoeBlock` and `load_balancing_loss_func`.

Shapes: N tokens (padding already removed, or B * T), C hidden, I expert intermediate size, E experts,
k experts per token, S = N * k (token, expert) pairs.

The experts' weights are two stacked parameters, `experts.gate_up_proj` (E, 2I, C) with the gate rows first and
`experts.down_proj` (E, C, I): transformers 5's layout, so checkpoints convert by name, and PEFT's
`target_parameters` can put LoRA on them. All experts run in ONE grouped matrix product per projection
(`torch.nn.functional.grouped_mm`): no Python loop over experts, no data-dependent set of modules, an expert
without tokens runs on an empty group. Every rank therefore runs the same modules in the same order whatever
the routing, which ZeRO-3's parameter gathering needs.

Deviations from the reference: router jitter noise multiplies a copy of the input (transformers multiplies
the caller's tensor in place); the outputs are the same.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .mlp import get_activation


def route_top_k(router_logits, top_k):
    """(N, E) router logits -> top-k weights (N, k) float32, renormalised to sum to 1, and experts (N, k).

    Softmax in float32 over all experts, then the k largest probabilities divided by their sum (Mixtral's rule).
    """
    probs = torch.softmax(router_logits.float(), dim=-1)  # (N, E)
    weights, experts = torch.topk(probs, top_k, dim=-1)  # (N, k), (N, k)
    return weights / weights.sum(dim=-1, keepdim=True), experts


def padded_grouped_mm(x, weight, offsets):
    """grouped_mm as ONE bmm: each group's rows padded to the largest group, (E, capacity, K) @ (E, K, M).

    x (S, K) sorted by group, weight (E, K, M), offsets (E,) cumulative group ends -> (S, M). The fallback for
    sizes the kernel refuses and torch < 2.9; it reads the largest group size on the host (a graph break under
    torch.compile).
    """
    num_groups = weight.shape[0]
    ends = offsets.long()
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])  # (E,)
    capacity = int((ends - starts).max())
    slot = torch.arange(x.shape[0], device=x.device)  # (S,)
    group = torch.bucketize(slot, ends, right=True)  # (S,) the group of each row
    row = slot - starts[group]  # (S,) its place within the group
    padded = x.new_zeros(num_groups, capacity, x.shape[1]).index_put((group, row), x)  # (E, capacity, K)
    return torch.bmm(padded, weight)[group, row]  # (S, M)


def grouped_mm(x, weight, offsets):
    """Rows of x (S, K), sorted by group, times their group's matrix weight (E, K, M) -> (S, M).

    offsets (E,) int32 are the cumulative group ends; a group may be empty (its matrix still takes part, with a
    zero gradient). torch's grouped_mm kernel (torch >= 2.9, CPU and GPU, forward and backward) when K and M are
    multiples of 16 bytes, as it requires; else `padded_grouped_mm`. On CPU (fp32, 2 threads, Mixtral-shaped
    experts, forward + backward) the kernel measured 85-98 ms against 133-136 ms for the padded bmm and 94-101 ms
    for transformers' `grouped_mm` experts, which call the same kernel. The kernel needs a contiguous gradient
    at its output, which `GroupedExperts` gives it. Under torch.compile, other dtypes than bf16 take the padded
    bmm (a graph break).
    """
    if x.shape[0] == 0:
        # Nothing to multiply (grouped_mm's backward rejects it); keep the weight in the graph so that it still
        # gets a (zero) gradient, as DDP and ZeRO expect of a module that ran.
        return x.new_zeros(0, weight.shape[-1]) + 0.0 * weight.sum()
    alignment = 16 // x.element_size()
    aligned = x.shape[-1] % alignment == 0 and weight.shape[-1] % alignment == 0
    # On CUDA the kernel needs compute capability 8.0 (as transformers checks); under torch.compile it is lowered
    # for bf16 only.
    capable = x.device.type != "cuda" or torch.cuda.get_device_capability(x.device) >= (8, 0)
    capable = capable and (weight.dtype == torch.bfloat16 or not torch.compiler.is_compiling())
    if aligned and capable and hasattr(F, "grouped_mm"):
        return F.grouped_mm(x.to(weight.dtype), weight, offs=offsets)  # the kernel has no autocast rule
    return padded_grouped_mm(x, weight, offsets)


class GroupedExperts(nn.Module):
    """E SwiGLU experts, down(act(gate(x)) * up(x)), their weights stacked; all run in two grouped products.

    forward(x (N, C), experts (N, k), weights (N, k)) -> (N, C): each token's k expert outputs, weighted and
    summed. Tokens are sorted by expert so that each expert's rows are contiguous (one group per expert).
    """

    def __init__(self, num_experts, hidden_size, intermediate_size, activation="silu"):
        super().__init__()
        self.num_experts = num_experts
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))
        self.act = get_activation(activation)

    def forward(self, x, experts, weights):
        num_tokens, top_k = experts.shape
        if num_tokens == 0:  # nothing routed: both weights stay in the graph with a zero gradient (DDP, ZeRO)
            return x + 0.0 * (self.gate_up_proj.sum() + self.down_proj.sum())
        flat_experts = experts.reshape(-1)  # (S,)
        order = torch.argsort(flat_experts, stable=True)  # (S,) pairs grouped by expert
        counts = torch.zeros(self.num_experts, dtype=torch.int32, device=x.device)
        counts = counts.scatter_add(0, flat_experts, torch.ones_like(flat_experts, dtype=torch.int32))  # (E,)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)  # (E,) group ends
        rows = x[order // top_k]  # (S, C) each pair's token, in expert order
        gate, up = grouped_mm(rows, self.gate_up_proj.transpose(1, 2), offsets).chunk(2, dim=-1)  # 2 x (S, I)
        out = grouped_mm(self.act(gate) * up, self.down_proj.transpose(1, 2), offsets)  # (S, C)
        out = out * weights.reshape(-1)[order].unsqueeze(-1)  # (S, C), float32 when x is half precision
        pairs = torch.empty_like(out).index_copy(0, order, out)  # (S, C) back in (token, slot) order
        return pairs.view(num_tokens, top_k, x.shape[-1]).sum(dim=1).to(x.dtype)  # (N, C)

    def extra_repr(self):
        num_experts, two_i, hidden = self.gate_up_proj.shape
        return f"num_experts={num_experts}, hidden_size={hidden}, intermediate_size={two_i // 2}"


class SparseMoeBlock(nn.Module):
    """(..., C) -> (..., C): a router picks k experts per token and their outputs are mixed (Mixtral's MoE layer).

    `gate` is the router (C -> E, no bias); its output (N, E) are the router logits, which a model collects with
    a forward hook on `gate` (as transformers records its router's output). In training with `jitter_noise` > 0
    the input is multiplied by uniform noise in [1 - jitter, 1 + jitter] before routing (the experts see the
    noisy input too), as transformers' Mixtral does.
    """

    def __init__(self, hidden_size, intermediate_size, num_experts, top_k, activation="silu", jitter_noise=0.0):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be between 1 and num_experts ({num_experts}), got {top_k}")
        self.top_k = top_k
        self.jitter_noise = jitter_noise
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = GroupedExperts(num_experts, hidden_size, intermediate_size, activation)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, C)
        if self.training and self.jitter_noise > 0:
            x = x * torch.empty_like(x).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        router_logits = self.gate(x)  # (N, E)
        weights, experts = route_top_k(router_logits, self.top_k)  # (N, k), (N, k)
        return self.experts(x, experts, weights).view(shape)


def load_balancing_loss(router_logits, top_k, num_experts, attention_mask=None):
    """Switch Transformer's auxiliary loss (eqs. 4-6) over every layer's router logits, as Mixtral computes it.

    router_logits: a tuple/list of (N, E) tensors, one per layer, or one (L * N, E) tensor. Returns
    E * sum_e f_e * P_e, with f_e the fraction of (token, slot) assignments routed to expert e counted per token
    (so sum_e f_e = k) and P_e the mean router probability of e, both over every layer's tokens.
    attention_mask (B, T), when given, must match N = B * T: padding tokens are left out of both means.
    Returns 0.0 (a float) when there are no logits.
    """
    if router_logits is None or len(router_logits) == 0:
        return 0.0
    if isinstance(router_logits, torch.Tensor):
        router_logits = (router_logits,)
    device = router_logits[0].device
    assigned = torch.zeros(num_experts, dtype=torch.float32, device=device)  # (E,) sum of token weights
    prob_sum = torch.zeros(num_experts, dtype=torch.float32, device=device)  # (E,)
    num_rows = 0.0
    mask = None
    if attention_mask is not None:
        mask = attention_mask.reshape(-1).to(device=device, dtype=torch.float32)  # (N,)
        if mask.shape[0] != router_logits[0].shape[0]:
            raise ValueError(
                f"attention_mask has {mask.shape[0]} positions but the router saw {router_logits[0].shape[0]} "
                "tokens; pass the mask of the same batch (B, T) the logits came from, or None"
            )
    for logits in router_logits:
        probs = torch.softmax(logits.to(device).float(), dim=-1)  # (N, E)
        _, experts = torch.topk(probs, top_k, dim=-1)  # (N, k)
        token_weight = torch.ones_like(probs[:, 0]) if mask is None else mask  # (N,)
        assigned = assigned.scatter_add(0, experts.reshape(-1), token_weight.repeat_interleave(top_k))
        prob_sum = prob_sum + (probs * token_weight.unsqueeze(-1)).sum(dim=0)
        num_rows = num_rows + (probs.shape[0] if mask is None else mask.sum())
    return num_experts * torch.sum((assigned / num_rows) * (prob_sum / num_rows))
