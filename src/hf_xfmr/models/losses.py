"""Losses of the task heads, shared by every architecture.

All follow transformers' conventions: label -100 is ignored, logits are upcast to float32, and
`problem_type` (regression / single_label_classification / multi_label_classification) is inferred
when the config leaves it unset. Unlike transformers we never write the inferred type back into the config.
"""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def token_loss(logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """Mean cross-entropy over positions whose label is not -100. logits (..., V), labels (...).

    The sum is divided by the number of labelled positions, or by `num_items_in_batch` when Trainer
    passes it (the count over all gradient-accumulation micro-batches). A batch with no labelled
    position gives a loss of 0 with a zero gradient instead of NaN (0 / 0), so an empty batch cannot
    poison the optimizer state.
    """
    labels = labels.reshape(-1)
    total = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels, ignore_index=IGNORE_INDEX,
                            reduction="sum")
    return mean_over_items(total, labels, num_items_in_batch)


def mean_over_items(total: torch.Tensor, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """A summed token loss divided by the number of labels != -100, or by `num_items_in_batch`; 0 / 0 -> 0."""
    if num_items_in_batch is None:
        count = (labels != IGNORE_INDEX).sum()
    else:
        count = torch.as_tensor(num_items_in_batch, device=total.device)
    return total / count.clamp(min=1).to(total.dtype)


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor, config) -> torch.Tensor:
    """logits (B, num_labels); labels (B,) class ids, (B,) or (B, num_labels) floats for regression,
    or (B, num_labels) multi-hot floats."""
    num_labels = logits.shape[-1]
    problem_type = config.problem_type
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type not in ("regression", "single_label_classification", "multi_label_classification"):
        raise ValueError(
            f"Unknown `problem_type`={problem_type!r}; use 'regression', 'single_label_classification' or "
            f"'multi_label_classification'."
        )
    _check_sequence_labels(problem_type, logits, labels)
    if problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(-1))
        return F.mse_loss(logits.float(), labels.float())
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.float().view(-1, num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def _check_sequence_labels(problem_type: str, logits: torch.Tensor, labels: torch.Tensor) -> None:
    """Labels of the shape the problem type needs, else a ValueError saying which shape and why."""
    batch, num_labels = logits.shape
    got = tuple(labels.shape)
    if problem_type == "single_label_classification" or (problem_type == "regression" and num_labels == 1):
        if labels.numel() != batch or labels.dim() > 2:
            what = "class id" if problem_type == "single_label_classification" else "target value"
            raise ValueError(
                f"`labels` has shape {got}, but {problem_type.replace('_', ' ')} takes one {what} per sequence: "
                f"({batch},). For several labels per sequence use multi-label classification (float multi-hot "
                f"labels of shape ({batch}, num_labels)) with `num_labels` set to their count."
            )
        if problem_type == "single_label_classification" and labels.dtype.is_floating_point:
            raise ValueError(f"Single-label classification takes integer class ids, got `labels` of dtype "
                             f"{labels.dtype}.")
    elif got != (batch, num_labels):
        kind = "multi-hot floats" if problem_type == "multi_label_classification" else "target values"
        raise ValueError(
            f"`labels` has shape {got}, but {problem_type.replace('_', ' ')} with num_labels={num_labels} takes "
            f"({batch}, {num_labels}) {kind}. (Float labels with num_labels > 1 mean multi-label classification: "
            f"for class ids pass integer labels.)"
        )


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor) -> torch.Tensor:
    """Extractive QA loss: mean of start and end cross-entropies. Positions outside the sequence
    (e.g. an answer truncated away) are clamped to T and ignored; a batch where every answer was
    truncated away gives 0, not NaN."""
    seq_len = start_logits.shape[1]
    start = start_positions.reshape(-1).clamp(0, seq_len)
    end = end_positions.reshape(-1).clamp(0, seq_len)
    start_loss = _mean_cross_entropy(start_logits.float(), start, ignore_index=seq_len)
    end_loss = _mean_cross_entropy(end_logits.float(), end, ignore_index=seq_len)
    return (start_loss + end_loss) / 2


def _mean_cross_entropy(logits, target, ignore_index):
    """F.cross_entropy's mean over non-ignored targets, but 0 (not NaN) when every target is ignored."""
    total = F.cross_entropy(logits, target, ignore_index=ignore_index, reduction="sum")
    return total / (target != ignore_index).sum().clamp(min=1).to(total.dtype)
