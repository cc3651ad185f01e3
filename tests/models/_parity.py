"""What the parity tests share: task inputs on a padded batch, the tensors of an output / the gradients
of a model by name, to compare ours with the reference entry by entry, and the comparison itself with
unpadding on (real positions only) or off (every position), and what the unpadding tests share: a pair
with unpadding switched, the sequence of modules a forward calls."""

import torch
from torch.testing import assert_close


def with_task_labels(inputs, task, seed=0, pair_label=None):
    """`inputs` (input_ids, attention_mask, ... of shape (B, T), padded) plus what `task` needs, drawn
    from a generator seeded with `seed`:
    - masked-lm / pretraining: labels on ~30% of the real tokens (always the first), -100 elsewhere; for
      pretraining also `pair_label` (NSP or SOP), one of {0, 1} per row;
    - causal-lm: labels = the ids, -100 at padding;
    - sequence-classification: one of 3 classes per row; token-classification: 3 classes, -100 at padding;
    - question-answering: starts in [0, 4), ends (5, 6, 30): the last is out of range, so ignored;
    - multiple-choice: each row paired with the next row (both right-padded), (B, K=2, T), label in {0, 1}."""
    g = torch.Generator().manual_seed(seed)
    inputs = dict(inputs)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    batch, seq_len = ids.shape
    if task in ("masked-lm", "pretraining"):
        chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
        chosen[0, 0] = True
        inputs["labels"] = torch.where(chosen, ids, -100)
        if task == "pretraining":
            inputs[pair_label] = torch.randint(0, 2, (batch,), generator=g)
    elif task == "causal-lm":
        inputs["labels"] = ids.masked_fill(mask == 0, -100)
    elif task == "sequence-classification":
        inputs["labels"] = torch.randint(0, 3, (batch,), generator=g)
    elif task == "token-classification":
        inputs["labels"] = torch.randint(0, 3, (batch, seq_len), generator=g).masked_fill(mask == 0, -100)
    elif task == "question-answering":
        inputs["start_positions"] = torch.randint(0, 4, (batch,), generator=g)
        inputs["end_positions"] = torch.tensor([5, 6, 30])[:batch]
    elif task == "multiple-choice":
        inputs = {k: torch.stack([v, v.roll(1, dims=0)], dim=1) for k, v in inputs.items()}  # (B, K=2, T)
        inputs["labels"] = torch.randint(0, 2, (batch,), generator=g)
    return inputs


def outputs_of(output):
    """The tensors an output carries, by name (tuples of hidden states / attentions flattened)."""
    named = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor):
            named[key] = value
        elif isinstance(value, tuple):
            named.update({f"{key}.{i}": v for i, v in enumerate(value)})
    return named


def grads_of(model):
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def real_positions(inputs):
    """(B, T) bool, True at real tokens ((B*K, T) for multiple-choice inputs (B, K, T))."""
    mask = inputs["attention_mask"]
    return mask.reshape(-1, mask.shape[-1]).bool()


def reference_qa_loss(ref_out, inputs):
    """The reference's span loss with padding positions excluded, as our QA heads compute it when they
    mask padding (ModernBERT always; the BERT family with `unpad_inputs`, the default)."""
    from hf_xfmr.models.losses import span_loss

    pad = ~real_positions(inputs)
    start, end = (logits.masked_fill(pad, torch.finfo(logits.dtype).min)
                  for logits in (ref_out.start_logits, ref_out.end_logits))
    return span_loss(start, end, inputs["start_positions"], inputs["end_positions"])


def masked_base_loss(output, keep):
    """A scalar from a base model's outputs that reads real positions only (and the pooler, if any)."""
    loss = (output.last_hidden_state * keep[..., None]).square().mean()
    pooled = getattr(output, "pooler_output", None)
    return loss if pooled is None else loss + pooled.sum()


def assert_outputs_match(ours, ref, keep, *, unpadded, atol, rtol, skip=(), unpadded_keys=None):
    """Every tensor of the reference's output `ref` against `ours`, entry by entry (`skip`: names left out).

    unpadded=False: everywhere. unpadded=True: tensors laid out per position (their first two dimensions
    are `keep`'s (B, T)) at real positions only, and at padding positions ours must hold what the README
    says: zeros in the hidden states (which also proves the unpadded path ran) and the dtype's minimum in
    masked start/end logits; the rest (pooled outputs, per-sequence logits) everywhere.
    `unpadded_keys` (a predicate on names): only those tensors are compared at real positions, the rest
    everywhere (an encoder-decoder unpads its encoder, not its decoder).
    """
    ref_named, our_named = outputs_of(ref), outputs_of(ours)
    assert set(ref_named) - set(skip) == set(our_named) - set(skip)
    for key in sorted(set(ref_named) - set(skip)):
        a, b = our_named[key], ref_named[key]
        per_position = a.dim() >= 2 and tuple(a.shape[:2]) == tuple(keep.shape)
        if unpadded and per_position and (unpadded_keys is None or unpadded_keys(key)):
            assert_close(a[keep], b[keep], atol=atol, rtol=rtol, msg=lambda m: f"{key} (real positions): {m}")
            if key in ("last_hidden_state", "encoder_last_hidden_state") or \
                    key.startswith(("hidden_states.", "encoder_hidden_states.")):
                assert not a[~keep].any(), f"{key}: padding positions must be zeros after unpadding"
            if key in ("start_logits", "end_logits"):
                assert (a[~keep] == torch.finfo(a.dtype).min).all(), f"{key}: padding must be masked"
        else:
            assert_close(a, b, atol=atol, rtol=rtol, msg=lambda m: f"{key}: {m}")


def is_encoder_output(key):
    """The outputs of an encoder-decoder that its encoder computes (the ones unpadding changes)."""
    return key == "encoder_last_hidden_state" or key.startswith(("encoder_hidden_states.", "encoder_attentions."))


def pair_with_unpadding(pair, unpad, *args, **kwargs):
    """`pair(*args, **kwargs)` (a (reference, ours) pair) with our model's `unpad_inputs` set (on by default)."""
    ref, ours = pair(*args, **kwargs)
    assert ours.config.unpad_inputs
    ours.config.unpad_inputs = unpad
    return ref, ours


def module_sequence(model, **inputs):
    """The names of the modules `model` calls, in order (what ZeRO-3's hooks see)."""
    calls = []
    hooks = [module.register_forward_pre_hook(lambda m, args, name=name: calls.append(name))
             for name, module in model.named_modules() if name]
    try:
        model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return calls
