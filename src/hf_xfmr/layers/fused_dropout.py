"""Dropout fused with the operation before it, so autograd keeps one activation instead of three.

Training with dropout on CPU, plain autograd keeps for `softmax -> dropout -> matmul(v)` the
probabilities (softmax backward), the keep mask (dropout backward) and the dropped probabilities
(matmul backward), and runs a separate pass for each step. `attention_with_dropout` keeps the
probabilities and the dropped probabilities only (the float mask never outlives the forward), and its
backward is two fused passes over (B, H, Tq, Tk): d scores = dropped * d dropped - probs * rowsum.
Likewise `relu_dropout(x, p)` keeps only its output: ReLU's and dropout's gradients are both "where the
output is non-zero", so neither the pre-activation nor the mask is needed.

The keep masks come from `layers.dropout.keep_mask` (1 / (1 - p) where kept, 0 where dropped; the keep
probability exact to 2^-31), the same distribution as `torch.nn.functional.dropout`'s. Attention masks
are additive float biases (finfo.min where hidden; their gradient is returned when they require one,
e.g. T5's relative position bias) or bool (True = attend). Every query row must see at least one key.

Shapes: B batch, H heads, Tq queries, Tk keys, D head size.
"""

import torch

from .dropout import keep_mask


def _reduce_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """Sum `grad` over the dimensions a broadcast `shape` expanded."""
    dims = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if s == 1 and g != 1)
    return grad.sum(dim=dims, keepdim=True) if dims else grad


class _AttentionWithDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, scaling, p):
        # The scaling goes on the (B, H, Tq, D) queries, not on the (B, H, Tq, Tk) scores: a pass over D, not Tk.
        scaled = query * scaling if scaling != 1.0 else query  # (B, H, Tq, D)
        scores = torch.matmul(scaled, key.transpose(-1, -2))  # (B, H, Tq, Tk)
        if mask is not None:
            if mask.dtype == torch.bool:
                scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
            else:
                scores.add_(mask)
        probs = torch.softmax(scores, dim=-1, out=scores)  # in place: no fresh (B, H, Tq, Tk) pages to fault in
        dropped = keep_mask(probs.shape, p, probs.device).mul_(probs)  # (B, H, Tq, Tk): probs / (1 - p) or 0
        out = torch.matmul(dropped, value)  # (B, H, Tq, D)
        ctx.save_for_backward(scaled, key, value, probs, dropped, out)
        ctx.scaling = scaling
        ctx.mask_shape = None if mask is None or mask.dtype == torch.bool else mask.shape
        return out

    @staticmethod
    def backward(ctx, grad_out):
        scaled, key, value, probs, dropped, out = ctx.saved_tensors
        grad_value = torch.matmul(dropped.transpose(-1, -2), grad_out)  # (B, H, Tk, D)
        grad = torch.matmul(grad_out, value.transpose(-1, -2))  # d dropped, (B, H, Tq, Tk)
        # With dropped = probs * mask: d probs = mask * d dropped, and the softmax backward
        # d scores = probs * (d probs - sum_k(d probs * probs)) = dropped * d dropped - probs * row, where
        # row = sum_k(d dropped * dropped) = sum_d(grad_out * out): a (B, H, Tq, D) product, not a (.., Tk) one.
        row = (grad_out * out).sum(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        grad.mul_(dropped).addcmul_(probs, row, value=-1.0)
        grad_mask = None
        if ctx.mask_shape is not None and ctx.needs_input_grad[3]:
            grad_mask = _reduce_to(grad, ctx.mask_shape)
        # d scores -> the scaled queries' and the keys' gradients; the scaling on the (B, H, Tq, D) product.
        grad_query = torch.matmul(grad, key) if ctx.needs_input_grad[0] else None  # (B, H, Tq, D)
        if grad_query is not None and ctx.scaling != 1.0:
            grad_query.mul_(ctx.scaling)
        grad_key = torch.matmul(grad.transpose(-1, -2), scaled) if ctx.needs_input_grad[1] else None
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
        mask = keep_mask(x.shape, p, x.device)
        mask = mask if x.dtype == torch.float32 else mask.to(x.dtype)
        out = mask.mul_(x).clamp_(min=0)  # relu(x) * mask = relu(x * mask), as mask >= 0
        ctx.save_for_backward(out)
        ctx.scale = 1.0 / (1.0 - p)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad, out, 0.0).mul_(ctx.scale), None  # grad where out > 0


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """dropout(relu(x), p), keeping only the output for backward (same values and gradients)."""
    if not training or p == 0.0:
        return torch.relu(x)
    if torch.compiler.is_compiling():  # dynamo cannot trace `random_()`; inductor fuses these two itself
        return torch.nn.functional.dropout(torch.relu(x), p, training=True)
    return _ReluDropout.apply(x, p)
