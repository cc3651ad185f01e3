"""Pretraining batches: documents -> examples -> deterministic micro-batches.

Determinism is what makes `--resume` exact without replaying the data:

- the order of micro-batch `m` is a pure function of (seed, m): epoch `m // per_epoch` is a seeded
  permutation of the examples, and micro-batch `m` is its slice `m % per_epoch` (process `r` takes rows
  `r*B .. (r+1)*B` of the global batch). A resumed run starts at the first unconsumed `m` in O(1);
- the random masks of micro-batch `m` come from a generator seeded with (seed, m, process), not from a
  stream shared with the model, so prefetching and DataLoader workers cannot shift them.

Objectives with `layout="contiguous"` (XLNet's memory) get per-row streams instead: the examples,
in corpus order, are split into as many streams as the global batch has rows, and micro-batch `m` holds
segment `m % per_epoch` of every stream (never shuffled).

Streaming sources (`--streaming`) are read in chunks of documents; each chunk is turned into examples,
shuffled with a seed of its own and cut into global micro-batches. A resumed stream skips the
documents of the finished chunks and the micro-batches already taken from the current one.
"""

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from .objectives import Objective, ObjectiveSettings

BUILD_BATCH = 1000  # documents per example-building call
STREAM_CHUNK = 512  # documents per chunk of a streamed corpus


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64-style mixing), stable across runs and platforms."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


def split_documents(documents, eval_fraction: float, seed: int):
    """(train, held-out) document datasets; at least one document is held out when `eval_fraction` > 0."""
    n = len(documents)
    n_eval = round(eval_fraction * n)
    if eval_fraction > 0 and n_eval == 0 and n >= 2:
        n_eval = 1
    if n_eval == 0:
        return documents, None
    if n - n_eval < 1:
        raise ValueError(f"The corpus has {n} document(s): nothing is left for training after holding out "
                         f"{n_eval} for evaluation. Add documents, or pass --eval_fraction 0 or --eval_dataset.")
    split = documents.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return split["train"], split["test"]


def build_examples(objective: Objective, tokenizer, documents, settings: ObjectiveSettings, required: bool = True):
    """A `datasets.Dataset` of the objective's examples built from a dataset of documents (`text` column).

    When no example can be built: a ValueError, or None if not `required` (held-out documents)."""
    probe = objective.build_examples(tokenizer, documents[: min(len(documents), 64)]["text"], settings)
    if not probe:
        probe = objective.build_examples(tokenizer, documents["text"], settings) if len(documents) > 64 else []
    if not probe and not required:
        return None
    if not probe:
        raise ValueError(
            f"No {objective.name!r} training example could be built from the {len(documents)} document(s): they "
            "hold no text the tokenizer turns into tokens (or too little for the objective, e.g. sentence pairs "
            "need documents of two or more sentences). Check --dataset and --text_column.")
    columns = list(probe[0])

    def build(batch, indices):
        s = ObjectiveSettings(**{**settings.__dict__, "seed": mix_seed(settings.seed, indices[0] if indices else 0)})
        examples = objective.build_examples(tokenizer, batch["text"], s)
        return {k: [ex[k] for ex in examples] for k in columns}

    return documents.map(build, batched=True, batch_size=BUILD_BATCH, with_indices=True,
                         remove_columns=documents.column_names, desc=f"building {objective.name} examples")


@dataclass(frozen=True)
class BatchPlan:
    """Which examples make up micro-batch `m` on this process.

    num_examples: size of the example dataset; batch_size: examples per micro-batch and process;
    world_size / rank: the processes; layout: "shuffled" or "contiguous"; seed: the run seed.
    """

    num_examples: int
    batch_size: int
    world_size: int
    rank: int
    layout: str
    seed: int

    def __post_init__(self):
        rows = self.batch_size * self.world_size
        if self.num_examples < rows:
            raise ValueError(
                f"A micro-batch takes {self.batch_size} example(s) on each of {self.world_size} process(es) = "
                f"{rows}, but the training set has only {self.num_examples} example(s). Lower "
                "--per_device_train_batch_size or --max_seq_length, or add documents.")

    @property
    def global_rows(self) -> int:
        return self.batch_size * self.world_size

    @property
    def per_epoch(self) -> int:
        """Micro-batches per pass over the data (an incomplete last global batch is left out)."""
        return self.num_examples // self.global_rows

    def epoch_of(self, m: int) -> float:
        return m / self.per_epoch

    def _permutation(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(mix_seed(self.seed, epoch, 0x5EED))
        return torch.randperm(self.num_examples, generator=g)

    def indices(self, m: int, cache: dict | None = None) -> list[int]:
        """Example indices of micro-batch `m` on this process."""
        epoch, j = divmod(m, self.per_epoch)
        lo = self.rank * self.batch_size
        if self.layout == "contiguous":
            # Stream s is examples [s*per_epoch, (s+1)*per_epoch); this process owns rows lo .. lo+B.
            return [s * self.per_epoch + j for s in range(lo, lo + self.batch_size)]
        if cache is not None and cache.get("epoch") == epoch:
            perm = cache["perm"]
        else:
            perm = self._permutation(epoch)
            if cache is not None:
                cache.update(epoch=epoch, perm=perm)
        start = j * self.global_rows + lo
        return perm[start:start + self.batch_size].tolist()


class _MicroBatchSampler(torch.utils.data.Sampler):
    """Yields `[(m, index), ...]` for m = start, start + 1, ... (endless; the loop stops by step count)."""

    def __init__(self, plan: BatchPlan, start: int):
        self.plan, self.start = plan, start

    def __iter__(self):
        cache: dict = {}
        m = self.start
        while True:
            yield [(m, i) for i in self.plan.indices(m, cache)]
            m += 1


class _Numbered(torch.utils.data.Dataset):
    """Dataset view whose items are `(m, example)`, so the collate function knows the micro-batch number."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, key):
        m, i = key
        return m, self.dataset[int(i)]


class _Collate:
    """Collates `(m, example)` items with masks drawn from a generator seeded by (seed, m, rank)."""

    def __init__(self, collator, seed: int, rank: int, stream: int = 0):
        self.collator, self.seed, self.rank, self.stream = collator, seed, rank, stream

    def __call__(self, items):
        m = items[0][0]
        g = torch.Generator().manual_seed(mix_seed(self.seed, self.stream, m, self.rank))
        return m, self.collator([example for _, example in items], generator=g)


def train_batches(examples, plan: BatchPlan, collator, start: int, num_workers: int = 0) -> Iterator:
    """Endless iterator of `(m, batch)` for this process, starting at micro-batch `start`."""
    loader = torch.utils.data.DataLoader(
        _Numbered(examples), batch_sampler=_MicroBatchSampler(plan, start),
        collate_fn=_Collate(collator, plan.seed, plan.rank), num_workers=num_workers,
        # Its own generator: creating the iterator would otherwise draw from the global RNG, which a resumed
        # run has just restored for the model's dropout.
        generator=torch.Generator().manual_seed(mix_seed(plan.seed, start)))
    return iter(loader)


def eval_batches(examples, batch_size: int, world_size: int, rank: int, collator, seed: int,
                 max_examples: int | None = None) -> list[tuple[dict, bool]]:
    """This process's evaluation batches as `(batch, counts)` pairs, in a fixed order with fixed masks.

    Every process gets the same number of batches (a process short of real ones repeats its first with
    counts=False), because sharded models (ZeRO-3) need every process in every forward pass.
    """
    n = len(examples) if max_examples is None else min(len(examples), max_examples)
    starts = list(range(0, n, batch_size))
    mine = starts[rank::world_size]
    per_process = math.ceil(len(starts) / world_size)
    out = []
    for b, start in enumerate(mine):
        rows = [examples[i] for i in range(start, min(start + batch_size, n))]
        g = torch.Generator().manual_seed(mix_seed(seed, 0xE7A1, start))
        out.append((collator(rows, generator=g), True))
    while len(out) < per_process:
        filler = out[0][0] if out else collator([examples[0]], generator=torch.Generator().manual_seed(seed))
        out.append((filler, False))
    return out


class StreamBatches:
    """Global micro-batches from a streamed corpus, read in chunks of `STREAM_CHUNK` documents.

    State (saved in checkpoints): `documents_done` (documents of finished chunks, this epoch), `taken`
    (micro-batches taken from the current chunk) and `epoch`.
    """

    def __init__(self, documents, objective: Objective, tokenizer, settings: ObjectiveSettings, collator,
                 batch_size: int, world_size: int, rank: int, seed: int, state: dict | None = None):
        self.documents, self.objective, self.tokenizer, self.settings = documents, objective, tokenizer, settings
        self.collator, self.batch_size, self.world_size, self.rank, self.seed = \
            collator, batch_size, world_size, rank, seed
        state = state or {}
        self.epoch = int(state.get("epoch", 0))
        self.documents_done = int(state.get("documents_done", 0))
        self.taken = int(state.get("taken", 0))
        self.m = int(state.get("m", 0))

    def state(self) -> dict:
        return {"epoch": self.epoch, "documents_done": self.documents_done, "taken": self.taken, "m": self.m}

    def _chunks(self) -> Iterator[tuple[int, list[str]]]:
        stream = self.documents.skip(self.documents_done) if self.documents_done else self.documents
        if hasattr(stream, "set_epoch"):
            stream.set_epoch(self.epoch)
        chunk = []
        for row in stream:
            text = row["text"]
            if text:
                chunk.append(text)
            if len(chunk) == STREAM_CHUNK:
                yield len(chunk), chunk
                chunk = []
        if chunk:
            yield len(chunk), chunk

    def __iter__(self):
        rows = self.batch_size * self.world_size
        empty_epochs = 0
        while True:
            produced = False
            for n_docs, texts in self._chunks():
                settings = ObjectiveSettings(**{**self.settings.__dict__,
                                                "seed": mix_seed(self.seed, self.epoch, self.documents_done)})
                examples = self.objective.build_examples(self.tokenizer, texts, settings)
                g = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch, self.documents_done, 0x5EED))
                order = torch.randperm(len(examples), generator=g).tolist()
                for j in range(self.taken, len(examples) // rows):
                    picked = order[j * rows + self.rank * self.batch_size:][: self.batch_size]
                    gm = torch.Generator().manual_seed(mix_seed(self.seed, 1, self.m, self.rank))
                    batch = self.collator([examples[i] for i in picked], generator=gm)
                    m = self.m
                    self.m += 1
                    self.taken = j + 1
                    produced = True
                    yield m, batch
                self.documents_done += n_docs
                self.taken = 0
            self.epoch += 1
            self.documents_done = 0
            empty_epochs = 0 if produced else empty_epochs + 1
            if empty_epochs:
                raise ValueError(
                    f"The streamed corpus yields no complete micro-batch of {rows} examples per chunk of "
                    f"{STREAM_CHUNK} documents. Lower --per_device_train_batch_size or check --dataset.")


def take_documents(stream, n: int) -> list[str]:
    """The first `n` non-empty texts of a streamed corpus (for training a tokenizer)."""
    out = []
    for row in stream:
        if row["text"]:
            out.append(row["text"])
        if len(out) >= n:
            break
    return out


def count_tokens(batch: dict) -> int:
    """Real (non-padding) input tokens of a batch."""
    mask = batch.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        return int(mask.sum())
    return int(batch["input_ids"].numel())


def to_device(value, device):
    """`value` with every tensor in it moved to `device`: a tensor, or mappings (a dict, a `BatchEncoding`;
    returned as a dict) and lists / tuples of them, nested. Anything else is returned as it is. The one
    "batch to the device" helper of pretrain, finetune and distill."""
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def count_targets(batch: dict) -> int:
    """Positions with a label (!= -100) in the batch's `labels`."""
    labels = batch.get("labels")
    return int((labels != -100).sum()) if labels is not None else 0
