"""Learning parity: does `pretrain` learn as fast as transformers' own pipeline, per step and per token?

For each objective (MLM with BERT, PLM with XLNet, CLM with GPT) both sides train a model of the same
size on the same text with the same tokenizer and hyperparameters, and are evaluated on the same
held-out documents at several steps:

- ours: `hf_xfmr.training.pretrain` with its default recipe for the objective (`--arch A --objective O`);
- reference: transformers' model (`BertForMaskedLM`, `XLNetLMHeadModel`, `GPT2LMHeadModel`) trained by
  `Trainer`, on the data of transformers' example scripts: every document tokenized with the tokenizer's
  special tokens, concatenated and cut into blocks of `seq_len` tokens (`group_texts` of `run_mlm.py`,
  `run_plm.py`, `run_clm.py`), shuffled, and collated by `DataCollatorForLanguageModeling` (MLM),
  `DataCollatorForPermutationLanguageModeling` (PLM) or `default_data_collator` (CLM, labels = inputs).

Both sides get the same optimizer settings (AdamW, peak learning rate, cosine decay, warmup, weight
decay, betas, epsilon, gradient clipping), batch size and steps; each initialises its own model
(transformers' config comes from ours through the production converter, so the architecture is the same).

Held-out loss is measured on two fixed evaluation sets, each one by both models (so each set's numbers
compare the two sides on identical batches; the two sets differ in format and masks):

- "reference": the reference pipeline's blocks and collator (masks drawn with a fixed seed);
- "ours": the examples and collator `pretrain` evaluates with (`build_examples` + the objective's
  collator in its expanded form that transformers' models accept, e.g. XLNet's `perm_mask` /
  `target_mapping` instead of the compact `perm_ranks` / `target_positions`).

The loss of a set is the mean cross-entropy over all its targets (masked tokens, permutation targets or
next tokens). `benchmarks/learning_parity.py` runs everything and writes the JSON, the markdown table and
the plot of docs/learning_parity.md.
"""

import json
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from .harness import table_lines

EVAL_SETS = ("reference", "ours")
SIDES = ("ours", "reference")


@dataclass(frozen=True)
class LearningSettings:
    """What both sides share. `eval_at`: the steps after which both evaluation sets are scored;
    `eval_fraction`: share of the documents held out (a fixed split, the same for every seed);
    `max_documents`: use only the first N documents of the embedded corpus (None: all)."""

    steps: int = 300
    batch_size: int = 32
    seq_len: int = 64
    learning_rate: float = 2e-3
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-6
    max_grad_norm: float = 1.0
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 512
    vocab_size: int = 8000  # what `pretrain` trains when it makes the tokenizer itself
    eval_at: tuple[int, ...] = (25, 50, 100, 150, 200, 250, 300)
    eval_fraction: float = 0.1
    max_eval_examples: int = 512
    max_documents: int | None = None
    eval_seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "seq_len", "hidden", "layers", "heads", "ffn", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"LearningSettings.{name} must be positive, got {getattr(self, name)}.")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}.")
        bad = [s for s in self.eval_at if not 0 < s <= self.steps]
        if bad or not self.eval_at:
            raise ValueError(f"eval_at must name steps in [1, {self.steps}], got {self.eval_at}.")

    @property
    def warmup_steps(self) -> int:
        return int(round(self.warmup_ratio * self.steps))

    @property
    def eval_steps(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.eval_at)))


# ----------------------------------------------------------------------------------------------
# The cases: one objective each, with the reference pipeline's data recipe
# ----------------------------------------------------------------------------------------------

def group_texts(tokenizer, texts: Sequence[str], seq_len: int, add_special_tokens: bool = True) -> list[list[int]]:
    """transformers' example scripts' data: every text tokenized (with the tokenizer's special tokens where it
    adds any), all concatenated, cut into blocks of `seq_len` (the remainder is dropped)."""
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=add_special_tokens, verbose=False)["input_ids"]:
        stream.extend(ids)
    return [stream[i:i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]


def _mlm_collator(tokenizer):
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)


def _plm_collator(tokenizer):
    from transformers import DataCollatorForPermutationLanguageModeling

    return DataCollatorForPermutationLanguageModeling(tokenizer, plm_probability=1 / 6, max_span_length=5)


def _clm_collator(tokenizer):
    from transformers import default_data_collator

    def collate(examples):
        return default_data_collator([{"input_ids": e["input_ids"], "labels": e["input_ids"]} for e in examples])
    return collate


@dataclass(frozen=True)
class LearningCase:
    """One objective: our `arch` / `objective`, the model size in our config's field names, and the
    reference pipeline's collator; `shift_labels`: targets are the next tokens (causal LM)."""

    name: str
    arch: str
    objective: str
    size: Callable[[LearningSettings], dict]
    reference_collator: Callable[[Any], Callable]
    shift_labels: bool = False
    reference_special_tokens: bool = True  # run_clm tokenizes with GPT-2's (none): the same call


CASES = {
    "mlm": LearningCase(
        "mlm", "bert", "mlm",
        lambda s: dict(hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
                       intermediate_size=s.ffn), _mlm_collator),
    "plm": LearningCase(
        "plm", "xlnet", "plm",
        lambda s: dict(d_model=s.hidden, n_layer=s.layers, n_head=s.heads, d_inner=s.ffn), _plm_collator),
    "clm": LearningCase(
        "clm", "gpt", "clm",
        lambda s: dict(n_embd=s.hidden, n_layer=s.layers, n_head=s.heads, n_inner=s.ffn), _clm_collator,
        shift_labels=True),
}


# ----------------------------------------------------------------------------------------------
# Shared data: documents, the held-out split, the tokenizer, the evaluation sets
# ----------------------------------------------------------------------------------------------

@dataclass
class CaseData:
    """Everything both sides of one case share (built once per case by `prepare`)."""

    case: LearningCase
    settings: LearningSettings
    folder: Path
    train_file: Path
    train_texts: list[str]
    eval_texts: list[str]
    tokenizer_dir: Path
    tokenizer: Any
    eval_sets: dict[str, list[dict]] = field(default_factory=dict)


def split_corpus(settings: LearningSettings) -> tuple[list[str], list[str]]:
    """(training, held-out) texts of the embedded corpus; the split is fixed (it does not follow the seed)."""
    from datasets import Dataset

    from ..data import default_corpus
    from ..data.corpus import document_text
    from ..training.batches import split_documents

    texts = [document_text(d) for d in default_corpus(max_documents=settings.max_documents)]
    texts = [t for t in texts if t.strip()]
    train, held_out = split_documents(Dataset.from_dict({"text": texts}), settings.eval_fraction, seed=0)
    return list(train["text"]), list(held_out["text"])


def seeded(collator, seed: int):
    """`collator(examples)` with torch's global RNG seeded (forked: the caller's RNG stream is untouched)."""
    def collate(examples):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return collator(examples)
    return collate


def expanded_collator(collator):
    """The objective's collator, in the output form transformers' models accept (XLNet: `perm_mask` and
    `target_mapping` instead of the compact `perm_ranks` / `target_positions`; same draws)."""
    inner = getattr(collator, "collator", None)
    if inner is not None and getattr(inner, "compact", False):
        return type(collator)(replace(inner, compact=False))
    return collator


def reference_eval_set(data: CaseData) -> list[dict]:
    """The reference pipeline's held-out blocks, collated in order with fixed seeds."""
    s = data.settings
    blocks = group_texts(data.tokenizer, data.eval_texts, s.seq_len, data.case.reference_special_tokens)
    blocks = blocks[: s.max_eval_examples]
    if not blocks:
        raise ValueError(f"The {len(data.eval_texts)} held-out document(s) hold less than one block of {s.seq_len} "
                         "tokens: raise eval_fraction or max_documents.")
    collator = data.case.reference_collator(data.tokenizer)
    return [seeded(collator, s.eval_seed * 100003 + i)([{"input_ids": b} for b in blocks[i:i + s.batch_size]])
            for i in range(0, len(blocks), s.batch_size)]


def our_eval_set(data: CaseData, objective=None, streams: bool = False) -> list[dict]:
    """What `pretrain` evaluates with: the objective's held-out examples and collator (expanded form).
    `objective`: another recipe's (default: the case's registered objective); `streams`: the examples laid
    out as contiguous per-row streams (`stream_batches`) instead of in consecutive batches."""
    from datasets import Dataset

    from ..training import get_objective
    from ..training.batches import build_examples, eval_batches
    from ..training.objectives import ObjectiveSettings

    s = data.settings
    objective = objective or get_objective(data.case.objective)
    settings = objective.resolve(ObjectiveSettings(max_seq_length=s.seq_len, seed=s.eval_seed, arch=data.case.arch))
    examples = build_examples(objective, data.tokenizer, Dataset.from_dict({"text": data.eval_texts}), settings,
                              required=True)
    collator = expanded_collator(objective.make_collator(data.tokenizer, settings))
    if getattr(getattr(collator, "collator", None), "bi_data", False) and len(examples) % 2:
        examples = examples.select(range(len(examples) - 1))  # bi_data batches need an even number of rows
    if streams:
        return stream_batches(examples, s.batch_size, collator, s.eval_seed)
    return [batch for batch, _ in eval_batches(examples, s.batch_size, 1, 0, collator, s.eval_seed,
                                               s.max_eval_examples)]


def prepare(case: LearningCase, settings: LearningSettings, folder: Path) -> CaseData:
    """Split the corpus, train the case's tokenizer on the training documents, build both evaluation sets."""
    from ..data import train_tokenizer

    folder = Path(folder)
    train_texts, eval_texts = split_corpus(settings)
    data_dir = folder / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    train_file = data_dir / "train.jsonl"
    with train_file.open("w") as f:
        for text in train_texts:
            f.write(json.dumps({"text": text}) + "\n")
    tokenizer_dir = folder / "tokenizer"
    tokenizer = train_tokenizer(case.arch, train_texts, vocab_size=settings.vocab_size,
                                model_max_length=max(512, settings.seq_len))
    tokenizer.save_pretrained(tokenizer_dir)
    data = CaseData(case, settings, folder, train_file, train_texts, eval_texts, tokenizer_dir, tokenizer)
    data.eval_sets = {"reference": reference_eval_set(data), "ours": our_eval_set(data)}
    return data


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------

def count_targets(labels: torch.Tensor, shift: bool) -> int:
    if shift:
        labels = labels[:, 1:]
    return int((labels != -100).sum())


@dataclass
class EvalSet:
    """Evaluation batches; with `memory`, batch j + 1 continues the rows of batch j (`stream_batches`) and
    is scored with the memory (`mems`) of batch j, as XLNet's memory is used at inference. `config`: model
    config fields set for the pass only (e.g. `bi_data=False` to score forward text with a bi_data model)."""

    batches: list[dict]
    memory: bool = False
    config: dict = field(default_factory=dict)


def stream_batches(examples, rows: int, collator, seed: int) -> list[dict]:
    """Examples in corpus order as `rows` contiguous streams: batch j holds segment j of every stream
    (the layout `pretrain` trains a memory objective on); masks from fixed seeds."""
    from ..training.batches import mix_seed

    per_stream = len(examples) // rows
    if per_stream < 2:
        raise ValueError(f"{len(examples)} held-out examples make fewer than 2 segments per stream of {rows} rows.")
    return [collator([examples[s * per_stream + j] for s in range(rows)],
                     generator=torch.Generator().manual_seed(mix_seed(seed, 0x57E, j))) for j in range(per_stream)]


@torch.no_grad()
def held_out_loss(model, batches, shift: bool = False) -> float:
    """Mean cross-entropy over every target of `batches` (a list of batches or an `EvalSet`; each batch's
    mean loss weighted by its targets). The model is put in eval mode for the pass and returned to its
    previous mode."""
    from ..training.batches import to_device

    spec = batches if isinstance(batches, EvalSet) else EvalSet(list(batches))
    memory, batches = spec.memory, spec.batches
    was_training = model.training
    device = next(model.parameters()).device
    saved = {k: getattr(model.config, k) for k in spec.config}
    model.eval()
    total, targets, mems = 0.0, 0, None
    try:
        for k, v in spec.config.items():
            setattr(model.config, k, v)
        for batch in batches:
            inputs = to_device(batch, device)
            if memory:
                inputs.update(mems=mems, use_mems=True)
            n = count_targets(inputs["labels"], shift)
            outputs = model(**inputs)
            mems = outputs.mems if memory else None
            if n:
                total += float(outputs.loss) * n
                targets += n
    finally:
        model.train(was_training)
        for k, v in saved.items():
            setattr(model.config, k, v)
    return total / targets if targets else math.nan


class _Probe:
    """Scores every evaluation set after the steps of `eval_at` (a callback for either side)."""

    def __init__(self, eval_sets: dict[str, list[dict]], eval_at: Sequence[int], shift: bool):
        self.eval_sets, self.eval_at, self.shift = eval_sets, set(eval_at), shift
        self.steps: list[int] = []
        self.losses: dict[str, list[float]] = {name: [] for name in eval_sets}
        self.train: list[tuple[int, float]] = []

    def record(self, model, step: int, loss: float | None) -> None:
        if loss is not None:
            self.train.append((step, float(loss)))
        if step in self.eval_at:
            self.steps.append(step)
            for name, batches in self.eval_sets.items():
                self.losses[name].append(held_out_loss(model, batches, self.shift))


# ----------------------------------------------------------------------------------------------
# The two sides
# ----------------------------------------------------------------------------------------------

@contextmanager
def objective_variant(objective):
    """Temporarily make `objective` the one registered under its name (for ablations of a recipe)."""
    from ..training.objectives import available_objectives, register_objective

    previous = available_objectives().get(objective.name)
    register_objective(objective)
    try:
        yield objective
    finally:
        if previous is not None:
            register_objective(previous)


def pretrain_arguments(data: CaseData, seed: int, output_dir: Path, **overrides):
    """`PretrainArguments` of our side: the case's architecture, objective and size, the shared settings."""
    from ..training import PretrainArguments

    s, case = data.settings, data.case
    size = ",".join(f"{k}={v}" for k, v in case.size(s).items())
    return PretrainArguments(**{**dict(
        arch=case.arch, objective=case.objective, preset="tiny", config_overrides=size, dataset=str(data.train_file),
        eval_fraction=0.0, tokenizer=str(data.tokenizer_dir), max_seq_length=s.seq_len,
        per_device_train_batch_size=s.batch_size, max_steps=s.steps, learning_rate=s.learning_rate,
        lr_scheduler=s.lr_scheduler, warmup_steps=s.warmup_ratio, weight_decay=s.weight_decay,
        adam_beta1=s.adam_beta1, adam_beta2=s.adam_beta2, adam_epsilon=s.adam_epsilon, max_grad_norm=s.max_grad_norm,
        logging_steps=10, save_steps=0, progress_bar=False, report_to_tensorboard=False,
        output_dir=str(output_dir), overwrite_output_dir=True, seed=seed), **overrides})


def run_ours(data: CaseData, seed: int, eval_sets: dict[str, list[dict]] | None = None, objective=None,
             callbacks=(), **overrides) -> dict:
    """Train with `pretrain` (optionally with an `objective` variant registered under the case's objective
    name, and more `PretrainCallback`s) and score the evaluation sets at `eval_at`. `overrides` replace
    `PretrainArguments` fields."""
    from ..training import PretrainCallback, pretrain

    probe = _Probe(eval_sets if eval_sets is not None else data.eval_sets, data.settings.eval_steps,
                   data.case.shift_labels)

    class Callback(PretrainCallback):
        def on_step_end(self, run, record):
            probe.record(run.unwrapped_model, record["step"], record["loss"])

    args = pretrain_arguments(data, seed, data.folder / "runs" / f"ours-seed{seed}", **overrides)
    start = time.perf_counter()
    with objective_variant(objective) if objective is not None else nullcontext():
        pretrain(args, callbacks=[*callbacks, Callback()])
    return _run_record("ours", seed, probe, time.perf_counter() - start)


def reference_model(data: CaseData, seed: int):
    """A freshly initialised transformers model of the case's architecture and size (seeded), its config
    converted from the one `pretrain` builds (same fields, vocabulary and special tokens)."""
    import transformers

    from ..models.conversion import to_transformers
    from ..training.pretrain import build_config, resolve_objective

    args = pretrain_arguments(data, seed, data.folder / "unused")
    arch, objective, model_class = resolve_objective(args)
    config = build_config(arch, model_class, data.tokenizer, objective, args)
    converted = to_transformers(model_class(config))  # only for its class and config
    hf_config = converted.config
    if data.case.objective == "plm":  # run_plm.py trains without memory
        hf_config.mem_len, hf_config.reuse_len = None, None
    transformers.set_seed(seed)
    return type(converted)._from_config(hf_config)


def run_reference(data: CaseData, seed: int, eval_sets: dict[str, list[dict]] | None = None) -> dict:
    """Train the transformers model with `Trainer` on the reference pipeline's blocks and collator."""
    import transformers
    from datasets import Dataset

    s, case = data.settings, data.case
    probe = _Probe(eval_sets if eval_sets is not None else data.eval_sets, s.eval_steps, case.shift_labels)
    blocks = group_texts(data.tokenizer, data.train_texts, s.seq_len, case.reference_special_tokens)
    model = reference_model(data, seed)

    class Callback(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            probe.record(model, state.global_step, None)

    out = data.folder / "runs" / f"reference-seed{seed}"
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=s.steps, per_device_train_batch_size=s.batch_size,
        learning_rate=s.learning_rate, lr_scheduler_type=s.lr_scheduler, warmup_steps=s.warmup_steps,
        weight_decay=s.weight_decay, adam_beta1=s.adam_beta1, adam_beta2=s.adam_beta2, adam_epsilon=s.adam_epsilon,
        max_grad_norm=s.max_grad_norm, seed=seed, logging_steps=10 if s.steps >= 10 else 1, save_strategy="no",
        eval_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        dataloader_pin_memory=False, remove_unused_columns=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Dataset.from_dict({"input_ids": blocks}),
                                   data_collator=case.reference_collator(data.tokenizer), callbacks=[Callback()])
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # no dict per log line on stdout
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    probe.train = [(r["step"], r["loss"]) for r in trainer.state.log_history if "loss" in r and "step" in r]
    return _run_record("reference", seed, probe, seconds)


def _run_record(side: str, seed: int, probe: _Probe, seconds: float) -> dict:
    return {"side": side, "seed": seed, "steps": probe.steps, "eval_loss": probe.losses,
            "train_loss": probe.train, "seconds": round(seconds, 1)}


# ----------------------------------------------------------------------------------------------
# The benchmark and its reports
# ----------------------------------------------------------------------------------------------

def run_case(name: str, settings: LearningSettings, folder: Path, seeds: Sequence[int] = (0, 1),
             sides: Sequence[str] = SIDES, log=print) -> dict:
    """Both sides of one case for every seed: {"case", "arch", "objective", "eval_sizes", "runs": [...]}."""
    case = CASES[name]
    data = prepare(case, settings, Path(folder) / name)
    sizes = {k: sum(count_targets(b["labels"], case.shift_labels) for b in v) for k, v in data.eval_sets.items()}
    runs = []
    for seed in seeds:
        for side in sides:
            log(f"[{name}] {side}, seed {seed}: {settings.steps} steps")
            run = run_ours(data, seed) if side == "ours" else run_reference(data, seed)
            log(f"[{name}] {side}, seed {seed}: " + ", ".join(
                f"{k} {v[-1]:.3f}" for k, v in run["eval_loss"].items()) + f" ({run['seconds']:.0f} s)")
            runs.append(run)
    return {"case": name, "arch": case.arch, "objective": case.objective, "eval_targets": sizes, "runs": runs}


def run_benchmark(cases: Sequence[str], settings: LearningSettings, folder: Path, seeds: Sequence[int] = (0, 1),
                  log=print) -> dict:
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"Unknown learning case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}.")
    torch.set_num_threads(1)  # comparable runs on a shared machine
    results = {"settings": asdict(settings), "seeds": list(seeds), "torch": torch.__version__, "cases": []}
    import transformers

    results["transformers"] = transformers.__version__
    for name in cases:
        results["cases"].append(run_case(name, settings, folder, seeds, log=log))
    return results


def _runs(case: dict, side: str) -> dict[int, dict]:
    return {r["seed"]: r for r in case["runs"] if r["side"] == side}


def gaps(case: dict, eval_set: str, step: int | None = None) -> dict[int, float]:
    """{seed: ours - reference} held-out loss on `eval_set` at `step` (default: the last evaluation)."""
    ours, ref = _runs(case, "ours"), _runs(case, "reference")
    out = {}
    for seed in sorted(set(ours) & set(ref)):
        a, b = ours[seed], ref[seed]
        i = -1 if step is None else a["steps"].index(step)
        j = -1 if step is None else b["steps"].index(step)
        out[seed] = a["eval_loss"][eval_set][i] - b["eval_loss"][eval_set][j]
    return out


def to_markdown(results: dict) -> str:
    """One table per case: held-out loss of both sides on both evaluation sets at every evaluated step."""
    lines = []
    for case in results["cases"]:
        ours, ref = _runs(case, "ours"), _runs(case, "reference")
        seeds = sorted(set(ours) & set(ref))
        if not seeds:
            continue
        steps = ours[seeds[0]]["steps"]
        lines.append(f"**{case['case'].upper()}** ({case['arch']}, `pretrain --arch {case['arch']} --objective "
                     f"{case['objective']}` vs transformers), held-out loss, seeds {', '.join(map(str, seeds))}:\n")
        header = ["step"] + [c for e in EVAL_SETS for c in (f"{e} set: ours", "reference", "ours - ref")]
        rows = []
        for k, step in enumerate(steps):
            cells = [step]
            for e in EVAL_SETS:
                a = [ours[s]["eval_loss"][e][k] for s in seeds]
                b = [ref[s]["eval_loss"][e][k] for s in seeds]
                cells += [" / ".join(f"{v:.3f}" for v in a), " / ".join(f"{v:.3f}" for v in b),
                          " / ".join(f"{x - y:+.3f}" for x, y in zip(a, b))]
            rows.append(cells)
        lines += table_lines(header, "r" * len(header), rows)
        secs = " / ".join(f"{ours[s]['seconds']:.0f} s vs {ref[s]['seconds']:.0f} s" for s in seeds)
        lines.append(f"\nTargets per evaluation set: " + ", ".join(f"{k} {v}" for k, v in case["eval_targets"].items())
                     + f"; training time (ours vs reference, per seed; evaluations included): {secs}.\n")
    return "\n".join(lines)


def plot(results: dict, output: Path, dpi: int = 110) -> Path:
    """Held-out loss against the step: one panel per case and evaluation set; ours solid, reference dashed,
    one colour per seed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cases = results["cases"]
    figure = Figure(figsize=(5.2 * len(EVAL_SETS), 3.4 * len(cases)))
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(cases), len(EVAL_SETS), squeeze=False)
    for row, case in enumerate(cases):
        for col, eval_set in enumerate(EVAL_SETS):
            ax = axes[row][col]
            for run in case["runs"]:
                style = "-" if run["side"] == "ours" else "--"
                ax.plot(run["steps"], run["eval_loss"][eval_set], style, marker="o", markersize=3,
                        color=f"C{run['seed'] % 10}", label=f"{run['side']}, seed {run['seed']}")
            ax.set_title(f"{case['case'].upper()} ({case['arch']}): {eval_set} evaluation set", fontsize=10)
            ax.set_xlabel("step")
            ax.set_ylabel("held-out loss")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    figure.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=dpi, format="png")
    return output


def write_reports(results: dict, folder: Path, stem: str = "learning_parity") -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / f"{stem}.json", "markdown": folder / f"{stem}.md", "png": folder / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n")
    paths["markdown"].write_text(to_markdown(results) + "\n")
    plot(results, paths["png"])
    return paths
