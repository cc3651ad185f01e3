"""Checks run on model inputs before any computation.

A bad id or a mask of the wrong shape otherwise surfaces as an opaque index error inside an
embedding (or, worse, as silently wrong broadcasting), far from the line that caused it.

Type checks come first: inputs must be torch tensors (a numpy array or a list gets a TypeError saying
to pass `return_tensors="pt"`), and ids (`input_ids`, `token_type_ids`, `position_ids`) must have a dtype
embedding lookups take, torch.long or torch.int32 (uint8, bool or float ids get a TypeError saying to
cast them). Shape checks are plain Python on static shapes. Value checks (ids inside the vocabulary,
positions inside the table, 2-D attention masks holding only 0 and 1) need the data: in eager mode they
read the tensor once and raise a ValueError naming the offending value; under `torch.compile` they
become `torch._assert_async` ops, which compile without graph breaks (no `.item()` on the hot path) and
raise a RuntimeError with the same advice. Compiled kernels run in an order of inductor's choosing, so
an out-of-range id may instead be stopped first by inductor's own bounds check of the embedding lookup
(a RuntimeError "index out of bounds"): bad values never pass silently, but the detailed message is
only guaranteed without compilation.
"""

import torch

# Index dtypes `nn.Embedding` takes (and every gather of ours: unpadding, pooling, relative positions).
ID_DTYPES = (torch.long, torch.int32)


def check_tensor(name: str, value) -> None:
    """TypeError unless `value` is None or a torch tensor (numpy arrays and lists are not)."""
    if value is not None and not isinstance(value, torch.Tensor):
        kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
        raise TypeError(
            f"`{name}` must be a torch.Tensor, got a {kind}. Pass PyTorch tensors: tokenize with "
            f"`return_tensors=\"pt\"`, or convert with `torch.as_tensor(...)`."
        )


def check_id_dtype(name: str, tensor: torch.Tensor | None) -> None:
    """TypeError unless `tensor` (ids that index an embedding table) is torch.long or torch.int32."""
    check_tensor(name, tensor)
    if tensor is not None and tensor.dtype not in ID_DTYPES:
        raise TypeError(
            f"`{name}` has dtype {tensor.dtype}, but ids index embedding tables, which take torch.long (or "
            f"torch.int32): cast them with `{name}.long()`."
        )


def check_attention_mask(name: str, mask: torch.Tensor | None) -> None:
    """A 2-D (batch, seq_len) padding mask holds 1 for tokens to attend to and 0 for padding: bool, any
    integer dtype, or float 0.0 / 1.0 (transformers' convention). Other values (2, -1, 0.5) raise a
    ValueError; compiled, an asynchronous assert (see the module docstring). Shapes are checked by the
    callers, which know the expected one; 4-D masks (bool, or additive float: `check_4d_mask`) are not value-checked."""
    check_tensor(name, mask)
    if mask is None or mask.dim() != 2 or mask.dtype == torch.bool or not mask.numel():
        return
    ok = (mask == 0) | (mask == 1)  # (B, T)
    advice = (f"`{name}` must hold 1 for real tokens and 0 for padding (bool, integer or float 0/1), as the "
              f"tokenizer returns it; build one as `(ids != pad_token_id).long()`.")
    if torch.compiler.is_compiling():
        torch._assert_async(ok.all(), f"`{name}` has values other than 0 and 1. {advice}")
        return
    if not bool(ok.all()):
        bad = mask[~ok][0].item()
        raise ValueError(f"`{name}` contains {bad!r}. {advice}")


def check_4d_mask(attention_mask, batch: int, q_len: int, k_len: int) -> None:
    """A ready-made mask must be (B or 1, 1, T, S), as transformers takes it: bool (True = may attend), an additive
    float bias (0 = attend, a large negative value = hidden) or integer 0/1 (`layers.masks.ready_mask` reads
    each as the kernels take it)."""
    shape = tuple(attention_mask.shape)
    if attention_mask.dim() != 4 or shape[0] not in (1, batch) or shape[1] != 1 or shape[2:] != (q_len, k_len):
        raise ValueError(f"A 4-D `attention_mask` must have shape ({batch}, 1, {q_len}, {k_len}) (bool: True = may "
                         f"attend; or an additive float mask: 0 = attend), got {shape}.")


def check_value_range(name: str, tensor: torch.Tensor, low: int, high: int, advice: str,
                      what: str = "the valid range") -> None:
    """Raise unless every value of `tensor` lies in [low, high) (`what` names that range)."""
    if tensor is None or not tensor.numel():
        return
    if torch.compiler.is_compiling():
        torch._assert_async(((tensor >= low) & (tensor < high)).all(),
                            f"`{name}` has values outside {what} [{low}, {high}). {advice}")
        return
    smallest, largest = int(tensor.min()), int(tensor.max())
    if smallest < low or largest >= high:
        bad = smallest if smallest < low else largest
        raise ValueError(f"`{name}` contains {bad}, outside {what} [{low}, {high}). {advice}")


def check_condition(ok: torch.Tensor, message: str) -> None:
    """Raise a ValueError with `message` unless every element of the bool tensor `ok` is true; compiled, an
    asynchronous assert with the same message (a RuntimeError), so the graph has no break."""
    if torch.compiler.is_compiling():
        torch._assert_async(ok.all(), message)
    elif not bool(ok.all()):
        raise ValueError(message)


def check_labels_shape(name: str, labels: torch.Tensor | None, expected: tuple | None) -> None:
    """Token-level labels must have exactly the inputs' (B, T) shape."""
    check_tensor(name, labels)
    if labels is None or expected is None:
        return
    if tuple(labels.shape) != tuple(expected):
        raise ValueError(
            f"`{name}` has shape {tuple(labels.shape)} but the inputs have shape {tuple(expected)}; token-level "
            f"labels need one entry per input token (-100 where there is nothing to predict)."
        )


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
    position_table_size: int | None = None,
    ids_name: str = "input_ids",
) -> tuple[int, int]:
    """Validate the usual encoder inputs; returns (batch, seq_len).

    `max_positions` is the longest sequence the model takes without explicit `position_ids` (for
    RoBERTa, the table size minus its `pad_token_id + 1` offset); `position_table_size` bounds explicit
    `position_ids` (default: `max_positions`). `ids_name` names `input_ids` in errors (a decoder's
    `decoder_input_ids`).
    """
    embeds_name = ids_name.replace("input_ids", "inputs_embeds")
    check_tensor(embeds_name, inputs_embeds)
    for name, ids in ((ids_name, input_ids), ("token_type_ids", token_type_ids), ("position_ids", position_ids)):
        check_id_dtype(name, ids)
    check_tensor("attention_mask", attention_mask)
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of `{ids_name}` or `{embeds_name}`.")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(f"`{ids_name}` must have shape (batch, seq_len), got {tuple(input_ids.shape)}.")
        batch, seq_len = input_ids.shape
    else:
        if inputs_embeds.dim() != 3:
            raise ValueError(
                f"`{embeds_name}` must have shape (batch, seq_len, hidden), got {tuple(inputs_embeds.shape)}."
            )
        batch, seq_len = inputs_embeds.shape[:2]
    if batch == 0 or seq_len == 0:
        raise ValueError(
            f"The inputs are empty (batch, seq_len) = ({batch}, {seq_len}); every batch needs at least one "
            f"sequence of at least one token. Drop empty examples before batching."
        )
    if attention_mask is not None and attention_mask.dim() == 4:  # a ready-made mask: who sees whom
        check_4d_mask(attention_mask, batch, seq_len, seq_len)
        attention_mask = None
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                         ("position_ids", position_ids)):
        if tensor is not None and tuple(tensor.shape) != (batch, seq_len):
            if name == "position_ids" and tuple(tensor.shape) == (1, seq_len):
                continue
            raise ValueError(
                f"`{name}` has shape {tuple(tensor.shape)} but the inputs have shape ({batch}, {seq_len}); "
                f"it must have one entry per token."
            )
    check_attention_mask("attention_mask", attention_mask)
    if max_positions is not None and position_ids is None and seq_len > max_positions:
        raise ValueError(
            f"Sequence length {seq_len} exceeds the {max_positions} positions this model has; truncate the inputs "
            f"(e.g. tokenizer(..., truncation=True, max_length={max_positions}))."
        )
    if input_ids is not None:
        check_value_range(
            ids_name, input_ids, 0, vocab_size,
            "The tokenizer and the model disagree: use the model's own tokenizer or resize the embeddings "
            "with `model.resize_token_embeddings(len(tokenizer))`.",
            what="the vocabulary",
        )
    if token_type_ids is not None and type_vocab_size is not None:
        check_value_range(
            "token_type_ids", token_type_ids, 0, type_vocab_size,
            f"Use token types below `type_vocab_size`={type_vocab_size}.",
            what="the token types",
        )
    table = position_table_size if position_table_size is not None else max_positions
    if position_ids is not None and table is not None:
        check_value_range(
            "position_ids", position_ids, 0, table,
            f"Shorten the inputs or renumber the positions (`max_position_embeddings`={table}).",
            what="the position table",
        )
    return batch, seq_len
