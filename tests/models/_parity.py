"""What the parity tests share: task inputs on a padded batch, and the tensors of an output / the
gradients of a model by name, to compare ours with the reference entry by entry."""

import torch


def with_task_labels(inputs, task, seed=0, pair_label=None):
    """`inputs` (input_ids, attention_mask, ... of shape (B, T), padded) plus what `task` needs, drawn
    from a generator seeded with `seed`:
    - masked-lm / pretraining: labels on ~30% of the real tokens (always the first), -100 elsewhere; for
      pretraining also `pair_label` (NSP or SOP), one of {0, 1} per row;
    - causal-lm: labels = the ids, -100 at padding;
    - sequence-classification: one of 3 classes per row; token-classification: 3 classes, -100 at padding;
    - question-answering: starts in [0, 4), ends (5, 6, 30): the last is out of range, so ignored;
    - multiple-choice: each row paired with itself rolled by one token, (B, K=2, T), label in {0, 1}."""
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
        inputs = {k: torch.stack([v, v.roll(1, dims=1)], dim=1) for k, v in inputs.items()}  # (B, K=2, T)
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
