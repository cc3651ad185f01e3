"""`pretrain(args)`: one training loop on `accelerate.Accelerator` for every architecture and objective.

    from hf_xfmr.training import PretrainArguments, pretrain
    result = pretrain(PretrainArguments(arch="bert", objective="wwm", max_steps=200, output_dir="out"))
    result.final_loss, result.log_path, result.model_dir     # AutoModel.from_pretrained(result.model_dir)

The same function runs in one process, under `accelerate launch` / `torchrun` (DDP; gloo on CPU) and
under DeepSpeed ZeRO-2/3 (`--deepspeed zero2|zero3|FILE.json`, or an Accelerate config with a DeepSpeed
section). What happens, in order:

1. resolve the architecture and objective; check the output folder and, with `--resume`, the checkpoint
   (all before anything is written, so a bad checkpoint or setting leaves the folder untouched);
2. load documents, train or load the tokenizer, build examples with the objective's builder, check
   that a global micro-batch fits the data;
3. build the model (a preset + overrides, or `--model_path`), the optimizer, then `accelerator.prepare`;
4. per optimizer step: set the scheduled learning rate, run `micro_batches_per_step` micro-batches
   (gradients synchronised on the last only), check the loss on every process, clip, step; log, evaluate
   and checkpoint on schedule;
5. write the final model (safetensors, consolidated from ZeRO partitions in fp32 under DeepSpeed) and
   the tokenizer into the output folder; optionally publish it (`--push_to_hub`).

Extension points: `PretrainCallback` (observe steps, evaluations, checkpoints) and the objective table
(`hf_xfmr.training.objectives`), including its state hooks for objectives such as XLNet's memory.
"""

import dataclasses
import gc
import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from . import checkpoint as ckpt
from .arguments import PretrainArguments
from .batches import (
    BatchPlan,
    StreamBatches,
    build_examples,
    count_targets,
    count_tokens,
    eval_batches,
    split_documents,
    take_documents,
    to_device,
    train_batches,
)
from .logs import LOG_FILE, RunLog
from .objectives import (
    Objective,
    ObjectiveSettings,
    check_tokenizer,
    get_objective,
    target_histogram,
    token_accuracy_counts,
)
from .optim import build_optimizer, lr_multiplier, micro_batches_before, micro_batches_per_step, parameter_groups

TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # a checkpoint folder that has its tokenizer
RUN_CONFIG = "run_config.json"


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite (with `--nan_policy stop`)."""


class CollectiveError(RuntimeError):
    """A distributed run cannot go on: a collective operation between its processes timed out (after
    `--ddp_timeout` seconds) or lost a peer. The message names the step; the original error is the cause."""


class PretrainInterrupted(KeyboardInterrupt):
    """Ctrl-C (KeyboardInterrupt) during training. `step`: the last finished optimizer step; `checkpoint`:
    the last complete checkpoint folder in the output folder (None when none was written yet), which
    `--resume` continues from."""

    def __init__(self, step: int, checkpoint: Path | None):
        super().__init__(f"interrupted after step {step}")
        self.step, self.checkpoint = step, checkpoint


class PretrainCallback:
    """Override any of these to observe a run; `run` is the `PretrainRun` (model, optimizer, step, ...).

    Every process calls them. `on_checkpoint` gets the checkpoint folder while it is still being written
    (`step_N.tmp`): files added there become part of the checkpoint.
    """

    def on_train_begin(self, run: "PretrainRun") -> None: ...

    def on_micro_batch(self, run: "PretrainRun", batch: dict) -> None: ...

    def on_step_end(self, run: "PretrainRun", record: dict) -> None: ...

    def on_evaluate(self, run: "PretrainRun", metrics: dict) -> None: ...

    def on_checkpoint(self, run: "PretrainRun", path: Path) -> None: ...

    def on_train_end(self, run: "PretrainRun", result: "PretrainResult") -> None: ...


@dataclass
class PretrainRun:
    """The live objects of a run, as callbacks see them."""

    args: PretrainArguments
    accelerator: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tokenizer: Any
    objective: Objective
    unwrapped_model: torch.nn.Module  # the model without its DDP / DeepSpeed wrapper (same parameters)
    step: int = 0
    objective_state: dict = field(default_factory=dict)


@dataclass
class PretrainResult:
    """What `pretrain` returns.

    output_dir: the run folder; model_dir: where the final model + tokenizer are (`from_pretrained` it);
    log_path: the JSON-lines log; final_loss: training loss of the last step (mean over micro-batches
    and processes); eval_metrics: the last evaluation; counters: batches without targets, skipped steps;
    model: the trained model (unwrapped; under DeepSpeed the consolidated copy on the main process).
    """

    output_dir: Path
    model_dir: Path
    log_path: Path
    final_loss: float | None
    step: int
    eval_metrics: dict[str, float]
    counters: dict[str, int]
    world_size: int
    distributed_type: str
    backend: str | None
    model: Any = None
    tokenizer: Any = None


# ----------------------------------------------------------------------------------------------
# Setup helpers
# ----------------------------------------------------------------------------------------------

# The DeepSpeed configs shipped with the package (`--deepspeed zero2`, or by name in an Accelerate config).
DEEPSPEED_CONFIGS = Path(__file__).with_name("deepspeed_configs")


def shipped_deepspeed_configs() -> list[str]:
    """Names of the DeepSpeed configs shipped with hf_xfmr (zero2, zero3)."""
    return sorted(p.stem for p in DEEPSPEED_CONFIGS.glob("*.json"))


def resolve_deepspeed_config(value: str, source: str = "--deepspeed") -> Path:
    """The DeepSpeed JSON file meant by `value`: a shipped config by name (zero2, zero3), or a file path
    (relative to the current folder). Raises a ValueError naming `source` when it is neither."""
    names = shipped_deepspeed_configs()
    path = DEEPSPEED_CONFIGS / f"{value}.json" if value in names else Path(value).expanduser()
    if not path.is_file():
        raise ValueError(
            f"{source} {value}: neither a DeepSpeed config shipped with hf_xfmr ({', '.join(names)}) nor an existing "
            f"file (a relative path is read from the current folder, {os.getcwd()}). Name a shipped config "
            "(e.g. --deepspeed zero2) or give the path of a DeepSpeed JSON config.")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{source} {value}: {path} is not valid JSON ({err}).") from None
    if not isinstance(config, dict) or not isinstance(config.get("zero_optimization"), dict):
        raise ValueError(f"{source} {value}: {path} has no \"zero_optimization\" section; start from a shipped "
                         f"config ({DEEPSPEED_CONFIGS}/zero2.json or zero3.json).")
    return path.resolve()


def _launched_with_deepspeed() -> bool:
    """`accelerate launch` with an Accelerate config whose distributed_type is DEEPSPEED."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true", "yes")


def _using_deepspeed(args: PretrainArguments) -> bool:
    return bool(args.deepspeed) or _launched_with_deepspeed()


def deepspeed_config_file(args: PretrainArguments) -> Path | None:
    """The DeepSpeed config file of the run: `--deepspeed`'s, else the one an Accelerate DeepSpeed config
    names (its `deepspeed_config_file`, which may also be a shipped name); None without DeepSpeed or when the
    Accelerate config describes DeepSpeed without a file (Accelerate then builds the config itself)."""
    if args.deepspeed:
        return resolve_deepspeed_config(args.deepspeed)
    named = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if _launched_with_deepspeed() and named != "none":
        return resolve_deepspeed_config(named, source="The Accelerate config's deepspeed_config_file")
    return None


def make_accelerator(args: PretrainArguments):
    """An `Accelerator` for this machine: CPU processes talk over gloo; DeepSpeed compiles nothing on CPU."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

    cpu = not torch.cuda.is_available()
    if cpu and args.mixed_precision == "fp16":
        raise ValueError("--mixed_precision fp16 needs a GPU (CPU autocast runs in bfloat16); use bf16 on CPU.")
    deepspeed = _using_deepspeed(args)
    ds_file = deepspeed_config_file(args)
    if deepspeed and "LOCAL_RANK" not in os.environ:
        raise ValueError(
            "DeepSpeed runs in processes started by a launcher (it sets up a process group even for one process): "
            "accelerate launch --multi_gpu --num_processes N -m hf_xfmr.cli pretrain --deepspeed ... or "
            "torchrun --standalone --nproc_per_node N -m hf_xfmr.cli pretrain --deepspeed ... (N=1: one process).")
    if cpu and deepspeed:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed.ops

        # Its shared-memory collective is a C++ extension compiled on first use (1-2 minutes); gloo
        # gives identical results, so never build it.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    # A finite collective timeout: a process that stops taking part makes the others fail (with an error
    # naming the step, see `pretrain`) instead of waiting for ever.
    timeout = timedelta(seconds=args.ddp_timeout)
    handlers = [InitProcessGroupKwargs(backend="gloo", timeout=timeout) if cpu else InitProcessGroupKwargs(
        timeout=timeout)] if launched > 1 else []
    if launched > 1 and resolve_objective(args)[1].unused_parameters:
        from accelerate.utils import DistributedDataParallelKwargs

        handlers.append(DistributedDataParallelKwargs(find_unused_parameters=True))
    mixed = args.mixed_precision if args.mixed_precision != "no" else None
    # Accelerate keeps its state in process-wide singletons: forget the previous run's settings (mixed
    # precision, DeepSpeed plugin) so `pretrain` can be called again in the same process. The process
    # group (PartialState) is kept.
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    plugin = None
    if ds_file is not None:
        # Built here (not by Accelerate from the environment) so a config named by a relative path or by
        # a shipped name works from any folder. ZeRO-3 builds the model outside deepspeed.zero.Init unless
        # the Accelerate config asks for it (zero3_init_flag).
        zero3_init = os.environ.get("ACCELERATE_DEEPSPEED_ZERO3_INIT", "false").lower() == "true"
        plugin = DeepSpeedPlugin(hf_ds_config=str(ds_file), zero3_init_flag=zero3_init)
    try:
        # DeepSpeed finds the CPU itself; Accelerator(cpu=True) would switch DeepSpeed off.
        accelerator = Accelerator(cpu=cpu and not deepspeed, mixed_precision=mixed, kwargs_handlers=handlers,
                                  deepspeed_plugin=plugin)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"Cannot set up training (--mixed_precision {args.mixed_precision}): {err}") from None
    if launched > 1 and accelerator.num_processes != launched:
        raise RuntimeError(
            f"{launched} processes were launched but each one trains alone (distributed type "
            f"{accelerator.distributed_type}). On CPU launch with `accelerate launch --multi_gpu --num_processes N` "
            "or `torchrun --nproc_per_node N` (not `accelerate launch --cpu`, which starts one process).")
    if launched > 1 and torch.distributed.is_initialized():
        # The process group outlives a run (pretrain called again in the same processes keeps the first
        # run's group): give it this run's timeout.
        set_timeout = getattr(torch.distributed.distributed_c10d, "_set_pg_timeout", None)
        if set_timeout is not None:
            set_timeout(timeout)
    return accelerator


def _config_fields(config_class) -> set[str]:
    import dataclasses

    if dataclasses.is_dataclass(config_class):
        return {f.name for f in dataclasses.fields(config_class)}
    return {k for k in vars(config_class) if not k.startswith("_")}


def parse_config_overrides(overrides: str | dict | None) -> dict[str, Any]:
    """'hidden_size=64,num_hidden_layers=2' (or a mapping, from YAML) -> dict; values parsed as JSON when
    they are numbers / true / false / null, else kept as strings."""
    if not overrides:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out = {}
    for item in str(overrides).split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config_overrides: {item!r} is not of the form field=value "
                             "(e.g. --config_overrides hidden_size=128,num_hidden_layers=4).")
        value = value.strip()
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def resolve_objective(args: PretrainArguments):
    """(architecture, objective, model class) for `args.arch` / `args.objective`, or a clear ValueError."""
    import hf_xfmr  # noqa: F401  (registers every architecture)
    from hf_xfmr.models import get_architecture

    arch = get_architecture(args.arch)
    if not arch.objectives:
        raise ValueError(f"The architecture {arch.name!r} has no pretraining objective.")
    name = args.objective or arch.objectives[0]
    if name not in arch.objectives:
        raise ValueError(f"The architecture {arch.name!r} does not pretrain with {name!r}; its objectives are: "
                         f"{', '.join(arch.objectives)} (--objective).")
    objective = get_objective(name)
    try:
        model_class = arch.model_class(objective.task)
    except ValueError as err:
        raise ValueError(f"{name!r} trains a {objective.task!r} model: {err}") from None
    return arch, objective, model_class


def _load_documents(source, args: PretrainArguments, streaming: bool):
    from datasets.exceptions import DatasetGenerationError

    from hf_xfmr.data import load_corpus

    if source and Path(source).is_file() and Path(source).stat().st_size == 0:
        raise ValueError(f"The dataset file {source} is empty: there is nothing to train on.")
    try:
        return load_corpus(source, text_column=args.text_column, split=args.dataset_split, streaming=streaming,
                           max_documents=args.max_documents)
    except FileNotFoundError as err:
        raise ValueError(f"Dataset {source}: {err}") from None
    except DatasetGenerationError as err:
        cause = err.__cause__ or err
        raise ValueError(f"Cannot read the dataset {source} ({type(cause).__name__}: {cause}).") from None


def _tokenizer_kind(arch_name: str) -> str:
    from hf_xfmr.data.tokenizers import _ALIASES

    if arch_name not in _ALIASES:
        raise ValueError(f"No tokenizer recipe for the architecture {arch_name!r}: train one and pass --tokenizer PATH.")
    return arch_name


def build_config(arch, model_class, tokenizer, objective: Objective, args: PretrainArguments):
    """The model config: `--model_path`'s, or the preset with token ids, objective defaults and overrides."""
    if args.model_path:
        from ..models.conversion import checkpoint_config

        config = checkpoint_config(args.model_path)  # a transformers checkpoint's is converted, as its weights are
        if config.model_type != arch.model_type:
            raise ValueError(f"--model_path {args.model_path} holds a {config.model_type!r} model, not {arch.name!r} "
                             f"({arch.model_type!r}); pass the matching --arch.")
        return config
    fields = _config_fields(arch.config_class)
    values: dict[str, Any] = {}
    if "vocab_size" in fields:
        values["vocab_size"] = len(tokenizer)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "mask_token_id"):
        token_id = getattr(tokenizer, name, None)
        if name in fields and token_id is not None:
            values[name] = int(token_id)
    # A callable default is computed from the run's arguments (e.g. XLNet's reuse_len from max_seq_length).
    values.update({k: (v(args) if callable(v) else v) for k, v in objective.config_defaults.items() if k in fields})
    overrides = parse_config_overrides(args.config_overrides)
    unknown = sorted(k for k in overrides if k not in fields)
    if unknown:
        raise ValueError(f"--config_overrides: {arch.config_class.__name__} has no field(s) {', '.join(unknown)}.")
    values.update(overrides)
    try:
        return arch.config_class.from_preset(args.preset, **values)
    except (ValueError, TypeError) as err:
        raise ValueError(f"Cannot build the {arch.name} config (--preset {args.preset}): {err}") from None


def _check_sequence_length(model, tokenizer, length: int, decoder_length: int | None = None) -> None:
    """One no-grad forward of a full-length row: a too-short position table fails here, with a clear message.

    An encoder-decoder also gets a full-length decoder row: `decoder_length` tokens (the objective's longest
    target, `Objective.decoder_length`), else `length`."""
    special = set(getattr(tokenizer, "all_special_ids", []))
    token = next(i for i in range(len(tokenizer)) if i not in special)
    ids = torch.full((1, length), token, dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if getattr(model.config, "is_encoder_decoder", False):
        decoder_length = length if decoder_length is None else decoder_length
        inputs["decoder_input_ids"] = torch.full((1, decoder_length), token, dtype=torch.long)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(**inputs)
    except (IndexError, RuntimeError, ValueError) as err:
        rows = f"{length} tokens" if "decoder_input_ids" not in inputs else \
            f"{length} input tokens and {inputs['decoder_input_ids'].shape[1]} target tokens"
        raise ValueError(
            f"--max_seq_length {length}: the model cannot take rows of {rows} ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}). Lower --max_seq_length or raise the position table, e.g. "
            f"--config_overrides max_position_embeddings={max(length, decoder_length or 0) + 2}.") from None
    finally:
        model.train(was_training)


def _fill_deepspeed_config(accelerator, args: PretrainArguments, world_size: int) -> None:
    """Fill the "auto" entries of the DeepSpeed config and reject settings that fight this loop."""
    plugin = accelerator.state.deepspeed_plugin
    config = plugin.deepspeed_config
    for section in ("optimizer", "scheduler"):
        if section in config:
            raise ValueError(f"The DeepSpeed config has a {section!r} section; hf-xfmr pretrain builds its own "
                             f"(--optimizer / --lr_scheduler). Remove the section from the DeepSpeed config.")

    def fill(key, value):
        if config.get(key, "auto") == "auto":
            config[key] = value

    fill("train_micro_batch_size_per_gpu", args.per_device_train_batch_size)
    fill("gradient_accumulation_steps", 1)
    fill("train_batch_size", args.per_device_train_batch_size * world_size)
    fill("gradient_clipping", args.clip_norm or 0.0)
    if config["gradient_accumulation_steps"] != 1:
        raise ValueError("Set gradient_accumulation_steps to \"auto\" in the DeepSpeed config and use "
                         "--gradient_accumulation_steps: the loop accumulates micro-batches itself.")
    config.setdefault("zero_allow_untested_optimizer", True)
    if args.nan_policy == "skip":
        raise ValueError("--nan_policy skip is not available under DeepSpeed (its engine applies the update inside "
                         "the backward pass, before the loss can be checked on every process); use stop.")


def _zero3_init() -> bool:
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def _zero_loss(outputs) -> torch.Tensor:
    """A zero whose backward pass is that of a batch with targets: a batch without targets still runs
    backward, so every process takes part in the gradient collectives, and its gradients are exactly zero.

    It goes through the model's loss (made finite first) whenever there is one, so backward reaches the
    same modules in the same order as the loss of a batch with targets does: under ZeRO-3 every module
    whose output gets a gradient gathers its parameters then, so a process whose backward took another
    path (e.g. through every output head) would wait on other collectives than the rest, for ever.
    Without a loss, the path runs through every differentiable output."""
    loss = outputs.get("loss") if hasattr(outputs, "get") else None
    if torch.is_tensor(loss) and loss.requires_grad:
        return torch.nan_to_num(loss.float(), nan=0.0, posinf=0.0, neginf=0.0) * 0.0
    parts = [v.float().sum() for v in outputs.values() if torch.is_tensor(v) and v.requires_grad and v.is_floating_point()]
    if not parts:
        raise RuntimeError("The model returned no differentiable output for a batch without targets.")
    return torch.stack(parts).sum() * 0.0


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def evaluate(run: PretrainRun, batches: list) -> dict[str, float]:
    """Loss (weighted by targets), perplexity, masked-token accuracy (+ objective metrics), over all processes.

    `eval_majority_accuracy` is the accuracy of always predicting the most frequent target token of the
    evaluation data: the baseline a model that learned nothing but unigram statistics would reach (it
    is even given the held-out frequencies, so beating it means the model uses context).
    """
    accelerator, model, objective = run.accelerator, run.model, run.objective
    model.eval()
    names: list[str] = []
    sums: dict[str, float] = {"loss": 0.0, "targets": 0.0, "correct": 0.0}
    histogram = torch.zeros(accelerator.unwrap_model(model).config.vocab_size, dtype=torch.float64)
    try:
        for batch, counts in batches:
            batch = to_device(batch, accelerator.device)
            inputs = objective.step_inputs(batch, to_device(objective.initial_state(len(batch["input_ids"])),
                                                             accelerator.device))
            outputs = model(**inputs)
            if not counts:
                continue
            labels = batch["labels"]
            targets = count_targets(batch)
            if targets and outputs.loss is not None:
                sums["loss"] += float(outputs.loss) * targets
                sums["targets"] += targets
                logits = outputs[objective.logits_key]
                correct, _ = token_accuracy_counts(logits, labels, shift=objective.shift_labels)
                sums["correct"] += correct
                histogram += target_histogram(labels, histogram.numel(), shift=objective.shift_labels)
            for name, (num, den) in objective.metrics(batch, outputs).items():
                if name not in names:
                    names.append(name)
                sums[f"{name}.num"] = sums.get(f"{name}.num", 0.0) + num
                sums[f"{name}.den"] = sums.get(f"{name}.den", 0.0) + den
    finally:
        model.train()
    keys = ["loss", "targets", "correct"] + [f"{n}.{p}" for n in sorted(names) for p in ("num", "den")]
    totals = torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64, device=accelerator.device)
    histogram = histogram.to(accelerator.device)
    if accelerator.num_processes > 1:
        totals = accelerator.reduce(totals, reduction="sum")
        histogram = accelerator.reduce(histogram, reduction="sum")
    totals = dict(zip(keys, totals.tolist()))
    metrics: dict[str, float] = {}
    if totals["targets"]:
        loss = totals["loss"] / totals["targets"]
        metrics["eval_loss"] = loss
        metrics["eval_perplexity"] = math.exp(loss) if loss < 700 else float("inf")
        metrics["eval_accuracy"] = totals["correct"] / totals["targets"]
        metrics["eval_majority_accuracy"] = float(histogram.max()) / totals["targets"]
    for name in sorted(names):
        if totals[f"{name}.den"]:
            metrics[f"eval_{name}"] = totals[f"{name}.num"] / totals[f"{name}.den"]
    return metrics


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------

def pretrain(args: PretrainArguments, callbacks=()) -> PretrainResult:
    """Pretrain `args.arch` with `args.objective`; see the module docstring. Bad settings raise ValueError
    (`CheckpointError` for a checkpoint that cannot be resumed) before anything is written."""
    from accelerate.utils import set_seed

    arch, objective, model_class = resolve_objective(args)
    deepspeed = _using_deepspeed(args)
    if args.push_to_hub:
        _check_publishing(args.push_to_hub)
    accelerator = make_accelerator(args)
    world, rank, is_main = accelerator.num_processes, accelerator.process_index, accelerator.is_main_process
    output_dir = Path(args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file, not a folder: choose another path.")

    # 1. The output folder and the checkpoint to resume: decided before anything is written.
    resume_path = ckpt.resolve_resume(args.resume, output_dir) if args.resume else None
    if resume_path is not None:
        ckpt.check_unfinished(resume_path, args.max_steps, output_dir)
    if resume_path is None and not args.overwrite_output_dir and (
            ckpt.list_checkpoints(output_dir) or (output_dir / LOG_FILE).exists()):
        raise ValueError(f"{output_dir} holds an earlier run. Pass --resume to continue it, --overwrite_output_dir "
                         "to start afresh there, or choose another --output_dir.")
    if args.streaming and not args.eval_dataset and args.eval_fraction and is_main:
        print("note: a streamed corpus has no held-out split; pass --eval_dataset to evaluate.")

    if args.model_path:  # a Hub repo id: its snapshot in the Hugging Face cache, downloaded if needed
        from ..models.hub_loading import resolve_checkpoint

        args = dataclasses.replace(args, model_path=str(resolve_checkpoint(args.model_path, revision=args.revision)))

    # 2. Documents, tokenizer, examples.
    documents = _load_documents(args.dataset, args, args.streaming)
    tokenizer_dir = output_dir / TOKENIZER_DIR
    if args.tokenizer:
        tokenizer = _load_tokenizer(args.tokenizer)
    elif resume_path is not None:
        if not tokenizer_dir.is_dir():
            raise ckpt.CheckpointError(f"{tokenizer_dir} is missing: the tokenizer the checkpoint was trained with is "
                                       "needed to resume. Pass it with --tokenizer PATH.")
        tokenizer = _load_tokenizer(tokenizer_dir)
    elif args.model_path and any((Path(args.model_path) / name).is_file() for name in TOKENIZER_FILES):
        tokenizer = _load_tokenizer(args.model_path)  # the starting checkpoint's own
    else:
        tokenizer = None  # trained below, once the data checks have passed
    set_seed(args.seed)
    if args.streaming:
        train_docs, eval_docs = documents, None
    else:
        train_docs, eval_docs = split_documents(documents, args.eval_fraction if not args.eval_dataset else 0.0,
                                                args.seed)
    if args.eval_dataset:
        eval_docs = _load_documents(args.eval_dataset, args, False)
    if tokenizer is None:
        tokenizer = _train_tokenizer(accelerator, arch.name, train_docs, args, tokenizer_dir)
    check_tokenizer(objective, tokenizer)
    from hf_xfmr.data.tokenizers import fit_tokenizer_to_model

    fit_tokenizer_to_model(tokenizer, arch.name)  # e.g. a BERT --tokenizer for DistilBERT: no token_type_ids
    settings = objective.resolve(ObjectiveSettings(
        max_seq_length=args.max_seq_length, mlm_probability=args.mlm_probability, short_seq_prob=args.short_seq_prob,
        seed=args.seed, arch=arch.name))
    collator = objective.make_collator(tokenizer, settings)
    with accelerator.main_process_first():
        train_examples = None if args.streaming else build_examples(objective, tokenizer, train_docs, settings)
        eval_examples = None
        if eval_docs is not None:
            eval_examples = build_examples(objective, tokenizer, eval_docs, settings, required=False)
            if eval_examples is None and is_main:
                print(f"note: no {objective.name} example could be built from the {len(eval_docs)} held-out "
                      "document(s); there will be no evaluation (raise --eval_fraction or pass --eval_dataset).")
    plan = None
    if train_examples is not None:
        plan = BatchPlan(len(train_examples), args.per_device_train_batch_size, world, rank, objective.layout,
                         args.seed)
    elif objective.layout == "contiguous":
        raise ValueError(f"The {objective.name!r} objective reads contiguous streams, which needs the whole corpus: "
                         "drop --streaming.")

    # 3. Model and optimizer.
    set_seed(args.seed)
    config = build_config(arch, model_class, tokenizer, objective, args)
    if getattr(config, "vocab_size", len(tokenizer)) < len(tokenizer):
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size}: use the "
                         "model's own tokenizer (--tokenizer) or a larger vocab_size.")
    extra = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
    if args.model_path:
        from ..models.weights import check_weight_files

        check_weight_files(args.model_path)  # a ValueError naming a truncated or missing file, as every command
        model = model_class.from_pretrained(args.model_path, **extra)
    else:
        model = model_class._from_config(config, **extra)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if not (deepspeed and _zero3_init()):
        decoder_length = objective.decoder_length(settings) if objective.decoder_length is not None else None
        _check_sequence_length(model, tokenizer, args.max_seq_length, decoder_length)
    resume_settings = {
        "arch": arch.name, "objective": objective.name, "seed": args.seed, "world_size": world,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "batch_size_warmup_steps": args.batch_size_warmup_steps, "max_seq_length": args.max_seq_length,
        "num_train_examples": len(train_examples) if train_examples is not None else None, "deepspeed": deepspeed,
    }
    state: dict[str, Any] = {}
    if resume_path is not None:
        state = ckpt.validate_checkpoint(resume_path, model.config, resume_settings, world)
    optimizer = build_optimizer(args.optimizer, parameter_groups(model, args.weight_decay), lr=args.learning_rate,
                                betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                                weight_decay=args.weight_decay)
    if resume_path is not None and not deepspeed:
        ckpt.load_model_weights(model, resume_path / "model")
        ckpt.load_optimizer(optimizer, resume_path)

    # From here on the run writes into its output folder.
    accelerator.wait_for_everyone()
    if is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
        if resume_path is None and args.overwrite_output_dir:
            shutil.rmtree(ckpt.checkpoint_root(output_dir), ignore_errors=True)
        (output_dir / RUN_CONFIG).write_text(json.dumps({**args.to_dict(), "world_size": world}, indent=1))
    if deepspeed:
        _fill_deepspeed_config(accelerator, args, world)
    unwrapped = model
    model, optimizer = accelerator.prepare(model, optimizer)
    if deepspeed and resume_path is not None:
        model.load_checkpoint(str(resume_path), tag="deepspeed", load_optimizer_states=True,
                              load_lr_scheduler_states=False)
    accelerator.wait_for_everyone()

    # 4. Train.
    run = PretrainRun(args, accelerator, model, optimizer, tokenizer, objective, unwrapped)
    start_step = int(state.get("step", 0))
    counters = dict(state.get("counters", {"batches_without_targets": 0, "skipped_steps": 0}))
    data_state = None
    if resume_path is not None:
        process_state, data_state, objective_state = ckpt.read_process_state(resume_path, rank, accelerator.device)
        ckpt.set_rng_state(process_state["tensors"], process_state["extra"])
        run.objective_state = objective_state if objective_state is not None else {}
    first_micro = micro_batches_before(start_step, args.gradient_accumulation_steps, args.batch_size_warmup_steps)
    stream = None
    if train_examples is not None:
        batches = train_batches(train_examples, plan, collator, first_micro, args.dataloader_num_workers)
    else:
        stream = StreamBatches(train_docs, objective, tokenizer, settings, collator, args.per_device_train_batch_size,
                               world, rank, args.seed, data_state)
        batches = iter(stream)
    if resume_path is None or (objective.stateful and not run.objective_state):
        run.objective_state = to_device(objective.initial_state(args.per_device_train_batch_size), accelerator.device)
    eval_list = None
    if eval_examples is not None and len(eval_examples):
        eval_list = eval_batches(eval_examples, args.eval_batch_size, world, rank, collator, args.seed,
                                 args.max_eval_examples)
    log = RunLog(output_dir, is_main, args.report_to_tensorboard, resume_step=start_step if resume_path else None)
    from tqdm.auto import tqdm

    bar = tqdm(total=args.max_steps, initial=start_step, desc=f"pretraining {arch.name} ({objective.name})",
               unit="step", disable=not (is_main and args.progress_bar), dynamic_ncols=True)
    for callback in callbacks:
        callback.on_train_begin(run)

    step, final_loss, eval_metrics = start_step, None, {}
    window = {"loss": 0.0, "n": 0, "tokens": 0, "time": time.perf_counter()}
    last_saved = start_step if resume_path is not None else None
    model.train()
    activity = f"step {step + 1}"  # what the run was doing, for the error of a collective that fails
    try:
        while step < args.max_steps:
            activity = f"step {step + 1}"
            n_micro = micro_batches_per_step(step, args.gradient_accumulation_steps, args.batch_size_warmup_steps)
            lr = args.learning_rate * lr_multiplier(args.lr_scheduler, step, args.max_steps, args.warmup,
                                                    args.decay_ratio, args.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # loss sum, micro-batches with targets, without targets, non-finite, tokens
            stats = torch.zeros(5, dtype=torch.float64)
            for i in range(n_micro):
                m, batch = next(batches)
                if objective.layout == "contiguous" and plan is not None and m % plan.per_epoch == 0 and m > 0:
                    run.objective_state = to_device(objective.initial_state(args.per_device_train_batch_size),
                                                     accelerator.device)  # the streams start over
                batch = to_device(batch, accelerator.device)
                for callback in callbacks:
                    callback.on_micro_batch(run, batch)
                last = i == n_micro - 1
                accelerator.sync_gradients = last
                with nullcontext() if last else accelerator.no_sync(model):
                    outputs = model(**objective.step_inputs(batch, run.objective_state))
                    run.objective_state = objective.update_state(batch, outputs, run.objective_state)
                    loss = outputs.loss
                    if count_targets(batch) == 0 or loss is None:
                        stats[2] += 1
                        backward_loss = _zero_loss(outputs)
                    else:
                        value = float(loss.detach())
                        if math.isfinite(value):
                            stats[0] += value
                            stats[1] += 1
                        else:
                            stats[3] += 1
                        backward_loss = loss / n_micro
                    accelerator.backward(backward_loss)
                stats[4] += count_tokens(batch)
            if world > 1:
                stats = accelerator.reduce(stats.to(accelerator.device), reduction="sum").cpu()
            loss_sum, with_targets, without_targets, non_finite, tokens = stats.tolist()
            counters["batches_without_targets"] += int(without_targets)
            grad_norm = None
            if non_finite:
                if args.nan_policy == "stop":
                    raise NonFiniteLossError(
                        f"The training loss is not finite (NaN or inf) at step {step + 1} (in {int(non_finite)} "
                        f"micro-batch(es)). Lower --learning_rate, keep --max_grad_norm clipping on, try bf16 instead "
                        "of fp16, or pass --nan_policy skip to skip such steps.")
                optimizer.zero_grad(set_to_none=True)
                counters["skipped_steps"] += 1
            else:
                norm = accelerator.clip_grad_norm_(model.parameters(), args.clip_norm or float("inf"))
                grad_norm = float(norm) if norm is not None else None
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            step += 1
            run.step = step
            step_loss = loss_sum / with_targets if with_targets else None
            if step_loss is not None:
                final_loss = step_loss
                window["loss"] += step_loss
                window["n"] += 1
            window["tokens"] += tokens
            record = {"step": step, "loss": step_loss, "learning_rate": lr, "grad_norm": grad_norm,
                      "epoch": _epoch(plan, stream, step, args)}
            for callback in callbacks:
                callback.on_step_end(run, record)
            bar.update(1)
            if step % args.logging_steps == 0 or step == args.max_steps:
                elapsed = max(time.perf_counter() - window["time"], 1e-9)
                entry = {"step": step, "epoch": record["epoch"],
                         "loss": window["loss"] / window["n"] if window["n"] else None,
                         "learning_rate": lr, "grad_norm": grad_norm,
                         "tokens_per_second": window["tokens"] / elapsed, **counters}
                log.write(entry)
                bar.set_postfix(loss=f"{entry['loss']:.4f}" if entry["loss"] is not None else "-",
                                tok_s=f"{entry['tokens_per_second']:.0f}")
                window = {"loss": 0.0, "n": 0, "tokens": 0, "time": time.perf_counter()}
            if eval_list and ((args.eval_steps and step % args.eval_steps == 0) or step == args.max_steps):
                activity = f"the evaluation after step {step}"
                eval_metrics = evaluate(run, eval_list)
                log.write({"step": step, "epoch": record["epoch"], **eval_metrics})
                for callback in callbacks:
                    callback.on_evaluate(run, eval_metrics)
                window["time"] = time.perf_counter()  # evaluation time is not training throughput
            if (args.save_steps and step % args.save_steps == 0) or (
                    step == args.max_steps and (args.save_steps or deepspeed)):
                activity = f"the checkpoint of step {step}"
                _save(run, callbacks, step, counters, resume_settings, plan, stream, args)
                last_saved = step
                window["time"] = time.perf_counter()
        bar.close()

        # 5. The final model.
        activity = f"the export of the final model (after step {step})"
        final_model = _export_final(run, model_class, last_saved, deepspeed, output_dir)
        if is_main:
            tokenizer.save_pretrained(output_dir)
        accelerator.wait_for_everyone()
        if args.push_to_hub and is_main:
            publish(final_model, tokenizer, args, eval_metrics, output_dir / LOG_FILE)
    except KeyboardInterrupt:
        raise PretrainInterrupted(step, ckpt.latest_checkpoint(output_dir)) from None
    except Exception as err:
        if world > 1 and _is_collective_failure(err):
            raise CollectiveError(_collective_failure_message(err, activity, world, args)) from err
        raise
    finally:
        bar.close()
        log.close()
    state_obj = accelerator.state
    result = PretrainResult(
        output_dir=output_dir, model_dir=output_dir, log_path=output_dir / LOG_FILE, final_loss=final_loss,
        step=step, eval_metrics=eval_metrics, counters=counters, world_size=world,
        distributed_type=str(state_obj.distributed_type.value if hasattr(state_obj.distributed_type, "value")
                             else state_obj.distributed_type),
        backend=getattr(state_obj, "backend", None), model=final_model, tokenizer=tokenizer)
    for callback in callbacks:
        callback.on_train_end(run, result)
    if world > 1:  # free the engine / DDP wrapper before the process group goes (gloo can hang at exit)
        del run, model, optimizer
        accelerator.free_memory()
        gc.collect()
    return result


def _is_collective_failure(err: BaseException) -> bool:
    """Whether `err` is a collective operation between processes that timed out or lost its peer (torch's
    distributed errors; gloo reports its timeouts and closed connections as plain RuntimeErrors)."""
    dist_error = getattr(torch.distributed, "DistError", None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(sign in text for sign in (
        "Timed out waiting", "gloo/transport", "Connection closed by peer", "Connection reset by peer"))


def _collective_failure_message(err: BaseException, activity: str, world: int, args: PretrainArguments) -> str:
    first_line = (str(err).strip().splitlines() or [""])[0]
    return (f"The run stopped in {activity} (of {args.max_steps} steps): a collective operation between the "
            f"{world} processes did not complete ({type(err).__name__}: {first_line[:300]}). Another process stopped "
            "taking part: it failed (see its own error), hangs, or ran other collectives than this one (under ZeRO-3 "
            "every process must run the same modules in the same order). Collectives wait --ddp_timeout seconds "
            f"(now {args.ddp_timeout:g}) before they fail; raise it if a step legitimately takes longer.")


def _epoch(plan: BatchPlan | None, stream, step: int, args: PretrainArguments) -> float:
    if plan is None:
        return float(stream.epoch) if stream is not None else 0.0
    used = micro_batches_before(step, args.gradient_accumulation_steps, args.batch_size_warmup_steps)
    return round(plan.epoch_of(used), 4)


def _save(run: PretrainRun, callbacks, step: int, counters: dict, settings: dict, plan, stream, args) -> Path:
    accelerator = run.accelerator
    is_main = accelerator.is_main_process
    tmp = ckpt.begin_checkpoint(args.output_dir, step, is_main)
    accelerator.wait_for_everyone()
    unwrapped = run.unwrapped_model
    if _using_deepspeed(run.args):
        run.model.save_checkpoint(str(tmp), tag="deepspeed")
        if is_main:
            unwrapped.config.to_json_file(str(tmp / "config.json"))
    elif is_main:
        unwrapped.save_pretrained(tmp / "model")
        inner = getattr(run.optimizer, "optimizer", run.optimizer)
        ckpt.save_optimizer(inner, tmp)
    ckpt.write_process_state(tmp, accelerator.process_index, run.objective_state,
                             stream.state() if stream is not None else None)
    for callback in callbacks:
        callback.on_checkpoint(run, tmp)
    accelerator.wait_for_everyone()
    final = tmp.with_name(f"step_{step}")
    if is_main:
        micro = micro_batches_before(step, args.gradient_accumulation_steps, args.batch_size_warmup_steps)
        final = ckpt.commit_checkpoint(tmp, {
            "step": step, "micro_batches": micro, "epoch": _epoch(plan, stream, step, args), "counters": counters,
            "settings": settings, "args": args.to_dict()}, args.save_total_limit)
    accelerator.wait_for_everyone()
    return final


def _export_final(run: PretrainRun, model_class, last_saved: int | None, deepspeed: bool, output_dir: Path):
    """Write the final model to `output_dir` (main process); returns it there (None elsewhere)."""
    accelerator = run.accelerator
    if not deepspeed:
        model = run.unwrapped_model
        if accelerator.is_main_process:
            model.save_pretrained(output_dir)
            return model
        return None
    # DeepSpeed: the fp32 master weights, consolidated from the ZeRO partitions of the final checkpoint.
    path = ckpt.checkpoint_root(output_dir) / f"step_{last_saved}"
    model = None
    if accelerator.is_main_process:
        model = export_deepspeed_checkpoint(path, model_class, run.unwrapped_model.config, output_dir)
    accelerator.wait_for_everyone()
    return model


def export_deepspeed_checkpoint(path: Path, model_class, config, out: Path):
    """A consolidated fp32 model from a DeepSpeed checkpoint folder, saved as safetensors in `out`."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state_dict = get_fp32_state_dict_from_zero_checkpoint(str(path), tag="deepspeed")
    model = model_class(config)
    ckpt_missing, unexpected = model.load_state_dict(state_dict, strict=False)
    tied = ckpt._tied_names(model)
    missing = [k for k in ckpt_missing if k not in tied]
    if missing or unexpected:
        raise ckpt.CheckpointError(f"The DeepSpeed checkpoint {path} does not fit the model: missing {missing[:5]}, "
                                   f"unexpected {unexpected[:5]}.")
    model.tie_weights()
    model.save_pretrained(out)
    return model


def _load_tokenizer(path):
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.exists():
        raise ValueError(f"--tokenizer {path}: no such folder.")
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as err:
        raise ValueError(f"--tokenizer {path}: cannot load a tokenizer from it ({err}).") from None


def _train_tokenizer(accelerator, arch_name: str, train_docs, args: PretrainArguments, folder: Path):
    """Train on the main process, save to the output folder, load everywhere (every process gets the same
    vocabulary: WordPiece/Unigram training is not reproducible run to run)."""
    from hf_xfmr.data import train_tokenizer

    kind = _tokenizer_kind(arch_name)
    if accelerator.is_main_process:
        texts = take_documents(train_docs, 20000) if args.streaming else train_docs
        tokenizer = train_tokenizer(kind, texts, vocab_size=args.vocab_size,
                                    model_max_length=max(512, args.max_seq_length))
        folder.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return _load_tokenizer(folder)


# ----------------------------------------------------------------------------------------------
# Publishing (the end of a run)
# ----------------------------------------------------------------------------------------------

def _check_publishing(repo_id: str) -> None:
    """Refuse a --push_to_hub that is no Hub repository id before training, not after it."""
    from hf_xfmr.hub import check_repo_id

    check_repo_id(repo_id, error=ValueError)


def publish(model, tokenizer, args: PretrainArguments, metrics: dict, log_path: Path) -> None:
    """`--push_to_hub REPO`: export the final model as a self-contained Hub folder (model card with the
    evaluation metrics, the training settings and the loss curve of `log.jsonl`: `hub.cards.pretrain_card_fields`)
    and upload it, through `hf_xfmr.hub.publish`. Credentials come from HF_TOKEN or `hf auth login`."""
    from hf_xfmr.hub import publish as hub_publish
    from hf_xfmr.hub.cards import pretrain_card_fields

    card = pretrain_card_fields(dataclasses.asdict(args), metrics, objective=objective_name(args))
    hub_publish(model, args.push_to_hub, tokenizer=tokenizer, training_logs=str(log_path), **card)


def objective_name(args: PretrainArguments) -> str:
    return args.objective or resolve_objective(args)[1].name
