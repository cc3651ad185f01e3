"""Helpers shared by the collators: fast padding, special-token tables, seeded generators.

Everything here works on whole batches (torch or numpy ops); the only Python loops run once per
example (to read its features), never once per token.
"""

import struct
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..layers.masks import cu_seqlens_from_starts, sequence_starts_from_positions

IGNORE_INDEX = -100


def require_token(tokenizer, name: str, objective: str) -> int:
    """Return `tokenizer.<name>_id`, or raise a ValueError saying how to add the token."""
    token_id = getattr(tokenizer, f"{name}_id", None)
    if token_id is None:
        raise ValueError(
            f"{objective} needs a {name} but the tokenizer {type(tokenizer).__name__} has none "
            f"(tokenizer.{name} is None). Add one, e.g. tokenizer.add_special_tokens({{'{name}': '...'}}) "
            f"and resize the model's embeddings, or train a matching tokenizer with "
            f"hf_xfmr.data.train_tokenizer(...)."
        )
    return int(token_id)


def special_ids_tensor(tokenizer) -> torch.Tensor:
    """All special token ids of `tokenizer` as a 1-D long tensor (for `torch.isin`)."""
    ids = set(int(i) for i in getattr(tokenizer, "all_special_ids", []) if i is not None)
    for name in ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id", "bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            ids.add(int(value))
    return torch.tensor(sorted(ids), dtype=torch.long)


@contextmanager
def intra_op_threads(n: int | None):
    """Run torch ops with `n` intra-op threads, restoring the setting afterwards (None: no change).

    Collation works on a few MB per batch: splitting each small op over threads costs more in
    synchronisation than it saves, and much more when the cores are busy with training.
    """
    previous = torch.get_num_threads()
    if n is None or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class SeededMixin:
    """Resolves the random generator of a collator, in the main process and in DataLoader workers.

    - `seed` (or `generator`) in the main process (`num_workers=0`): one private stream, continued
      from batch to batch and epoch to epoch; a given `generator` is used as is.
    - Inside a DataLoader worker the collator is a copy, and non-persistent workers (Trainer's
      default) are new copies every epoch: continuing the copied stream would repeat the previous
      epoch's masks in every worker. So each worker derives its own stream from the collator's seed
      (or the given generator's state) and torch's worker seed, `get_worker_info().seed`, which
      differs per worker and per epoch and comes from the DataLoader's `generator` (or the global
      RNG): the same collator seed and the same DataLoader seed reproduce the same batches.
      Persistent workers keep their stream across epochs.
    - With neither `seed` nor `generator`, torch's global RNG is used (`torch.manual_seed` reproduces
      batches; torch seeds it per worker from the worker seed).

    Collators that draw random numbers call `self._rng()` once per batch and pass the result to
    every `torch.rand*` call.
    """

    seed: int | None
    generator: torch.Generator | None

    def _rng(self) -> torch.Generator | None:
        if self.seed is None and self.generator is None:
            return None
        info = torch.utils.data.get_worker_info()
        stream = None if info is None else int(info.seed)  # which worker copy, which epoch
        if getattr(self, "_stream", "unset") != stream or getattr(self, "_private_rng", None) is None:
            self._private_rng = self._new_stream(stream)
            self._stream = stream
        return self._private_rng

    def _new_stream(self, worker_seed: int | None) -> torch.Generator:
        if worker_seed is None:  # main process
            if self.generator is not None:
                return self.generator
            return torch.Generator().manual_seed(int(self.seed))
        if self.generator is not None:  # its state as copied into this worker
            base = np.frombuffer(self.generator.get_state().numpy().tobytes(), dtype=np.uint32).tolist()
        else:
            base = [int(self.seed) & 0xFFFFFFFFFFFFFFFF]
        state = np.random.SeedSequence([*base, worker_seed & 0xFFFFFFFFFFFFFFFF]).generate_state(1, np.uint64)[0]
        return torch.Generator().manual_seed(int(state) >> 1)  # (63 bits: manual_seed takes a signed int64)


def numpy_rng(generator: torch.Generator | None) -> np.random.Generator:
    """A numpy generator seeded from torch's (`generator`, else the global RNG) with one draw per batch, so
    torch seeding (`SeededMixin`'s `seed=` / `generator=`, `torch.manual_seed`) governs numpy-sampled masks."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (), generator=generator)))


def _as_list(x) -> list:
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if hasattr(x, "tolist"):  # numpy
        return x.tolist()
    return list(x)


_NUMPY_INT = {torch.long: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
              torch.uint8: np.uint8, torch.bool: np.bool_}
_STRUCT_CODE = {np.dtype(np.int64): "q", np.dtype(np.int32): "i", np.dtype(np.int16): "h", np.dtype(np.int8): "b",
                np.dtype(np.uint8): "B"}


def _list_rows_to_array(rows: list, B: int, L: int, dtype) -> np.ndarray:
    """(B, L) array from B equal-length lists of ints: `struct.pack_into` straight into the array's
    buffer (about 2x faster than `np.array` on Python ints); anything else goes through `np.array`."""
    code = _STRUCT_CODE.get(np.dtype(dtype))
    if code is not None:
        out = np.empty((B, L), dtype=dtype)
        try:
            struct.pack_into(f"{B * L}{code}", out, 0, *chain.from_iterable(rows))
            return out
        except (struct.error, TypeError):
            pass  # floats, None, nested sequences, out-of-range values: numpy decides
    return np.array(rows, dtype=dtype)


def pad_ragged_numpy(
    rows: Sequence[Sequence[int]],
    pad_value: int,
    *,
    length: int | None = None,
    left: bool = False,
    pad_to_multiple_of: int | None = None,
    dtype=np.int64,
) -> tuple[np.ndarray, np.ndarray]:
    """Stack rows (lists, numpy arrays or 1-D tensors) into a (B, L) numpy array + (B, L) bool real mask.

    Fast paths: rows of one length are converted by a single call (`struct.pack_into` for int
    lists, `np.stack` / `torch.stack` for arrays / tensors; several times faster than
    `torch.tensor` on lists); ragged rows are copied row by row into a padded buffer.
    """
    if len(rows) == 0:
        raise ValueError("Cannot collate an empty batch: the DataLoader passed no examples.")
    if all(isinstance(r, torch.Tensor) for r in rows):
        rows = [r.reshape(-1) for r in rows]
        kind = "tensor"
    elif all(isinstance(r, np.ndarray) for r in rows):
        rows = [r.reshape(-1) for r in rows]
        kind = "numpy"
    else:
        rows = [r if isinstance(r, (list, tuple)) else _as_list(r) for r in rows]
        kind = "list"
    lengths = [len(r) for r in rows]
    longest = max(lengths)
    max_len = longest if length is None else int(length)
    if length is not None and longest > length:
        raise ValueError(
            f"An example has {longest} tokens, more than the fixed length {length}: truncate the "
            "examples when tokenizing (truncation=True, max_length=...) or raise the length."
        )
    if pad_to_multiple_of:
        max_len = -(-max_len // pad_to_multiple_of) * pad_to_multiple_of
    B = len(rows)
    if min(lengths) == max_len:  # no padding at all: one conversion call
        if kind == "tensor":
            out = torch.stack(rows).numpy().astype(dtype, copy=False)
        elif kind == "numpy":
            out = np.stack(rows).astype(dtype, copy=False)
        else:
            out = _list_rows_to_array(rows, B, max_len, dtype)
        if out.ndim != 2:
            raise ValueError(f"Expected rows of integers, got an array of shape {out.shape}.")
        return out, np.ones((B, max_len), dtype=bool)
    out = np.full((B, max_len), pad_value, dtype=dtype)
    for b, r in enumerate(rows):  # one copy per example
        if len(r) == 0:
            continue
        if kind == "tensor":
            r = r.numpy()
        if left:
            out[b, max_len - len(r):] = r
        else:
            out[b, : len(r)] = r
    pos = np.arange(max_len)
    lens = np.array(lengths)
    if left:
        real = pos[None, :] >= (max_len - lens)[:, None]  # (B, L)
    else:
        real = pos[None, :] < lens[:, None]  # (B, L)
    return out, real


def pad_ragged(
    rows: Sequence[Sequence[int]],
    pad_value: int,
    *,
    length: int | None = None,
    left: bool = False,
    pad_to_multiple_of: int | None = None,
    dtype: torch.dtype = torch.long,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`pad_ragged_numpy` returning torch tensors: a (B, L) `dtype` tensor and a (B, L) bool mask of
    real positions. Only integer (and bool) dtypes: collators pad ids, masks and positions."""
    if dtype not in _NUMPY_INT:
        raise ValueError(f"pad_ragged pads integer rows; got dtype {dtype} (valid: {', '.join(map(str, _NUMPY_INT))}).")
    out, real = pad_ragged_numpy(rows, pad_value, length=length, left=left,
                                 pad_to_multiple_of=pad_to_multiple_of, dtype=_NUMPY_INT[dtype])
    return torch.from_numpy(out), torch.from_numpy(real)


def pad_word_ids(rows, length: int, left: bool) -> torch.Tensor:
    """Pad `word_ids` rows to a (B, length) long tensor; -1 for padding and for None (special tokens)."""
    try:
        out, _ = pad_ragged(rows, -1, length=length, left=left)
    except (TypeError, RuntimeError):
        rows = [[-1 if w is None else w for w in row] for row in rows]
        out, _ = pad_ragged(rows, -1, length=length, left=left)
    return out


def read_features(examples: Sequence[Any]) -> dict[str, list]:
    """Turn a list of examples (dicts / BatchEncodings, or bare id sequences) into columns.

    Every example of a batch must be of the same kind (all dicts, or all id sequences) and dicts must
    all have the same keys; every `input_ids` row needs at least one token. Anything else raises a
    ValueError naming the example, rather than a KeyError, a silently dropped column or a (B, 0) batch.
    """
    if len(examples) == 0:
        raise ValueError("Cannot collate an empty batch: the DataLoader passed no examples.")
    if isinstance(examples[0], Mapping):
        keys = set(examples[0].keys())
        for i, ex in enumerate(examples):
            if not isinstance(ex, Mapping):
                raise _mixed_kinds(i, ex, 0)
            if i and keys != set(ex.keys()):
                raise _different_keys(i, set(ex.keys()), keys)
        if "input_ids" not in keys:
            raise ValueError(
                f"Examples need an 'input_ids' field; got keys {sorted(keys)}. "
                "Tokenize the dataset first (dataset.map(lambda b: tokenizer(b['text']), batched=True))."
            )
        columns = {k: [ex[k] for ex in examples] for k in examples[0].keys()}
    else:
        columns = {"input_ids": list(examples)}
        for i, ex in enumerate(columns["input_ids"]):
            if isinstance(ex, Mapping):
                raise _mixed_kinds(i, ex, 0, first_is_dict=False)
    _check_id_rows(columns["input_ids"])
    return columns


def _mixed_kinds(i: int, ex, first: int, first_is_dict: bool = True) -> ValueError:
    kinds = ("a dict", f"a {type(ex).__name__}") if first_is_dict else ("an id sequence", "a dict")
    return ValueError(
        f"The batch mixes dicts and bare id sequences: example {first} is {kinds[0]}, example {i} is {kinds[1]}. "
        "Give every example the same form (e.g. all {'input_ids': [...], ...})."
    )


def _different_keys(i: int, got: set, expected: set) -> ValueError:
    parts = []
    if expected - got:
        parts.append(f"missing {sorted(expected - got)}")
    if got - expected:
        parts.append(f"extra {sorted(got - expected)}")
    return ValueError(
        f"Example {i} has keys {sorted(got)} but example 0 has {sorted(expected)}: {', '.join(parts)}. Every "
        "example of a batch needs the same fields: tokenize them all the same way, or drop the column "
        "(dataset.remove_columns([...]))."
    )


def _check_id_rows(rows: list) -> None:
    """Each row must be a non-empty 1-D sequence of ids (list, tuple, numpy array or tensor)."""
    empty = []
    for i, row in enumerate(rows):
        scalar = getattr(row, "ndim", 1) == 0
        if isinstance(row, (str, bytes)) or scalar or not hasattr(row, "__len__"):
            what = f"a 0-dimensional {type(row).__name__}" if scalar else type(row).__name__
            raise ValueError(
                f"input_ids of example {i} is not a sequence of token ids (got {what}: {str(row)[:40]!r}). Pass a "
                "batch (a list) of examples, each a list of ids or a dict with 'input_ids'; tokenize text first."
            )
        if len(row) == 0:
            empty.append(i)
    if empty:
        raise ValueError(
            f"Example(s) {empty} have no tokens (empty input_ids): nothing to train on. Filter out empty texts "
            "before batching, e.g. dataset.filter(lambda ex: len(ex['input_ids']) > 0)."
        )


def collate_extra(columns: dict[str, list], handled: set[str], real: torch.Tensor, left: bool) -> dict:
    """Pass through the remaining columns: scalars are stacked, sequences padded like input_ids."""
    out = {}
    for key, values in columns.items():
        if key in handled:
            continue
        first = values[0]
        if isinstance(first, (int, float, bool)) or (isinstance(first, torch.Tensor) and first.dim() == 0):
            out[key] = torch.tensor([int(v) if not isinstance(v, float) else v for v in values])
        elif isinstance(first, (list, tuple, torch.Tensor)) or hasattr(first, "tolist"):
            try:
                padded, _ = pad_ragged(values, 0, length=real.shape[1], left=left)
            except (TypeError, ValueError):
                continue  # not a per-token integer feature (e.g. offsets); drop it
            out[key] = padded
    return out


def cu_seqlens_from_lengths(lengths) -> tuple[torch.Tensor, int]:
    """Document lengths in batch order -> (cu_seqlens int32 [0, l1, l1 + l2, ..., N], max_seqlen)."""
    lengths = torch.as_tensor(lengths, dtype=torch.int32)  # (D,)
    return F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)), int(lengths.max())


def cu_seqlens_from_positions(position_ids: torch.Tensor, real: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Document boundaries of packed rows, flash-attention style.

    A document starts at the first real token of every row and wherever the position returns to that token's
    position (0, or RoBERTa's first position: `pack_documents(first_position=...)`); real tokens of the batch
    are taken in row-major order (as `input_ids[real]` flattens them). Returns (cu_seqlens int32 of shape
    (D + 1,), max_seqlen).
    """
    real = real.bool()
    cu = cu_seqlens_from_starts(sequence_starts_from_positions(position_ids, real), real)
    max_seqlen = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
    return cu, max_seqlen
