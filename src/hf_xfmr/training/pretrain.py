"""`pretrain(args)`: one training loop on `accelerate.Accelerator` for every architecture and objective.

    from hf_xfmr.training import PretrainArguments, pretrain
    result = pretrain(PretrainArguments(arch="bert", objective="wwm", max_steps=200, output_dir="out"))
    result.final_loss, result.log_path, result.model_dir     # AutoModel.from_pretrained(result.model_dir)

The same function runs in one process, under `accelerate launch` / `torchrun` (DDP; gloo on CPU) and
under DeepSpeed ZeRO-2/3 (`--deepspeed zero2|zero3|FILE.json`, or an Accelerate config with a DeepSpeed
section) and under FSDP2 (`--fsdp full_shard|shard_grad_op|FILE.yaml`: Accelerate's FSDP plugin, torch's
`fully_shard`; on CPU too). `pretrain` builds a `Pretrainer` (the run object, in the shape of torchtitan's
trainer) and runs it. What happens, in order:

1. resolve the architecture and objective; check the output folder and, with `--resume`, the checkpoint
   (all before anything is written, so a bad checkpoint or setting leaves the folder untouched);
2. load documents, train or load the tokenizer, build examples with the objective's builder, check
   that a global micro-batch fits the data;
3. build the model (a preset + overrides, or `--model_path`), the optimizer, then `accelerator.prepare`
   (with `--compile` the model's forward is compiled in place first: `compile_model`) (steps 1-3:
   `Pretrainer.setup`, which continues a checkpoint with `Pretrainer.resume`);
4. per optimizer step (`Pretrainer.train_step`): set the scheduled learning rate, run
   `micro_batches_per_step` micro-batches (gradients synchronised on the last only), check the loss on
   every process, clip, step; then log (with the model FLOPs and MFU: `logs.ModelFlops`), evaluate (`evaluate`)
   and checkpoint (`save`) on schedule;
5. write the final model (safetensors, consolidated from ZeRO partitions in fp32 under DeepSpeed) and
   the tokenizer into the output folder; optionally publish it (`--push_to_hub`).

Plain / DDP, DeepSpeed and FSDP runs differ only in how the model and optimizer are checkpointed, restored and
exported: `checkpoint.make_checkpointer` gives the run one component that does it, so the loop has no
backend branches.

Extension points: `PretrainCallback` (observe steps, evaluations, checkpoints) and the objective table
(`hf_xfmr.training.objectives`), including its state hooks for objectives such as XLNet's memory and, for a
module of two networks trained as one step (ELECTRA's `rtd`), the module it trains (`model_class`), the
scalar outputs it logs (`logged_outputs`) and how the final model is written (`export`). A run of another
kind on the same loop subclasses `Pretrainer` and overrides the steps that differ (`_resolve`,
`_prepare_data`, `_build_model`, `_start_batches`, `learning_rate`, `evaluate`, `_write_final`):
`hf_xfmr.training.distill.Distiller` (a student beside its frozen teacher) does.
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
from .checkpoint import export_deepspeed_checkpoint  # noqa: F401  (public here before it moved)
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
from .compiled import compile_model
from .fsdp import make_fsdp_plugin, pin_fsdp, prepare_fsdp, unpin_fsdp, using_fsdp
from .logs import LOG_FILE, ModelFlops, RunLog
from .objectives import (
    Objective,
    ObjectiveSettings,
    available_objectives,
    check_tokenizer,
    get_objective,
    objective_settings_options,
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
    """The live objects of a run, as callbacks see them (`Pretrainer.run`)."""

    args: PretrainArguments
    accelerator: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tokenizer: Any
    objective: Objective
    unwrapped_model: torch.nn.Module  # the model without its DDP / DeepSpeed wrapper (FSDP2: the sharded model)
    step: int = 0
    objective_state: dict = field(default_factory=dict)


@dataclass
class PretrainResult:
    """What `pretrain` returns.

    output_dir: the run folder; model_dir: where the final model + tokenizer are (`from_pretrained` it);
    log_path: the JSON-lines log; final_loss: training loss of the last step (mean over micro-batches
    and processes); eval_metrics: the last evaluation; counters: batches without targets, skipped steps;
    model: the trained model (unwrapped; under DeepSpeed or FSDP the consolidated copy on the main process).
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
    path = shipped_or_path(value, DEEPSPEED_CONFIGS, ".json", source=source, kind="a DeepSpeed",
                           example="e.g. --deepspeed zero2", file="a DeepSpeed JSON config")
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


def make_accelerator(args: PretrainArguments, *, find_unused_parameters: bool = False,
                     force_cpu: bool = False):
    """An `Accelerator` for this machine: CPU processes talk over gloo; DeepSpeed compiles nothing on CPU.
    `find_unused_parameters`: DDP looks for parameters without a gradient after each backward (the
    objective's `unused_parameters`); `force_cpu`: train on the CPU even when a GPU is available."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

    cpu = force_cpu or not torch.cuda.is_available()
    if cpu and args.mixed_precision == "fp16":
        raise ValueError("--mixed_precision fp16 needs a GPU (CPU autocast runs in bfloat16); use bf16 on CPU.")
    deepspeed, fsdp = _using_deepspeed(args), using_fsdp(args)
    if deepspeed and fsdp:
        raise ValueError("FSDP and DeepSpeed both shard the model: choose one (--fsdp or --deepspeed, or an "
                         "Accelerate config for one of them, not both).")
    if fsdp and "LOCAL_RANK" not in os.environ:
        raise ValueError(
            "FSDP runs in processes started by a launcher (it shards the model across a process group): "
            "accelerate launch --multi_gpu --num_processes N -m hf_xfmr.cli pretrain --fsdp ... or "
            "torchrun --standalone --nproc_per_node N -m hf_xfmr.cli pretrain --fsdp ... (N=1: one process).")
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
    if launched > 1 and find_unused_parameters:
        from accelerate.utils import DistributedDataParallelKwargs

        handlers.append(DistributedDataParallelKwargs(find_unused_parameters=True))
    mixed = args.mixed_precision if args.mixed_precision != "no" else None
    # Accelerate keeps its state in process-wide singletons: forget the previous run's settings (mixed
    # precision, DeepSpeed plugin) so `pretrain` can be called again in the same process. The process
    # group (PartialState) is kept.
    from accelerate.state import AcceleratorState, GradientState

    unpin_fsdp()
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    plugin = None
    if ds_file is not None:
        # Built here (not by Accelerate from the environment) so a config named by a relative path or by
        # a shipped name works from any folder. ZeRO-3 builds the model outside deepspeed.zero.Init unless
        # the Accelerate config asks for it (zero3_init_flag).
        zero3_init = os.environ.get("ACCELERATE_DEEPSPEED_ZERO3_INIT", "false").lower() == "true"
        plugin = DeepSpeedPlugin(hf_ds_config=str(ds_file), zero3_init_flag=zero3_init)
    fsdp_plugin = make_fsdp_plugin(args) if fsdp else None
    launched_fsdp = os.environ.get("ACCELERATE_USE_FSDP")
    try:
        # DeepSpeed finds the CPU itself; Accelerator(cpu=True) would switch DeepSpeed off.
        accelerator = Accelerator(cpu=cpu and not deepspeed, mixed_precision=mixed, kwargs_handlers=handlers,
                                  deepspeed_plugin=plugin, fsdp_plugin=fsdp_plugin)
    except (ValueError, RuntimeError) as err:
        raise ValueError(f"Cannot set up training (--mixed_precision {args.mixed_precision}): {err}") from None
    finally:  # Accelerate marks the process as FSDP for good when given a plugin: a later run may not be
        if launched_fsdp is None:
            os.environ.pop("ACCELERATE_USE_FSDP", None)
        else:
            os.environ["ACCELERATE_USE_FSDP"] = launched_fsdp
    if fsdp_plugin is not None:
        pin_fsdp(accelerator, fsdp_plugin, mixed)
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


# One `key=value` parser for the package (hf_xfmr.options); re-exported here, where it always was.
from ..options import parse_config_overrides, shipped_or_path  # noqa: E402


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
    if args.packing and not objective.packable:
        recipes = available_objectives()
        packable = [o for o in arch.objectives if o in recipes and recipes[o].packable]
        hint = f"; {arch.name} packs with {', '.join(packable)}" if packable else ""
        raise ValueError(f"--packing: the {name!r} objective builds its own rows and does not pack them{hint}. "
                         f"Drop --packing or choose another --objective.")
    try:
        model_class = objective.model_class(arch) if objective.model_class is not None else \
            arch.model_class(objective.task)
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
    from hf_xfmr.data.tokenizers import tokenizer_aliases

    if arch_name not in tokenizer_aliases():
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
    values.update(objective_config_options(objective, args))
    overrides = parse_config_overrides(args.config_overrides)
    unknown = sorted(k for k in overrides if k not in fields)
    if unknown:
        raise ValueError(f"--config_overrides: {arch.config_class.__name__} has no field(s) {', '.join(unknown)}.")
    values.update(overrides)
    try:
        return arch.config_class.from_preset(args.preset, **values)
    except (ValueError, TypeError) as err:
        raise ValueError(f"Cannot build the {arch.name} config (--preset {args.preset}): {err}") from None


def objective_config_options(objective: Objective, args: PretrainArguments) -> dict[str, Any]:
    """The config fields the objective's options set (those given); an option of another objective is refused.
    The options are the PretrainArguments fields named in any objective's `config_options`."""
    options = {option for recipe in available_objectives().values() for option in recipe.config_options.values()}
    given = {name for name in options if getattr(args, name, None) is not None}
    foreign = sorted(given - set(objective.config_options.values()))
    if foreign:
        raise ValueError(f"{', '.join('--' + n for n in foreign)} only apply to an objective that has them (rtd), "
                         f"not to {objective.name!r}: drop them or choose that --objective.")
    return {field_name: getattr(args, option) for field_name, option in objective.config_options.items()
            if getattr(args, option, None) is not None}


def _check_sequence_length(model, tokenizer, length: int, decoder_length: int | None = None,
                           labels: bool = False) -> None:
    """One no-grad forward of a full-length row: a too-short position table fails here, with a clear message.

    An encoder-decoder also gets a full-length decoder row: `decoder_length` tokens (the objective's longest
    target, `Objective.decoder_length`), else `length`."""
    special = set(getattr(tokenizer, "all_special_ids", []))
    token = next(i for i in range(len(tokenizer)) if i not in special)
    ids = torch.full((1, length), token, dtype=torch.long)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if labels:  # a module that computes its loss in forward (RTD): every position a target
        inputs["labels"] = ids.clone()
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

def evaluate(run: PretrainRun, batches: list) -> dict[str, float]:
    """`_evaluate` with torch's RNG forked: a model that samples (RTD's generator) leaves training's random
    stream as it was, so evaluating or not does not change the run."""
    device = run.accelerator.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _evaluate(run, batches)


@torch.no_grad()
def _evaluate(run: PretrainRun, batches: list) -> dict[str, float]:
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
        if objective.perplexity:
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
    return Pretrainer(args, callbacks).setup().train()


@dataclass
class StepStats:
    """What the micro-batches of one optimizer step add up to (on one process, or summed by `reduce`)."""

    loss_sum: float = 0.0  # sum of the finite micro-batch losses
    with_targets: float = 0  # micro-batches whose finite loss is in loss_sum
    without_targets: float = 0  # micro-batches without any target (their backward pass gives zero gradients)
    non_finite: float = 0  # micro-batches whose loss was NaN or inf
    tokens: float = 0  # real (non-padding) input tokens
    # The objective's `logged_outputs`: name -> [sum of the finite values, their count] (an accuracy over
    # replaced tokens is NaN in a batch without any: it does not count).
    extras: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        if math.isfinite(value):
            total = self.extras.setdefault(name, [0.0, 0.0])
            total[0], total[1] = total[0] + value, total[1] + 1

    def mean(self, name: str) -> float | None:
        total, count = self.extras.get(name, (0.0, 0.0))
        return total / count if count else None

    def reduce(self, accelerator, names: tuple[str, ...] = ()) -> "StepStats":
        """The sums over every process: one collective of five float64 numbers and two per name of `names`
        (the objective's `logged_outputs`, the same on every process)."""
        numbers = [self.loss_sum, self.with_targets, self.without_targets, self.non_finite, self.tokens]
        for name in names:
            numbers += self.extras.get(name, [0.0, 0.0])
        summed = accelerator.reduce(torch.tensor(numbers, dtype=torch.float64).to(accelerator.device),
                                    reduction="sum").cpu().tolist()
        return StepStats(*summed[:5], extras={n: summed[5 + 2 * i:7 + 2 * i] for i, n in enumerate(names)})


@dataclass
class LogWindow:
    """The training steps since the last log line: the throughput and mean loss the next line reports."""

    loss: float = 0.0  # sum of the step losses
    steps: int = 0  # steps that had a loss
    terms: dict[str, tuple[float, int]] = field(default_factory=dict)  # `logged_outputs`: (sum, steps)
    tokens: float = 0
    optimizer_steps: int = 0
    start: float = field(default_factory=time.perf_counter)  # evaluation and checkpoint time are left out


class Pretrainer:
    """One pretraining run, in the shape of torchtitan's trainer:

        trainer = Pretrainer(args, callbacks).setup()   # steps 1-3 of the module docstring; raises on bad
        result = trainer.train()                         # settings before anything is written

    `train` runs `train_step` until --max_steps, logging, evaluating (`evaluate`) and checkpointing
    (`save`) on schedule, then exports the final model; `setup` continues a checkpoint with `resume`. How
    the model and optimizer are saved, restored and exported (plain / DDP, DeepSpeed or FSDP) is the
    `checkpointer`'s business (`checkpoint.make_checkpointer`). Callbacks see `self.run` (a `PretrainRun`).
    """

    def __init__(self, args: PretrainArguments, callbacks=()):
        self.args, self.callbacks = args, tuple(callbacks)
        self.step, self.final_loss, self.last_saved = 0, None, None
        self.eval_metrics: dict[str, float] = {}
        self.activity = "the setup"  # what the run is doing, for the error of a collective that fails
        self.force_cpu = False  # train on the CPU even when a GPU is available

    # --- setup -----------------------------------------------------------------------------------

    def setup(self) -> "Pretrainer":
        """Check the settings and the checkpoint, build data, tokenizer, model and optimizer, prepare them
        with Accelerate and (with --resume) restore the checkpoint. Returns self."""
        self._check_run()
        self._prepare_data()
        model, optimizer = self._build_model()
        self._start(model, optimizer)
        return self

    def _check_run(self) -> None:
        """Step 1: the architecture and objective, the accelerator, the output folder and the checkpoint to
        resume, all decided before anything is written."""
        args = self.args
        self._resolve()
        self.deepspeed = _using_deepspeed(args)
        self.fsdp = using_fsdp(args)
        if args.push_to_hub:  # a bad repo id is refused before training, not after it
            from hf_xfmr.hub import check_repo_id

            check_repo_id(args.push_to_hub, error=ValueError)
        if args.base_model is not None:
            from hf_xfmr.hub.repo_id import check_model_id

            check_model_id(args.base_model, "--base_model")
        self.accelerator = accelerator = make_accelerator(
            args, find_unused_parameters=self.objective.unused_parameters, force_cpu=self.force_cpu)
        self.world, self.rank, self.is_main = accelerator.num_processes, accelerator.process_index, \
            accelerator.is_main_process
        if args.mixed_precision == "bf16" and accelerator.device.type == "cpu" and self.is_main:
            from ..machine import warn_if_bf16_slow

            warn_if_bf16_slow("cpu")  # bf16 without AMX is usually slower than fp32: say so, with figures
        self.output_dir = output_dir = Path(args.output_dir)
        if output_dir.exists() and not output_dir.is_dir():
            raise ValueError(f"--output_dir {output_dir} is a file, not a folder: choose another path.")
        self.resume_path = ckpt.resolve_resume(args.resume, output_dir) if args.resume else None
        if self.resume_path is not None:
            ckpt.check_unfinished(self.resume_path, args.max_steps, output_dir)
        if self.resume_path is None and not args.overwrite_output_dir and (
                ckpt.list_checkpoints(output_dir) or (output_dir / LOG_FILE).exists()):
            raise ValueError(f"{output_dir} holds an earlier run. Pass --resume to continue it, --overwrite_output_dir "
                             "to start afresh there, or choose another --output_dir.")
        if args.streaming and not args.eval_dataset and args.eval_fraction and self.is_main:
            print("note: a streamed corpus has no held-out split; pass --eval_dataset to evaluate.")
        if args.model_path:  # a Hub repo id: its snapshot in the Hugging Face cache, downloaded if needed
            from ..models.hub_loading import resolve_checkpoint

            self.args = dataclasses.replace(
                args, model_path=str(resolve_checkpoint(args.model_path, revision=args.revision)))
        self.checkpointer = ckpt.make_checkpointer(output_dir, accelerator, args.save_total_limit, self.deepspeed,
                                                   fsdp=self.fsdp)

    def _resolve(self) -> None:
        """What the run trains: `self.arch`, `self.objective` and `self.model_class` (the class of the module
        the loop trains: the objective's own, e.g. a generator + discriminator, else the architecture's model
        for the objective's task)."""
        self.arch, self.objective, self.model_class = resolve_objective(self.args)

    def _prepare_data(self) -> None:
        """Step 2: documents, the tokenizer (loaded, or trained once the data checks have passed), the
        objective's examples and the batch plan."""
        from accelerate.utils import set_seed

        from hf_xfmr.data.tokenizers import fit_tokenizer_to_model

        args, objective = self.args, self.objective
        documents = _load_documents(args.dataset, args, args.streaming)
        tokenizer = self._existing_tokenizer()
        set_seed(args.seed)
        if args.streaming:
            self.train_docs, eval_docs = documents, None
        else:
            self.train_docs, eval_docs = split_documents(
                documents, args.eval_fraction if not args.eval_dataset else 0.0, args.seed)
        if args.eval_dataset:
            eval_docs = _load_documents(args.eval_dataset, args, False)
        if tokenizer is None:
            tokenizer = _train_tokenizer(self.accelerator, self.arch.name, self.train_docs, args,
                                         self.output_dir / TOKENIZER_DIR)
        check_tokenizer(objective, tokenizer)
        fit_tokenizer_to_model(tokenizer, self.arch.name)  # e.g. a BERT --tokenizer for DistilBERT: no token_type_ids
        self.tokenizer = tokenizer
        self.settings = settings = objective.resolve(ObjectiveSettings(
            max_seq_length=args.max_seq_length, mlm_probability=args.mlm_probability,
            short_seq_prob=args.short_seq_prob, seed=args.seed, arch=self.arch.name, packing=args.packing,
            **objective_settings_options(objective, args)))
        self.collator = objective.make_collator(tokenizer, settings)
        with self.accelerator.main_process_first():
            self.train_examples = None if args.streaming else build_examples(
                objective, tokenizer, self.train_docs, settings)
            self.eval_examples = None
            if eval_docs is not None:
                self.eval_examples = build_examples(objective, tokenizer, eval_docs, settings, required=False)
                if self.eval_examples is None and self.is_main:
                    print(f"note: no {objective.name} example could be built from the {len(eval_docs)} held-out "
                          "document(s); there will be no evaluation (raise --eval_fraction or pass --eval_dataset).")
        self.plan = None
        if self.train_examples is not None:
            self.plan = BatchPlan(len(self.train_examples), args.per_device_train_batch_size, self.world, self.rank,
                                  objective.layout, args.seed)
        elif objective.layout == "contiguous":
            raise ValueError(f"The {objective.name!r} objective reads contiguous streams, which needs the whole "
                             "corpus: drop --streaming.")

    def _existing_tokenizer(self):
        """--tokenizer, else the resumed run's, else --model_path's own; None: train one."""
        args, tokenizer_dir = self.args, self.output_dir / TOKENIZER_DIR
        if args.tokenizer:
            return _load_tokenizer(args.tokenizer)
        if self.resume_path is not None:
            if not tokenizer_dir.is_dir():
                raise ckpt.CheckpointError(f"{tokenizer_dir} is missing: the tokenizer the checkpoint was trained "
                                           "with is needed to resume. Pass it with --tokenizer PATH.")
            return _load_tokenizer(tokenizer_dir)
        if args.model_path and any((Path(args.model_path) / name).is_file() for name in TOKENIZER_FILES):
            return _load_tokenizer(args.model_path)
        return None

    def _build_model(self):
        """Step 3: the model (a preset + overrides, or --model_path), its checks against the tokenizer, the
        sequence length and the checkpoint, and the optimizer; (model, optimizer), not yet prepared."""
        from accelerate.utils import set_seed

        args, tokenizer = self.args, self.tokenizer
        set_seed(args.seed)
        config = build_config(self.arch, self.model_class, tokenizer, self.objective, args)
        if getattr(config, "vocab_size", len(tokenizer)) < len(tokenizer):
            raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size}: use "
                             "the model's own tokenizer (--tokenizer) or a larger vocab_size.")
        extra = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
        if args.model_path:
            from ..models.weights import check_weight_files

            check_weight_files(args.model_path)  # a ValueError naming a truncated or missing file, as every command
            options = objective_config_options(self.objective, args)  # e.g. --discriminator_loss_weight, on its config
            model = self.model_class.from_pretrained(args.model_path, **extra, **options)
        else:
            model = self.model_class._from_config(config, **extra)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if not (self.deepspeed and _zero3_init()):  # under ZeRO-3 init the parameters are partitioned already
            objective = self.objective
            decoder_length = objective.decoder_length(self.settings) if objective.decoder_length is not None else None
            _check_sequence_length(model, tokenizer, args.max_seq_length, decoder_length,
                                   labels=objective.model_class is not None)
        self.resume_settings = {
            "arch": self.arch.name, "objective": self.objective.name, "seed": args.seed, "world_size": self.world,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "batch_size_warmup_steps": args.batch_size_warmup_steps, "max_seq_length": args.max_seq_length,
            "num_train_examples": len(self.train_examples) if self.train_examples is not None else None,
            "deepspeed": self.deepspeed, "fsdp": self.fsdp,
        }
        self.trainer_state: dict[str, Any] = {}
        if self.resume_path is not None:
            self.trainer_state = ckpt.validate_checkpoint(self.resume_path, model.config, self.resume_settings,
                                                          self.world)
        optimizer = build_optimizer(args.optimizer, parameter_groups(model, args.weight_decay), lr=args.learning_rate,
                                    betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
                                    weight_decay=args.weight_decay)
        if self.resume_path is not None:
            self.checkpointer.restore(self.resume_path, model, optimizer, prepared=False)
        if args.compile:  # in place, before any wrapper: parameter names and checkpoints stay the plain model's
            compile_model(model, args.compile_backend)
        return model, optimizer

    def _start(self, model, optimizer) -> None:
        """From here on the run writes into its output folder: the run config, `accelerator.prepare`, the
        checkpoint's state (`resume`), the batch streams, the log and the progress bar."""
        args, accelerator = self.args, self.accelerator
        accelerator.wait_for_everyone()
        if self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if self.resume_path is None and args.overwrite_output_dir:
                shutil.rmtree(ckpt.checkpoint_root(self.output_dir), ignore_errors=True)
            run_config = {**args.to_dict(), "world_size": self.world}
            (self.output_dir / RUN_CONFIG).write_text(json.dumps(run_config, indent=1))
        if self.deepspeed:
            _fill_deepspeed_config(accelerator, args, self.world)
        if self.fsdp:
            prepare_fsdp(accelerator, model, optimizer)
        unwrapped = model
        self.model_flops = ModelFlops(self._peak_flops() if self.is_main else None)
        self.model_flops.per_token = self.trainer_state.get("flops_per_token")  # resumed: the count of the first run
        model, optimizer = accelerator.prepare(model, optimizer)
        self.run = PretrainRun(args, accelerator, model, optimizer, self.tokenizer, self.objective, unwrapped)
        data_state = self.resume(self.resume_path) if self.resume_path is not None else None
        accelerator.wait_for_everyone()
        self.step = int(self.trainer_state.get("step", 0))
        self.run.step = self.step
        self.counters = dict(self.trainer_state.get("counters", {"batches_without_targets": 0, "skipped_steps": 0}))
        self.last_saved = self.step if self.resume_path is not None else None
        self._start_batches(data_state)
        self.log = RunLog(self.output_dir, self.is_main, args.report_to_tensorboard,
                          resume_step=self.step if self.resume_path else None)
        from tqdm.auto import tqdm

        self.bar = tqdm(total=args.max_steps, initial=self.step, unit="step", dynamic_ncols=True,
                        desc=self._description(),
                        disable=not (self.is_main and args.progress_bar))

    def _peak_flops(self) -> float | None:
        """The peak FLOP/s of all processes together for the run's dtype, which the logged MFU divides by:
        --peak_tflops, else `hf_xfmr.machine.peak_gflops` (HF_XFMR_PEAK_GFLOPS, else the matmul probe, measured
        once per machine and cached); None (no MFU, with a note) when there is none for the device."""
        from .. import machine

        device, dtype = self.accelerator.device.type, machine.precision_dtype(self.accelerator.mixed_precision)
        given = self.args.peak_tflops * 1000 if self.args.peak_tflops else None
        try:
            if device not in ("cpu", "cuda") and given is None:
                raise ValueError(f"no matmul probe for {device} devices; pass --peak_tflops")
            # The probe draws random matrices: on a forked RNG, so a run that probes trains as one that reads the cache.
            with torch.random.fork_rng(devices=[self.accelerator.device] if device == "cuda" else []):
                gflops = machine.peak_gflops(device, dtype, given=given, remeasure_busy=False)["gflops"]
        except (RuntimeError, ValueError) as err:
            print(f"note: no {dtype} peak for {device}, so no MFU in the log: {err}")
            return None
        return gflops * 1e9 * self.world

    def _description(self) -> str:
        """The progress bar's label."""
        return f"pretraining {self.arch.name} ({self.objective.name})"

    def resume(self, path: Path) -> dict | None:
        """Continue checkpoint `path` once the model is prepared: the engine's state (DeepSpeed; a plain
        model and optimizer were loaded before `prepare`), this process's RNG and objective state. Returns
        its data-stream position (streaming; None otherwise)."""
        run = self.run
        self.checkpointer.restore(path, run.model, run.optimizer, prepared=True)
        process_state, data_state, objective_state = ckpt.read_process_state(path, self.rank, self.accelerator.device)
        ckpt.set_rng_state(process_state["tensors"], process_state["extra"])
        run.objective_state = objective_state if objective_state is not None else {}
        return data_state

    def _start_batches(self, data_state: dict | None) -> None:
        """The training micro-batches from the first one not yet used, the objective's starting state and
        the evaluation batches."""
        args, objective, device = self.args, self.objective, self.accelerator.device
        # Micro-batches consumed so far (counted on by `train_step`): where the data continues.
        self.micro_batches = micro_batches_before(self.step, args.gradient_accumulation_steps,
                                                  args.batch_size_warmup_steps)
        self.stream = None
        if self.train_examples is not None:
            self.batches = train_batches(self.train_examples, self.plan, self.collator, self.micro_batches,
                                         args.dataloader_num_workers)
        else:
            self.stream = StreamBatches(self.train_docs, objective, self.tokenizer, self.settings, self.collator,
                                        args.per_device_train_batch_size, self.world, self.rank, args.seed, data_state)
            self.batches = iter(self.stream)
        if self.resume_path is None or (objective.stateful and not self.run.objective_state):
            self.run.objective_state = to_device(objective.initial_state(args.per_device_train_batch_size), device)
        self.eval_list = None
        if self.eval_examples is not None and len(self.eval_examples):
            self.eval_list = eval_batches(self.eval_examples, args.eval_batch_size, self.world, self.rank,
                                          self.collator, args.seed, args.max_eval_examples)

    # --- the loop --------------------------------------------------------------------------------

    def train(self) -> PretrainResult:
        """Run `train_step` until --max_steps, logging, evaluating and checkpointing on schedule, then write
        the final model (and publish it with --push_to_hub). Ctrl-C raises `PretrainInterrupted`; a failed
        collective between processes raises `CollectiveError` naming what the run was doing."""
        args, run = self.args, self.run
        for callback in self.callbacks:
            callback.on_train_begin(run)
        self.window = LogWindow()
        run.model.train()
        self.activity = f"step {self.step + 1}"
        try:
            while self.step < args.max_steps:
                record = self.train_step()
                self._log_step(record)
                step = self.step
                if self.eval_list and ((args.eval_steps and step % args.eval_steps == 0) or step == args.max_steps):
                    self.activity = f"the evaluation after step {step}"
                    self.eval_metrics = self.evaluate()
                    self.log.write({"step": step, "epoch": record["epoch"], **self.eval_metrics})
                    for callback in self.callbacks:
                        callback.on_evaluate(run, self.eval_metrics)
                    self.window.start = time.perf_counter()  # evaluation time is not training throughput
                if (args.save_steps and step % args.save_steps == 0) or (
                        step == args.max_steps and (args.save_steps or self.checkpointer.always_save_final_step)):
                    self.activity = f"the checkpoint of step {step}"
                    self.save()
                    self.window.start = time.perf_counter()
            self.bar.close()
            final_model = self._finish()
        except KeyboardInterrupt:
            raise PretrainInterrupted(self.step, ckpt.latest_checkpoint(self.output_dir)) from None
        except Exception as err:
            if self.world > 1 and _is_collective_failure(err):
                raise CollectiveError(_collective_failure_message(err, self.activity, self.world, args)) from err
            raise
        finally:
            self.bar.close()
            self.log.close()
        result = self._result(final_model)
        for callback in self.callbacks:
            callback.on_train_end(run, result)
        if self.world > 1:  # free the engine / DDP wrapper before the process group goes (gloo can hang at exit)
            self.run = run = None  # the last references this run holds to the wrapped model and optimizer
            self.accelerator.free_memory()
            gc.collect()
        return result

    def train_step(self) -> dict:
        """One optimizer step: the scheduled learning rate, `micro_batches_per_step` micro-batches
        (gradients synchronised on the last only), the loss checked on every process (--nan_policy),
        clipping and the update. Returns the step's record, as `on_step_end` gets it."""
        args, run = self.args, self.run
        self.activity = f"step {self.step + 1}"
        n_micro = micro_batches_per_step(self.step, args.gradient_accumulation_steps, args.batch_size_warmup_steps)
        lr = self.learning_rate(self.step)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        stats = StepStats()
        for i in range(n_micro):
            self._micro_batch(stats, n_micro, last=i == n_micro - 1)
        self.micro_batches += n_micro
        if self.world > 1:
            stats = stats.reduce(self.accelerator, self.objective.logged_outputs)
        self.counters["batches_without_targets"] += int(stats.without_targets)
        grad_norm = self._update(stats)
        self.step += 1
        run.step = self.step
        step_loss = stats.loss_sum / stats.with_targets if stats.with_targets else None
        terms = {name: stats.mean(name) for name in self.objective.logged_outputs}
        if step_loss is not None:
            self.final_loss = step_loss
            self.window.loss += step_loss
            self.window.steps += 1
            for name, value in terms.items():
                if value is not None:
                    total, count = self.window.terms.get(name, (0.0, 0))
                    self.window.terms[name] = (total + value, count + 1)
        self.window.tokens += stats.tokens
        self.window.optimizer_steps += 1
        record = {"step": self.step, "loss": step_loss, **terms, "learning_rate": lr, "grad_norm": grad_norm,
                  "epoch": self.epoch()}
        for callback in self.callbacks:
            callback.on_step_end(run, record)
        self.bar.update(1)
        return record

    def learning_rate(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based): --learning_rate times the --lr_scheduler
        multiplier (`optim.lr_multiplier`)."""
        args = self.args
        return args.learning_rate * lr_multiplier(args.lr_scheduler, step, args.max_steps, args.warmup,
                                                  args.decay_ratio, args.min_lr_ratio)

    def _micro_batch(self, stats: StepStats, n_micro: int, last: bool) -> None:
        """Forward and backward of the next micro-batch, added to `stats`; without gradient sync unless `last`."""
        args, run, objective, accelerator = self.args, self.run, self.objective, self.accelerator
        m, batch = next(self.batches)
        if objective.layout == "contiguous" and self.plan is not None and m % self.plan.per_epoch == 0 and m > 0:
            run.objective_state = to_device(objective.initial_state(args.per_device_train_batch_size),
                                            accelerator.device)  # the streams start over
        batch = to_device(batch, accelerator.device)
        for callback in self.callbacks:
            callback.on_micro_batch(run, batch)
        # Counted before the forward pass is queued: read after the backward one, the token count would make
        # the host wait for it instead of preparing the next micro-batch meanwhile.
        targets = count_targets(batch)
        tokens = count_tokens(batch)
        stats.tokens += tokens
        accelerator.sync_gradients = last
        # The run's first micro-batch also counts the model's FLOPs (eagerly), for the log's MFU.
        with nullcontext() if last else accelerator.no_sync(run.model), self.model_flops.measure(tokens):
            outputs = run.model(**objective.step_inputs(batch, run.objective_state))
            run.objective_state = objective.update_state(batch, outputs, run.objective_state)
            loss = outputs.loss
            if targets == 0 or loss is None:
                stats.without_targets += 1
                backward_loss = _zero_loss(outputs)
            else:
                value = float(loss.detach())
                if math.isfinite(value):
                    stats.loss_sum += value
                    stats.with_targets += 1
                    for name in objective.logged_outputs:  # e.g. the terms of a two-network loss
                        stats.add(name, float(outputs[name].detach()))
                else:
                    stats.non_finite += 1
                backward_loss = loss / n_micro
            accelerator.backward(backward_loss)

    def _update(self, stats: StepStats) -> float | None:
        """Clip and apply the accumulated gradients; returns the gradient norm. A non-finite loss stops the
        run (--nan_policy stop) or skips the update (skip; None)."""
        args, optimizer = self.args, self.run.optimizer
        if stats.non_finite:
            if args.nan_policy == "stop":
                raise NonFiniteLossError(
                    f"The training loss is not finite (NaN or inf) at step {self.step + 1} (in {int(stats.non_finite)} "
                    f"micro-batch(es)). Lower --learning_rate, keep --max_grad_norm clipping on, try bf16 instead "
                    "of fp16, or pass --nan_policy skip to skip such steps.")
            optimizer.zero_grad(set_to_none=True)
            self.counters["skipped_steps"] += 1
            return None
        norm = self.accelerator.clip_grad_norm_(self.run.model.parameters(), args.clip_norm or float("inf"))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(norm) if norm is not None else None

    def _log_step(self, record: dict) -> None:
        """Every --logging_steps (and at the last step): one log line over the steps since the previous one."""
        args, step, window = self.args, self.step, self.window
        if step % args.logging_steps and step != args.max_steps:
            return
        elapsed = max(time.perf_counter() - window.start, 1e-9)
        entry = {"step": step, "epoch": record["epoch"], "loss": window.loss / window.steps if window.steps else None,
                 **{name: window.terms[name][0] / window.terms[name][1] if name in window.terms else None
                    for name in self.objective.logged_outputs},
                 "learning_rate": record["learning_rate"], "grad_norm": record["grad_norm"],
                 "tokens_per_second": window.tokens / elapsed,
                 **self.model_flops.fields(window.tokens, window.optimizer_steps, elapsed), **self.counters}
        self.log.write(entry)
        self.bar.set_postfix(loss=f"{entry['loss']:.4f}" if entry["loss"] is not None else "-",
                             tok_s=f"{entry['tokens_per_second']:.0f}",
                             **({"mfu": f"{entry['mfu']:.1%}"} if entry["mfu"] is not None else {}))
        self.window = LogWindow()

    def evaluate(self) -> dict[str, float]:
        """The held-out metrics now (every process takes part); see the module-level `evaluate`."""
        return evaluate(self.run, self.eval_list)

    def epoch(self) -> float:
        """Passes over the training examples so far (a streamed corpus: whole passes)."""
        if self.plan is None:
            return float(self.stream.epoch) if self.stream is not None else 0.0
        return round(self.plan.epoch_of(self.micro_batches), 4)

    def save(self) -> Path:
        """A checkpoint of the current step, with everything `--resume` needs to continue exactly."""
        args, run, step = self.args, self.run, self.step
        trainer_state = {"step": step, "micro_batches": self.micro_batches, "epoch": self.epoch(),
                         "counters": self.counters, "settings": self.resume_settings, "args": args.to_dict(),
                         "flops_per_token": self.model_flops.per_token}  # the log's FLOP count, kept on resume
        path = self.checkpointer.save(
            step, run.model, run.unwrapped_model, run.optimizer, objective_state=run.objective_state,
            data_state=self.stream.state() if self.stream is not None else None, trainer_state=trainer_state,
            on_written=self._on_checkpoint)
        self.last_saved = step
        return path

    def _on_checkpoint(self, folder: Path) -> None:
        for callback in self.callbacks:
            callback.on_checkpoint(self.run, folder)

    def _finish(self):
        """Step 5: the final model and tokenizer in the output folder, published with --push_to_hub."""
        args = self.args
        self.activity = f"the export of the final model (after step {self.step})"
        final_model = self.checkpointer.export(self.run.unwrapped_model, self.model_class, self.last_saved,
                                               fresh=self._fresh_model, write=self._write_final)
        if self.is_main:
            self.tokenizer.save_pretrained(self.output_dir)
        self.accelerator.wait_for_everyone()
        if args.push_to_hub and self.is_main:
            publish(final_model, self.tokenizer, args, self.eval_metrics, self.output_dir / LOG_FILE)
        return final_model

    def _fresh_model(self):
        """A new, unpartitioned instance of the trained module (DeepSpeed's consolidated weights go into it)."""
        return self.model_class(self.run.unwrapped_model.config)

    def _write_final(self, model, folder: Path):
        """Write the trained module `model` as the run's final model in `folder` (the objective's `export`:
        e.g. a discriminator plus `generator/`); returns the model `PretrainResult.model` holds."""
        return self.objective.export(model, folder)

    def _result(self, final_model) -> PretrainResult:
        state = self.accelerator.state
        kind = state.distributed_type
        return PretrainResult(
            output_dir=self.output_dir, model_dir=self.output_dir, log_path=self.output_dir / LOG_FILE,
            final_loss=self.final_loss, step=self.step, eval_metrics=self.eval_metrics, counters=self.counters,
            world_size=self.world, distributed_type=str(kind.value if hasattr(kind, "value") else kind),
            backend=getattr(state, "backend", None), model=final_model, tokenizer=self.tokenizer)


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
