"""Dropout fused with the operation before it, so autograd keeps one activation instead of three.

Training with dropout on CPU, plain autograd keeps for `softmax -> dropout -> matmul(v)` the
probabilities (softmax backward), the keep mask (dropout backward) and the dropped probabilities
(matmul backward): two (B, H, Tq, Tk) float tensors and a bool one per attention layer, the largest
activations of an encoder. `attention_with_dropout` keeps the probabilities and the keep mask only and
recomputes the dropped probabilities in backward (one elementwise pass). Likewise
`relu_dropout(x, p)` keeps only its output: ReLU's and dropout's gradients are both "where the output
is non-zero", so neither the pre-activation nor the mask is needed.

The keep mask is drawn as in `layers.dropout` (one 31-bit integer per element against a threshold),
so the distribution is the same as `torch.nn.functional.dropout`'s. Masks are additive float biases
(finfo.min where hidden; their gradient is returned when they require one, e.g. T5's relative position
bias) or bool (True = attend). Every query row must see at least one key.

Shapes: B batch, H heads, Tq queries, Tk keys, D head size.
"""

import torch

_RANDOM_RANGE = 2**31


def _keep_mask(shape, p: float, device) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.int32, device=device).random_() >= round(p * _RANDOM_RANGE)


def _reduce_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum `grad` over the dimensions a broadcast `shape` expanded."""
    dims = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if s == 1 and g != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


class _AttentionWithDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, scaling, p):
        scores = torch.matmul(query, key.transpose(-1, -2))  # (B, H, Tq, Tk)
        if scaling != 1.0:
            scores.mul_(scaling)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
            else:
                scores.add_(mask)
        probs = torch.softmax(scores, dim=-1)
        del scores
        keep = _keep_mask(probs.shape, p, probs.device)  # (B, H, Tq, Tk) bool
        scale = 1.0 / (1.0 - p)
        # The 1 / (1 - p) scale goes on the (B, H, Tq, D) output, not on the (B, H, Tq, Tk) probabilities.
        out = torch.matmul(torch.where(keep, probs, 0.0), value).mul_(scale)  # (B, H, Tq, D)
        ctx.save_for_backward(query, key, value, probs, keep, out)
        ctx.scaling, ctx.scale = scaling, scale
        ctx.mask_shape = None if mask is None or mask.dtype == torch.bool else mask.shape
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, probs, keep, out = ctx.saved_tensors
        scaled_grad = grad_out * ctx.scale  # (B, H, Tq, D): the dropout scale, applied on the small side
        grad_value = torch.matmul(torch.where(keep, probs, 0.0).transpose(-1, -2), scaled_grad)
        grad = torch.matmul(scaled_grad, value.transpose(-1, -2))  # d (kept probs), (B, H, Tq, Tk)
        grad = torch.where(keep, grad, 0.0)  # d probs
        # softmax backward in place: d scores = probs * (d probs - sum_k(d probs * probs)); that row sum equals
        # sum_d(grad_out * out) (out = kept probs @ v * scale), a (B, H, Tq, D) product instead of a (.., Tk) one.
        row = (grad_out * out).sum(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        grad.sub_(row).mul_(probs)
        grad_mask = None
        if ctx.mask_shape is not None and ctx.needs_input_grad[3]:
            grad_mask = _reduce_to(grad, ctx.mask_shape)
        if ctx.scaling != 1.0:
            grad = grad.mul(ctx.scaling)  # out of place: grad_mask may be this very tensor
        grad_query = torch.matmul(grad, key) if ctx.needs_input_grad[0] else None
        grad_key = torch.matmul(grad.transpose(-1, -2), query) if ctx.needs_input_grad[1] else None
        return grad_query, grad_key, grad_value, grad_mask, None, None


def attention_with_dropout(query, key, value, mask=None, scaling: float = 1.0, p: float = 0.0):
    """softmax(q k^T * scaling + mask) with dropout p, times v: (B, H, Tq, D) -> (B, Tq, H, D).

    For training on CPU with 0 < p < 1 (the other cases are the ordinary kernels' job); fp32 inputs.
    Under `torch.compile` the same math runs as plain ops (dynamo cannot trace `random_()`; inductor
    fuses the dropout itself)."""
    if torch.compiler.is_compiling():
        scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, H, Tq, Tk)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool \
                else scores + mask
        probs = torch.nn.functional.dropout(torch.softmax(scores, dim=-1), p, training=True)
        return torch.matmul(probs, value).transpose(1, 2).contiguous()  # (B, Tq, H, D)
    out = _AttentionWithDropout.apply(query, key, value, mask, scaling, p)
    return out.transpose(1, 2).contiguous()  # (B, Tq, H, D)


class _ReluDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p):
        scale = 1.0 / (1.0 - p)
        out = torch.where(_keep_mask(x.shape, p, x.device), x.clamp(min=0), 0.0).mul_(scale)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, grad, 0.0).mul_(ctx.scale), None


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """dropout(relu(x), p), keeping only the output for backward (same values and gradients)."""
    if not training or p == 0.0:
        return torch.relu(x)
    if torch.compiler.is_compiling():  # dynamo cannot trace `random_()`; inductor fuses these two itself
        return torch.nn.functional.dropout(torch.relu(x), p, training=True)
    return _ReluDropout.apply(x, p)
