"""Checks run on model inputs before any computation.

A bad id or a mask of the wrong shape otherwise surfaces as an opaque index error inside an
embedding (or, worse, as silently wrong broadcasting), far from the line that caused it.
"""

import torch


def check_encoder_inputs(
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    *,
    vocab_size: int,
    type_vocab_size: int | None,
    max_positions: int | None,
) -> tuple[int, int]:
    """Validate the usual encoder inputs; returns (batch, seq_len)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of `input_ids` or `inputs_embeds`.")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(f"`input_ids` must have shape (batch, seq_len), got {tuple(input_ids.shape)}.")
        if input_ids.dtype.is_floating_point:
            raise ValueError(f"`input_ids` must hold integer token ids, got dtype {input_ids.dtype}.")
        batch, seq_len = input_ids.shape
        if input_ids.numel() and not torch.compiler.is_compiling():
            low, high = int(input_ids.min()), int(input_ids.max())
            if low < 0 or high >= vocab_size:
                bad = low if low < 0 else high
                raise ValueError(
                    f"`input_ids` contains id {bad}, outside the vocabulary [0, {vocab_size}). The tokenizer and "
                    f"the model disagree: use the model's own tokenizer or resize the embeddings with "
                    f"`model.resize_token_embeddings(len(tokenizer))`."
                )
    else:
        if inputs_embeds.dim() != 3:
            raise ValueError(
                f"`inputs_embeds` must have shape (batch, seq_len, hidden), got {tuple(inputs_embeds.shape)}."
            )
        batch, seq_len = inputs_embeds.shape[:2]
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                         ("position_ids", position_ids)):
        if tensor is not None and tuple(tensor.shape) != (batch, seq_len):
            if name == "position_ids" and tuple(tensor.shape) == (1, seq_len):
                continue
            raise ValueError(
                f"`{name}` has shape {tuple(tensor.shape)} but the inputs have shape ({batch}, {seq_len}); "
                f"it must have one entry per token."
            )
    if max_positions is not None and seq_len > max_positions:
        raise ValueError(
            f"Sequence length {seq_len} exceeds `max_position_embeddings`={max_positions}; truncate the inputs "
            f"(e.g. tokenizer(..., truncation=True, max_length={max_positions}))."
        )
    if token_type_ids is not None and type_vocab_size is not None and token_type_ids.numel():
        if not torch.compiler.is_compiling():
            low, high = int(token_type_ids.min()), int(token_type_ids.max())
            if low < 0 or high >= type_vocab_size:
                raise ValueError(
                    f"`token_type_ids` must be in [0, {type_vocab_size}) for this model "
                    f"(type_vocab_size={type_vocab_size}), got values in [{low}, {high}]."
                )
    return batch, seq_len
