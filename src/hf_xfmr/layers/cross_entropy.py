"""Cross-entropy of a linear vocabulary projection without materialising the (N, V) logits.

A language model's training loss is `CE(hidden @ W^T + b, labels)`. Computed naively, the logits,
their log-softmax and both of their gradients are each (N, V) tensors: with N = 8 x 512 tokens and
V = 32000 that is 0.5 GB apiece in fp32, more than the whole encoder's activations. Here the rows are
processed in chunks; for each chunk the logits are formed, reduced to the loss, and turned straight
into the gradient of the logits (softmax - one_hot), which is immediately multiplied back into the
gradients of `hidden`, `W` and `b`. Only a (chunk, V) block is alive at a time, and the matmul count
is the same as the naive forward + backward (three N x C x V products), so it costs no extra time.

Because the gradients are formed during the forward, `backward` only scales them by the incoming
gradient (the loss is a scalar). Outside autograd (no_grad / eval) the gradient work is skipped, and rows
whose label is `ignore_index` (padding, prompts, each sequence's last token) are dropped before any product.
"""

import torch


def _chunk_rows(num_rows: int, vocab: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return max(1, chunk_size)
    # ~64 MB of fp32 logits per chunk (524 rows of a 32,000-word vocabulary): the (rows, C) x (C, V) products run
    # at 90-95% of the rate of one product over all rows (2 CPU threads), against 65-80% at 262 rows (32 MB).
    return max(1, min(num_rows, (16 * 1024 * 1024) // max(1, vocab)))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, ignore_index, chunk_size):
        # hidden (N, C), weight (V, C), bias (V,) or None, labels (N,)
        num_rows, vocab = hidden.shape[0], weight.shape[0]
        need_grad = any(ctx.needs_input_grad[:3])
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.zeros_like(hidden, dtype=torch.float32) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        grad_bias = (torch.zeros_like(bias, dtype=torch.float32)
                     if bias is not None and ctx.needs_input_grad[2] else None)
        step = _chunk_rows(num_rows, vocab, chunk_size)
        for start in range(0, num_rows, step):
            h = hidden[start:start + step]  # (n, C)
            target = labels[start:start + step]  # (n,)
            logits = torch.nn.functional.linear(h, weight)  # (n, V); autocast casts `weight` once per forward
            if bias is not None:
                logits = logits + bias
            logits = logits.float()  # a fresh (n, V) tensor: the in-place steps below are safe
            valid = target != ignore_index  # (n,)
            safe_target = target.masked_fill(~valid, 0).unsqueeze(1)  # (n, 1)
            picked = logits.gather(1, safe_target).squeeze(1)  # (n,)
            # log-sum-exp with exp computed once: its result, exp(logits - max), is the softmax's numerator
            row_max = logits.amax(dim=-1, keepdim=True)  # (n, 1)
            exp_shifted = logits.sub_(row_max).exp_()  # (n, V), in place
            sum_exp = exp_shifted.sum(dim=-1, keepdim=True)  # (n, 1)
            lse = (sum_exp.log() + row_max).squeeze(1)  # (n,)
            total += ((lse - picked) * valid).sum()
            if need_grad:
                # d loss / d logits = softmax - one_hot, zero on ignored rows
                grad_logits = exp_shifted.div_(sum_exp)  # (n, V) softmax, in place
                grad_logits.scatter_add_(1, safe_target, torch.full_like(picked, -1.0).unsqueeze(1))
                grad_logits.mul_(valid.unsqueeze(1).to(grad_logits.dtype))
                g = grad_logits.to(h.dtype) if h.dtype != torch.float32 else grad_logits
                fp32 = g.dtype == torch.float32 and weight.dtype == torch.float32
                if grad_hidden is not None:
                    if fp32:  # written straight into its rows: no (n, C) temporary and copy
                        torch.matmul(g, weight, out=grad_hidden[start:start + step])
                    else:
                        grad_hidden[start:start + step] = torch.matmul(g, weight.to(g.dtype)).float()  # (n, C)
                if grad_weight is not None:
                    if fp32:  # accumulated in place by the matmul: no (V, C) temporary and extra pass per chunk
                        grad_weight.addmm_(g.t(), h)
                    else:
                        grad_weight += torch.matmul(g.t(), h.to(g.dtype)).float()  # (V, C)
                if grad_bias is not None:
                    grad_bias += grad_logits.sum(dim=0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        return total

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        dtypes = ctx.dtypes
        grads = []
        for grad, dtype in zip((grad_hidden, grad_weight, grad_bias), dtypes):
            grads.append(None if grad is None else (grad * grad_total).to(dtype))
        return (*grads, None, None, None)


def linear_cross_entropy(hidden, weight, bias=None, labels=None, *, ignore_index: int = -100,
                         chunk_size: int | None = None):
    """Summed cross-entropy of `hidden @ weight.T + bias` against `labels`, in chunks of rows.

    hidden (..., C), weight (V, C), bias (V,) or None, labels (...) with `ignore_index` for rows that
    do not count. Returns the float32 SUM over counted rows (divide by their number, or by a global
    token count, for the mean). Gradients flow to hidden, weight and bias exactly as through
    `F.cross_entropy(F.linear(hidden, weight, bias).float(), labels, reduction="sum")`, which is what runs under
    torch.compile (a loop over chunks would make the graph depend on the number of rows).
    """
    hidden = hidden.reshape(-1, hidden.shape[-1])  # (N, C)
    labels = labels.reshape(-1)  # (N,)
    if hidden.shape[0] != labels.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but labels has {labels.shape[0]} entries")
    if torch.compiler.is_compiling():  # the chunk loop would specialize the graph on N: dense, fused by the compiler
        logits = torch.nn.functional.linear(hidden, weight, bias).float()  # (N, V)
        return torch.nn.functional.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="sum")
    hidden, labels = _counted_rows(hidden, labels, ignore_index)
    return _LinearCrossEntropy.apply(hidden, weight, bias, labels, ignore_index, chunk_size)


def _counted_rows(hidden, labels, ignore_index: int):
    """Only the rows whose label counts: padding, prompts under a completion-only loss and each sequence's last
    token cost no vocabulary projection (their gradient is zero anyway; index_select's backward puts it back).
    Kept whole under torch.compile, where the data-dependent row count would break the graph."""
    if torch.compiler.is_compiling():
        return hidden, labels
    counted = labels != ignore_index  # (N,)
    if bool(counted.all()):
        return hidden, labels
    rows = counted.nonzero().squeeze(1)  # (M,)
    return hidden.index_select(0, rows), labels.index_select(0, rows)
