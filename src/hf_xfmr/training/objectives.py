"""The pretraining objectives, one table entry each.

An `Objective` says everything the pretraining loop needs to train an architecture with it:

| field            | what it is                                                                  |
|------------------|-----------------------------------------------------------------------------|
| `task`           | the registry task whose model class trains with it (`masked-lm`, ...)      |
| `required_tokens`| tokenizer special tokens it cannot work without (checked before training)  |
| `build_examples` | documents (strings) -> training examples (dicts of token-id lists)          |
| `make_collator`  | examples -> a padded, masked batch of tensors (given a seeded generator)    |
| `logits_key`     | the output field holding the token logits (for accuracy)                    |
| `metrics`        | extra evaluation counts (next-sentence / sentence-order accuracy, ...)     |
| `layout`         | "shuffled" examples, or "contiguous" per-row streams (Transformer-XL/XLNet) |
| `decoder_length` | encoder-decoders: the longest target a batch can have (length check)        |
| `unused_parameters` | some parameters get no gradient in a step: DDP looks for them (XLNet `plm`) |
| `packable`       | `--packing` packs its examples into full rows (each kept apart: `cu_seqlens`) |
| `model_class`    | the module it trains when that is not the task's model (ELECTRA's generator + |
|                  | discriminator); its forward returns the loss                                |
| `config_options` | config fields set from `PretrainArguments` fields (`--generator_size_ratio`) |
| `settings_options` | its own `ObjectiveSettings` fields, set from `PretrainArguments` (`--gsg_ratio`) |
| `logged_outputs` | scalar outputs averaged per step and logged beside the loss (loss terms)    |
| `export`         | writes the trained module as the final model (default `save_pretrained`)    |
| `perplexity`     | the loss is a token cross-entropy: evaluation reports its perplexity (not RTD's) |
| state hooks      | `initial_state` / `step_inputs` / `update_state`, for objectives that carry |
|                  | state from one step to the next (XLNet's memory)                           |

Adding an objective = one `register_objective(Objective(...))` call; an architecture trains with it
once the objective's name is in its registry entry (`Architecture.objectives`) and it has a model
class for the objective's `task`. Per-architecture differences (ALBERT's n-gram masking, ModernBERT's
30% masking rate) live in each family's record (`hf_xfmr.family.Family.pretraining_defaults`), which
`Objective.resolve` reads.

Encoder-decoder objectives (T5 span corruption, BART text infilling, PEGASUS gap sentences)
-------------------------------------------------------------------------------------------
An objective whose `task` is "seq2seq-lm" trains the architecture's `ForConditionalGeneration`. Its
collator yields `input_ids` / `attention_mask` for the encoder and `labels` (-100 on padding) for the
decoder, optionally with `decoder_input_ids` / `decoder_attention_mask` (without them the model feeds
the decoder the labels shifted right). The loss is the model's (chunked cross-entropy over the labels),
accuracy is scored on the unshifted labels (`shift_labels=False`), and `decoder_length(settings)` gives
the longest target so the pretraining loop checks that a full-length input AND target fit the model.
`max_seq_length` is the encoder input length.

Stateful objectives (the hook interface)
----------------------------------------
XLNet's own recipe (`plm-mem`) trains with a memory: the hidden states of the previous segment are the
`mems` of the next, so
batch row j at step t+1 must hold the text that follows row j of step t. Such an objective declares
`layout="contiguous"`: the loop then cuts the training text into `rows` parallel streams (one per row of
the global batch, Transformer-XL's "batchify") and never shuffles them; micro-batch k holds segment k of
every stream. The loop keeps one state dict per process and calls, around every micro-batch:

    state = objective.initial_state(rows)                 # at the start, and when the streams restart
    inputs = objective.step_inputs(batch, state)          # model keyword arguments (e.g. adds `mems`)
    outputs = model(**inputs)
    state = objective.update_state(batch, outputs, state) # e.g. keeps the new `mems`, detached

The state is a flat `dict[str, torch.Tensor]` (lists of tensors are stored as `name.0`, `name.1`, ...);
checkpoints save it per process (safetensors) so a resumed run continues with the same memory. It lives
on the training device; `update_state` must detach what it keeps.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..data import (
    DataCollatorForCLM,
    DataCollatorForMLM,
    create_nsp_examples,
    create_sop_examples,
    pack_documents,
    pack_stream,
    tokenize_documents,
)
from ..models.registry import get_architecture

IGNORE_INDEX = -100
LAYOUTS = ("shuffled", "contiguous")


@dataclass(frozen=True)
class ObjectiveSettings:
    """The knobs of the data side, taken from `PretrainArguments`.

    max_seq_length: tokens per example (special tokens included).
    mlm_probability: masking rate; None takes the architecture's default (its family record's
        `pretraining_defaults`), else 15%.
    max_ngram: masked span length limit (ALBERT's n-gram masking); None: the architecture's default, else 1.
    short_seq_prob: share of shorter sentence-pair examples (NSP / SOP).
    seed: seeds the example builders (pair sampling).
    arch: the architecture name, whose family record may set defaults for the unset fields.
    packing: pack several examples into each row of `max_seq_length` (best fit), each kept apart from the
        others by the model (objectives with `packable`).
    gsg_ratio: gap-sentence generation: share of each window's sentences masked and generated; None: the
        architecture's default, else 0.3 (PEGASUS).
    gsg_strategy: gap-sentence generation: how the gap sentences are chosen (`hf_xfmr.data.gsg.STRATEGIES`);
        None: the architecture's default, else "ind-orig" (PEGASUS).
    """

    max_seq_length: int = 128
    mlm_probability: float | None = None
    max_ngram: int | None = None
    short_seq_prob: float = 0.1
    seed: int = 0
    arch: str = ""
    packing: bool = False
    gsg_ratio: float | None = None
    gsg_strategy: str | None = None


def _no_state(rows: int) -> dict[str, torch.Tensor]:
    return {}


def _batch_as_inputs(batch: dict, state: dict) -> dict:
    return batch


def _keep_state(batch: dict, outputs: Any, state: dict) -> dict:
    return state


def _no_metrics(batch: dict, outputs: Any) -> dict[str, tuple[float, float]]:
    return {}


def save_model(model, folder) -> Any:
    """The default `Objective.export`: `model.save_pretrained(folder)`; returns `model`."""
    model.save_pretrained(folder)
    return model


@dataclass(frozen=True)
class Objective:
    """One pretraining objective (see the module docstring for the fields and the state hooks).

    build_examples(tokenizer, texts, settings) -> list of example dicts.
    make_collator(tokenizer, settings) -> callable(examples, generator) -> batch dict of tensors with "labels".
    metrics(batch, outputs) -> {name: (correct, total)}, reported as `eval_<name>` = correct / total.
    """

    name: str
    description: str
    task: str
    build_examples: Callable[[Any, Sequence[str], ObjectiveSettings], list[dict]]
    make_collator: Callable[[Any, ObjectiveSettings], Callable]
    required_tokens: tuple[str, ...] = ()
    logits_key: str = "logits"
    shift_labels: bool = False  # causal LM: logits at t predict labels at t + 1
    metrics: Callable[[dict, Any], dict[str, tuple[float, float]]] = _no_metrics
    layout: str = "shuffled"
    config_defaults: Mapping[str, Any] = field(default_factory=dict)
    initial_state: Callable[[int], dict] = _no_state
    step_inputs: Callable[[dict, dict], dict] = _batch_as_inputs
    update_state: Callable[[dict, Any, dict], dict] = _keep_state
    decoder_length: Callable[[ObjectiveSettings], int] | None = None
    # Some parameters take no part in a step (XLNet's segment parameters when rows carry no token types):
    # DDP must then look for unused parameters after each backward, or it fails at the next step.
    unused_parameters: bool = False
    # `--packing`: `build_examples` packs its examples into full rows (`ObjectiveSettings.packing`) and the
    # collator passes their boundaries on, so that every example attends to itself only.
    packable: bool = False
    # model_class(arch) -> the class of the module trained, when it is not `arch.model_class(task)`.
    model_class: Callable[[Any], type] | None = None
    # config field -> `PretrainArguments` field setting it (when not None); refused with other objectives.
    config_options: Mapping[str, str] = field(default_factory=dict)
    # `ObjectiveSettings` fields of its own, set from the `PretrainArguments` fields of the same names (when not
    # None: `objective_settings_options`); refused with other objectives.
    settings_options: tuple[str, ...] = ()
    # Scalar outputs (besides `loss`) averaged over each step's micro-batches and logged with it.
    logged_outputs: tuple[str, ...] = ()
    # export(trained module, folder) -> the final model, written to `folder`.
    export: Callable[[Any, Any], Any] = save_model
    # The loss is a mean token cross-entropy, so evaluation reports its perplexity (not RTD's weighted sum).
    perplexity: bool = True

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"Objective {self.name!r}: layout must be one of {LAYOUTS}, got {self.layout!r}.")

    def resolve(self, settings: ObjectiveSettings) -> ObjectiveSettings:
        """`settings` with the unset (None) fields taken from the family record of `settings.arch` (its
        `pretraining_defaults` for this objective)."""
        family = get_architecture(settings.arch).family if settings.arch else None
        defaults = {} if family is None else family.pretraining_defaults.get(self.name, {})
        unset = {k: v for k, v in defaults.items() if getattr(settings, k) is None}
        return replace(settings, **unset)

    @property
    def seq2seq(self) -> bool:
        """Trains an encoder-decoder (`ForConditionalGeneration`) on input -> target pairs."""
        return self.task == "seq2seq-lm"

    @property
    def stateful(self) -> bool:
        return self.initial_state is not _no_state or self.update_state is not _keep_state


_OBJECTIVES: dict[str, Objective] = {}


def register_objective(objective: Objective) -> Objective:
    """Add (or replace) an objective in the table used by `pretrain`."""
    _OBJECTIVES[objective.name] = objective
    return objective


def available_objectives() -> dict[str, Objective]:
    """Every objective with a training recipe, by name."""
    return dict(_OBJECTIVES)


def get_objective(name: str) -> Objective:
    if name not in _OBJECTIVES:
        from ..models.registry import OBJECTIVES

        if name in OBJECTIVES:
            raise ValueError(f"The objective {name!r} ({OBJECTIVES[name]}) has no pretraining recipe in this "
                             f"version of hf_xfmr yet; available: {', '.join(_OBJECTIVES)}.")
        raise ValueError(f"Unknown objective {name!r}; available: {', '.join(_OBJECTIVES)}.")
    return _OBJECTIVES[name]


def objective_settings_options(objective: Objective, args) -> dict[str, Any]:
    """The `ObjectiveSettings` fields the run's arguments set for `objective` (its `settings_options` given in
    `args`, a `PretrainArguments`); an option of another objective is refused, naming the objectives that have it.
    The options are the fields named in any objective's `settings_options`."""
    owners: dict[str, list[str]] = {}
    for recipe in _OBJECTIVES.values():
        for name in recipe.settings_options:
            owners.setdefault(name, []).append(recipe.name)
    given = [name for name in owners if getattr(args, name, None) is not None]
    foreign = [name for name in given if name not in objective.settings_options]
    if foreign:
        which = sorted({o for name in foreign for o in owners[name]})
        raise ValueError(f"{', '.join('--' + n for n in foreign)} apply only to the objective(s) that have them "
                         f"({', '.join(which)}), not to {objective.name!r}: drop them or choose that --objective.")
    return {name: getattr(args, name) for name in objective.settings_options if getattr(args, name, None) is not None}


def check_tokenizer(objective: Objective, tokenizer) -> None:
    """Raise a ValueError naming every special token `objective` needs that `tokenizer` lacks."""
    missing = [name for name in objective.required_tokens if getattr(tokenizer, f"{name}_id", None) is None]
    if missing:
        tokens = ", ".join(missing)
        raise ValueError(
            f"The {objective.name!r} objective needs the tokenizer special token(s) {tokens}, which "
            f"{type(tokenizer).__name__} does not define. Add them (tokenizer.add_special_tokens(...), then save it "
            "and pass --tokenizer PATH) or let `pretrain` train a tokenizer for the architecture (omit --tokenizer)."
        )


# ----------------------------------------------------------------------------------------------
# Example builders
# ----------------------------------------------------------------------------------------------

def chunk_documents(tokenizer, texts: Sequence[str], settings: ObjectiveSettings, word_ids: bool = False) -> list[dict]:
    """Each document cut into consecutive windows of `max_seq_length` tokens, special tokens included.

    Uses the fast tokenizer's overflow: every window gets the architecture's own `[CLS] ... [SEP]`
    (or `<s> ... </s>`) template. With `word_ids`, each example also carries the word index of every
    token (-1 on special tokens), for whole-word masking. Windows without a content token are dropped.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("Pretraining data is cut into windows with a fast tokenizer (PreTrainedTokenizerFast); "
                         f"got {type(tokenizer).__name__}.")
    enc = tokenizer(list(texts), truncation=True, max_length=settings.max_seq_length, return_overflowing_tokens=True,
                    return_special_tokens_mask=True)
    examples = []
    for i, ids in enumerate(enc["input_ids"]):
        special = enc["special_tokens_mask"][i]
        if all(special):
            continue
        example = {"input_ids": ids, "special_tokens_mask": special}
        if word_ids:
            example["word_ids"] = [-1 if w is None else w for w in enc.word_ids(i)]
        examples.append(example)
    return examples


def pack_examples(examples: list[dict], max_seq_length: int) -> list[dict]:
    """Examples packed whole into rows of at most `max_seq_length` tokens (best fit, `data.pack_documents`):
    each row holds its examples' token-level fields concatenated (`input_ids`, `special_tokens_mask`,
    `word_ids`) and `seq_lens`, their lengths, from which the collator returns the boundaries the model
    keeps apart. No `position_ids`: the model numbers every example from its own first position."""
    if not examples:
        return []
    fields = [name for name in ("input_ids", "special_tokens_mask", "word_ids") if name in examples[0]]
    rows = []
    for row in pack_documents([ex["input_ids"] for ex in examples], max_seq_length):
        members = [examples[i] for i in row["doc_index"]]
        packed = {name: [value for ex in members for value in ex[name]] for name in fields}
        rows.append({**packed, "seq_lens": row["seq_lens"]})
    return rows


def _mlm_examples(tokenizer, texts, settings):
    examples = chunk_documents(tokenizer, texts, settings)
    return pack_examples(examples, settings.max_seq_length) if settings.packing else examples


def _wwm_examples(tokenizer, texts, settings):
    examples = chunk_documents(tokenizer, texts, settings, word_ids=True)
    return pack_examples(examples, settings.max_seq_length) if settings.packing else examples


def _pair_examples(builder):
    def build(tokenizer, texts, settings):
        documents = tokenize_documents(tokenizer, texts)
        if len(documents) < 2:
            return []  # NSP needs two documents; the loop reports an empty dataset with its own message
        return builder(documents, tokenizer, max_seq_length=settings.max_seq_length,
                       short_seq_prob=settings.short_seq_prob, seed=settings.seed)
    return build


def _clm_examples(tokenizer, texts, settings):
    """GPT-2 recipe: documents joined by EOS and cut into rows of exactly `max_seq_length` tokens."""
    documents = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    documents = [d for d in documents if d]
    if not documents:
        return []
    rows = pack_stream(documents, settings.max_seq_length, tokenizer.eos_token_id)
    # Positions simply count 0..L-1 in every row (documents share the row's attention), as in GPT-2.
    return [{"input_ids": row["input_ids"]} for row in rows]


# ----------------------------------------------------------------------------------------------
# Collators: examples + a seeded generator -> batch
# ----------------------------------------------------------------------------------------------

class SeededCollator:
    """Runs a collator with torch's RNG seeded for this batch alone.

    The wrapped collator is built without `seed`/`generator`, so it draws its masks from torch's global
    RNG; each call forks that RNG (restoring it afterwards, so the model's dropout stream is untouched)
    and seeds the fork from the generator it is handed. Masks therefore depend only on (seed, batch
    number), never on the order in which batches were prepared (prefetching, workers, a resumed run).
    """

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, examples, generator: torch.Generator | None = None):
        if generator is None:
            return self.collator(examples)
        seed = int(torch.randint(0, 2**62, (), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.collator(examples)


def _mlm_collator(whole_word_mask: bool):
    def make(tokenizer, settings):
        return SeededCollator(DataCollatorForMLM(
            tokenizer, mlm_probability=settings.mlm_probability or 0.15, whole_word_mask=whole_word_mask,
            max_ngram=settings.max_ngram or 1, return_cu_seqlens=settings.packing,
        ))
    return make


def _clm_collator(tokenizer, settings):
    return SeededCollator(DataCollatorForCLM(tokenizer))


# ----------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------

def token_accuracy_counts(logits: torch.Tensor, labels: torch.Tensor, shift: bool = False) -> tuple[int, int]:
    """(correct, total) top-1 predictions over positions whose label is not -100.

    logits: dense (B, T, V), or sparse (N, V) holding only the labelled positions in row-major order
    (what a head with `sparse_prediction` returns). With `shift`, logits at t are scored against labels
    at t + 1 (causal LM).
    """
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    labelled = labels != IGNORE_INDEX
    total = int(labelled.sum())
    if total == 0:
        return 0, 0
    if logits.dim() == labels.dim() + 1 and logits.shape[:-1] == labels.shape:
        predicted = logits.argmax(-1)[labelled]
    elif logits.dim() == 2 and logits.shape[0] == total:
        predicted = logits.argmax(-1)
    else:
        raise ValueError(f"Cannot score logits of shape {tuple(logits.shape)} against labels of shape "
                         f"{tuple(labels.shape)} with {total} labelled positions.")
    return int((predicted == labels[labelled]).sum()), total


def target_histogram(labels: torch.Tensor, size: int, shift: bool = False) -> torch.Tensor:
    """How often each token id is a target (label not -100): a float64 (size,) tensor on the CPU."""
    if shift:
        labels = labels[:, 1:]
    targets = labels[labels != IGNORE_INDEX].cpu()
    return torch.bincount(targets, minlength=size)[:size].to(torch.float64)


def _sentence_metric(name: str, logits_key: str, label_key: str):
    def counts(batch, outputs):
        logits = getattr(outputs, logits_key, None)
        labels = batch.get(label_key)
        if logits is None or labels is None:
            return {}
        return {name: (int((logits.argmax(-1) == labels).sum()), int(labels.numel()))}
    return counts


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------

_SPARSE = {"sparse_prediction": True}  # heads that can project only the masked positions do so in training

register_objective(Objective(
    name="mlm", description="masked language modelling (15%, 80/10/10)", task="masked-lm",
    build_examples=_mlm_examples, make_collator=_mlm_collator(False),
    required_tokens=("mask_token", "pad_token"), config_defaults=_SPARSE, packable=True,
))
register_objective(Objective(
    name="wwm", description="whole-word masked language modelling", task="masked-lm",
    build_examples=_wwm_examples, make_collator=_mlm_collator(True),
    required_tokens=("mask_token", "pad_token"), config_defaults=_SPARSE, packable=True,
))
register_objective(Objective(
    name="mlm+nsp", description="MLM + next-sentence prediction (BERT)", task="pretraining",
    build_examples=_pair_examples(create_nsp_examples), make_collator=_mlm_collator(False),
    required_tokens=("mask_token", "pad_token", "cls_token", "sep_token"), logits_key="prediction_logits",
    metrics=_sentence_metric("nsp_accuracy", "seq_relationship_logits", "next_sentence_label"),
    config_defaults=_SPARSE,
))
register_objective(Objective(
    name="mlm+sop", description="MLM + sentence-order prediction (ALBERT)", task="pretraining",
    build_examples=_pair_examples(create_sop_examples), make_collator=_mlm_collator(False),
    required_tokens=("mask_token", "pad_token", "cls_token", "sep_token"), logits_key="prediction_logits",
    metrics=_sentence_metric("sop_accuracy", "sop_logits", "sentence_order_label"),
    config_defaults=_SPARSE,
))
register_objective(Objective(
    name="clm", description="causal language modelling on packed rows (GPT)", task="causal-lm",
    build_examples=_clm_examples, make_collator=_clm_collator, required_tokens=("eos_token",),
    shift_labels=True,
))


# ----------------------------------------------------------------------------------------------
# XLNet: permutation language modelling (Yang et al. 2019)
# ----------------------------------------------------------------------------------------------

PLM_SEGMENTS = ("blocks", "pairs")


@dataclass(frozen=True)
class PLMRecipe:
    """How `pretrain` turns text into XLNet batches. The measurements behind the choices, against
    transformers' own pipeline, are in docs/learning_parity.md.

    segments: "blocks" (default): every document followed by `<sep> <cls>` (what XLNet's tokenizer appends),
        all concatenated and cut into rows of `max_seq_length` tokens, one segment per row (no
        `token_type_ids`), as transformers' `run_plm.py` builds them; "pairs": XLNet's `[A, <sep>, B, <sep>,
        <cls>]` windows of one stream (documents joined by `<eod>`), B being A's continuation, with segment ids.
    memory: train with memory (Transformer-XL recurrence, XLNet sec. 2.4): rows are per-row streams in corpus
        order (`layout="contiguous"`, never shuffled) and the hidden states of each segment are the `mems` of the
        next one of its row. Off (default): rows are shuffled and every row is trained on its own.
    reuse: XLNet's reuse block: positions [0, max_seq_length // 2) never attend to the rest of their row,
        and "pairs" windows start every max_seq_length // 2 tokens (so they overlap by half), so that only the
        block is cached and the memory of a window is exactly the text before the next one. Needed for memory
        over "pairs"; without memory it only hides context from half of the row.
    budget_rounding: `DataCollatorForPLM`'s rounding of each row's 1/6 target budget ("random" keeps the
        expected number of targets at exactly 1/6 of the tokens, as transformers' collator averages).
    """

    segments: str = "blocks"
    memory: bool = False
    reuse: bool = False
    budget_rounding: str = "random"

    def __post_init__(self):
        if self.segments not in PLM_SEGMENTS:
            raise ValueError(f"PLMRecipe.segments must be one of {PLM_SEGMENTS}, got {self.segments!r}.")
        if self.memory and self.segments == "pairs" and not self.reuse:
            raise ValueError("Memory over overlapping [A, <sep>, B, <sep>, <cls>] windows needs the reuse block "
                             "(reuse=True): otherwise the cached states would hold the next window's text.")

    def reuse_len(self, max_seq_length: int) -> int | None:
        """The reuse block (XLNet: 256 of 512), or None."""
        return max_seq_length // 2 if self.reuse else None

    def mem_len(self, max_seq_length: int) -> int | None:
        """Cached states per layer: the reuse block, else the whole previous row; None without memory."""
        if not self.memory:
            return None
        return self.reuse_len(max_seq_length) or max_seq_length


def _plm_pairs(tokenizer, texts, length: int, reuse: int | None) -> list[dict]:
    """Windows `[A, <sep>, B, <sep>, <cls>]` of one token stream (documents joined by <eod>, else <sep>), B
    being A's true continuation. With a reuse block, window k starts at token k * reuse (its first `reuse`
    tokens, all in A, are the part cached as memory), so the memory of window k is exactly the text before
    window k + 1 (XLNet sec. 2.4); without one, windows follow each other."""
    body = length - 3  # A + B
    if body < (reuse or 0) + 2:
        raise ValueError(f"--max_seq_length {length} is too short for XLNet segments (reuse block + A + B + "
                         "<sep> <sep> <cls>); use at least 10.")
    eod = tokenizer.convert_tokens_to_ids("<eod>") if "<eod>" in tokenizer.get_vocab() else tokenizer.sep_token_id
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]:
        if ids:
            stream.extend(ids)
            stream.append(eod)
    len_a = reuse + (body - reuse) // 2 if reuse else body // 2
    sep, cls = tokenizer.sep_token_id, tokenizer.cls_token_id
    return [{"input_ids": stream[start:start + len_a] + [sep] + stream[start + len_a:start + body] + [sep, cls]}
            for start in range(0, len(stream) - body + 1, reuse or body)]


def _plm_blocks(tokenizer, texts, length: int) -> list[dict]:
    """Documents each followed by `<sep> <cls>`, concatenated, cut into rows of `length` tokens (the tail that
    does not fill a row is dropped)."""
    if length < 4:
        raise ValueError(f"--max_seq_length {length} is too short for permutation language modelling; use at least 4.")
    tail = [tokenizer.sep_token_id, tokenizer.cls_token_id]
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]:
        if ids:
            stream.extend(ids)
            stream.extend(tail)
    return [{"input_ids": stream[i:i + length]} for i in range(0, len(stream) - length + 1, length)]


def _plm_step_inputs(batch: dict, state: dict) -> dict:
    """The batch plus the memory of the previous segment of the same streams (none at the start)."""
    inputs = dict(batch, use_mems=True)
    if state.get("mems"):
        inputs["mems"] = tuple(state["mems"])
    return inputs


def _plm_update_state(batch: dict, outputs, state: dict) -> dict:
    mems = getattr(outputs, "mems", None)
    if not mems:
        return state
    return {"mems": [m.detach().contiguous() for m in mems]}  # one (mem_len, B, d_model) tensor per layer


def plm_objective(recipe: PLMRecipe = PLMRecipe(), name: str = "plm", description: str | None = None) -> Objective:
    """The permutation-LM objective following `recipe` (see `PLMRecipe`)."""

    def build_examples(tokenizer, texts, settings):
        length = settings.max_seq_length
        if recipe.segments == "blocks":
            return _plm_blocks(tokenizer, texts, length)
        return _plm_pairs(tokenizer, texts, length, recipe.reuse_len(length))

    def make_collator(tokenizer, settings):
        from ..data import DataCollatorForPLM

        # Compact output: per-row ranks and target positions, the model builds its masks (no (B, L, L) tensor).
        return SeededCollator(DataCollatorForPLM(
            tokenizer, seq_len=settings.max_seq_length, reuse_len=recipe.reuse_len(settings.max_seq_length),
            budget_rounding=recipe.budget_rounding,
            return_token_type_ids=recipe.segments == "pairs", compact=True))

    # reuse_len / mem_len follow --max_seq_length (a callable default gets the run's arguments).
    config = {"reuse_len": lambda args: recipe.reuse_len(args.max_seq_length)}
    if recipe.memory:
        config["mem_len"] = lambda args: recipe.mem_len(args.max_seq_length)
    hooks = dict(step_inputs=_plm_step_inputs, update_state=_plm_update_state) if recipe.memory else {}
    if description is None:
        rows = "contiguous streams with memory" if recipe.memory else "shuffled rows"
        description = f"permutation language modelling ({rows}, {recipe.segments}) (XLNet)"
    return Objective(
        name=name, description=description, task="causal-lm", build_examples=build_examples,
        make_collator=make_collator, required_tokens=("pad_token", "sep_token", "cls_token"),
        layout="contiguous" if recipe.memory else "shuffled", config_defaults=config,
        unused_parameters=recipe.segments != "pairs", **hooks)


# The default learns fastest per step and token (docs/learning_parity.md); "plm-mem" is XLNet's own recipe:
# [A, <sep>, B, <sep>, <cls>] windows over contiguous streams, half of each cached as the next one's memory.
PLM_MEMORY_RECIPE = PLMRecipe(segments="pairs", memory=True, reuse=True, budget_rounding="floor")
register_objective(plm_objective(PLMRecipe(), "plm", "permutation language modelling on shuffled rows (XLNet)"))
register_objective(plm_objective(PLM_MEMORY_RECIPE, "plm-mem",
                                 "permutation language modelling with memory over contiguous text (XLNet's recipe)"))


# ----------------------------------------------------------------------------------------------
# T5 span corruption (encoder-decoder: task "seq2seq-lm")
# ----------------------------------------------------------------------------------------------

def _span_corruption_examples(tokenizer, texts, settings):
    """Documents joined by EOS and cut into rows of the text length whose corrupted input has
    `max_seq_length` tokens (T5's `compute_input_and_target_lengths`); a short tail is kept only when
    it is the corpus's only row (a partial row pads its batch)."""
    from ..data.t5 import compute_input_and_target_lengths

    tokens_length, _ = compute_input_and_target_lengths(settings.max_seq_length)
    return _packed_rows(tokenizer, texts, tokens_length)


def _packed_rows(tokenizer, texts, length: int) -> list[dict]:
    """The documents' tokens joined by EOS and cut into rows of `length` tokens; a shorter tail (of at least
    2 tokens) is kept only when the corpus has no full row (a partial row pads its batch)."""
    documents = [d for d in tokenizer(list(texts), add_special_tokens=False)["input_ids"] if d]
    if not documents:
        return []
    rows = [row["input_ids"] for row in pack_stream(documents, length, tokenizer.eos_token_id)]
    full = [row for row in rows if len(row) == length]
    return [{"input_ids": row} for row in (full or [r for r in rows if len(r) >= 2])]


def _span_corruption_collator(tokenizer, settings):
    from ..data.t5 import DataCollatorForSpanCorruption

    return SeededCollator(DataCollatorForSpanCorruption(tokenizer))


def _span_corruption_target_length(settings):
    from ..data.t5 import compute_input_and_target_lengths

    return compute_input_and_target_lengths(settings.max_seq_length)[1]


register_objective(Objective(
    name="span-corruption", description="T5 span corruption (15% of tokens in spans of mean 3 -> sentinels)",
    task="seq2seq-lm", build_examples=_span_corruption_examples, make_collator=_span_corruption_collator,
    required_tokens=("eos_token", "pad_token"), decoder_length=_span_corruption_target_length,
))


# ----------------------------------------------------------------------------------------------
# BART text infilling (encoder-decoder: task "seq2seq-lm")
# ----------------------------------------------------------------------------------------------

def _text_infilling_examples(tokenizer, texts, settings):
    """Documents joined by </s> and cut into rows of `max_seq_length` - 2 text tokens (the collator adds
    <s> and </s>); a short tail is kept only when it is the corpus's only row."""
    length = settings.max_seq_length - 2
    if length < 2:
        raise ValueError(f"--max_seq_length {settings.max_seq_length} is too short for text infilling: <s> + at "
                         f"least 2 text tokens + </s>; use at least 4.")
    return _packed_rows(tokenizer, texts, length)


def _text_infilling_collator(tokenizer, settings):
    from ..data.bart import DataCollatorForTextInfilling

    return SeededCollator(DataCollatorForTextInfilling(tokenizer))


register_objective(Objective(
    name="text-infilling", description="BART text infilling (30% of tokens in Poisson(3) spans -> one <mask> each)",
    task="seq2seq-lm", build_examples=_text_infilling_examples, make_collator=_text_infilling_collator,
    required_tokens=("mask_token", "eos_token", "pad_token"), decoder_length=lambda settings: settings.max_seq_length,
))


# ----------------------------------------------------------------------------------------------
# PEGASUS gap-sentence generation (encoder-decoder: task "seq2seq-lm")
# ----------------------------------------------------------------------------------------------

def _gsg_text_length(tokenizer, settings) -> int:
    """Text tokens per window: `max_seq_length` less the <s> (when the tokenizer has one) and </s> the collator
    adds."""
    length = settings.max_seq_length - (tokenizer.bos_token_id is not None) - 1
    if length < 2:
        raise ValueError(f"--max_seq_length {settings.max_seq_length} is too short for gap-sentence generation: the "
                         f"special tokens + two sentences of at least one token; use at least 4.")
    return length


def _gsg_examples(tokenizer, texts, settings):
    """Each document cut into windows of whole consecutive sentences of at most `max_seq_length` tokens with the
    special tokens (`hf_xfmr.data.gsg.gsg_examples`); gap sentences are chosen within a window."""
    from ..data.gsg import gsg_examples

    return gsg_examples(tokenizer, texts, _gsg_text_length(tokenizer, settings))


def _gsg_collator(tokenizer, settings):
    from ..data.gsg import GSG_RATIO, GSG_STRATEGY, DataCollatorForGapSentences

    ratio = settings.gsg_ratio if settings.gsg_ratio is not None else GSG_RATIO
    return SeededCollator(DataCollatorForGapSentences(tokenizer, gsg_ratio=ratio,
                                                      strategy=settings.gsg_strategy or GSG_STRATEGY))


register_objective(Objective(
    name="gsg", description="PEGASUS gap-sentence generation (the 30% of sentences with the highest ROUGE-1 "
                            "against the rest -> one <mask> each; the decoder generates them)",
    task="seq2seq-lm", build_examples=_gsg_examples, make_collator=_gsg_collator,
    required_tokens=("mask_token", "eos_token", "pad_token"), decoder_length=lambda settings: settings.max_seq_length,
    settings_options=("gsg_ratio", "gsg_strategy"),
))


# ----------------------------------------------------------------------------------------------
# ELECTRA: replaced-token detection (Clark et al. 2020)
# ----------------------------------------------------------------------------------------------

RTD_OUTPUTS = ("generator_loss", "discriminator_loss", "generator_accuracy", "replaced_accuracy", "original_accuracy")


def _rtd_model_class(arch):
    """The generator + discriminator module (`XfmrElectraForReplacedTokenDetection`); its forward takes an MLM
    batch, samples the replacements and returns the weighted loss (`loss`) and `RTD_OUTPUTS`."""
    from ..models.electra import XfmrElectraForReplacedTokenDetection

    return XfmrElectraForReplacedTokenDetection


def _rtd_metrics(batch, outputs) -> dict[str, tuple[float, float]]:
    """The discriminator's accuracy on the replaced and on the original real tokens, counted over the whole
    evaluation set (the generator's accuracy is `eval_accuracy`)."""
    replaced, logits = getattr(outputs, "replaced", None), getattr(outputs, "logits", None)
    if replaced is None or logits is None:
        return {}
    mask = batch.get("attention_mask")
    real = mask.bool() if mask is not None and mask.dim() == 2 else torch.ones_like(replaced, dtype=torch.bool)
    replaced, predicted = replaced.bool() & real, logits > 0  # (B, T)
    original = ~replaced & real
    return {"replaced_accuracy": (int((predicted & replaced).sum()), int(replaced.sum())),
            "original_accuracy": (int((~predicted & original).sum()), int(original.sum()))}


def _save_rtd(model, folder):
    """The discriminator in `folder` (an ordinary `ForPreTraining` checkpoint), the generator in
    `folder/generator` (a `ForMaskedLM` one): the RTD model's own `save_pretrained`."""
    model.save_pretrained(folder)
    return model


register_objective(Objective(
    name="rtd", description="replaced-token detection: a small generator fills the masked positions, the "
                            "discriminator finds the replaced tokens (ELECTRA)",
    task="pretraining", build_examples=_mlm_examples, make_collator=_mlm_collator(False),
    required_tokens=("mask_token", "pad_token"), logits_key="generator_logits", metrics=_rtd_metrics,
    packable=True, model_class=_rtd_model_class, logged_outputs=RTD_OUTPUTS, export=_save_rtd, perplexity=False,
    config_options={"generator_size_ratio": "generator_size_ratio", "generator_loss_weight": "generator_loss_weight",
                    "discriminator_loss_weight": "discriminator_loss_weight",
                    "discriminator_mlm_weight": "discriminator_mlm_weight"},
))
