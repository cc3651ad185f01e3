"""`PretrainArguments`: every setting of `hf-xfmr pretrain`, as one typed dataclass.

The same dataclass is filled from Python (`PretrainArguments(arch="bert", ...)`), from the command line
(each field is an option, `--max_steps` or `--max-steps`, parsed by transformers' `HfArgumentParser`)
and from a YAML file (`--config run.yaml`, flat `field: value` pairs; options on the command line win).
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .optim import OPTIMIZERS, SCHEDULES


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


@dataclass
class PretrainArguments:
    """Settings of a pretraining run. Fields are grouped as model / data / optimisation / run."""

    # --- model ---------------------------------------------------------------------------------
    arch: str = field(default="bert", metadata=_help("architecture to pretrain (hf_xfmr name, e.g. bert, roberta)"))
    objective: str | None = field(default=None, metadata=_help(
        "pretraining objective (mlm, wwm, mlm+nsp, mlm+sop, plm, clm, ...); default: the architecture's first"))
    preset: str = field(default="tiny", metadata=_help("named model size of the architecture (tiny, base, large, ...)"))
    config_overrides: str | None = field(default=None, metadata=_help(
        "comma-separated config fields applied on top of the preset, e.g. 'hidden_size=128,num_hidden_layers=4'"))
    model_path: str | None = field(default=None, metadata=_help(
        "start from this checkpoint instead of a fresh preset (continued pretraining): a folder or a Hub repo id, "
        "hf_xfmr or transformers format (converted on load); its tokenizer unless --tokenizer is given"))
    revision: str | None = field(default=None, metadata=_help(
        "branch, tag or commit of a Hub repo --model_path (token: HF_TOKEN or `hf auth login`)"))
    attn_implementation: str | None = field(default=None, metadata=_help("attention backend: eager or sdpa"))
    gradient_checkpointing: bool = field(default=False, metadata=_help("recompute activations in the backward pass"))

    # --- data ----------------------------------------------------------------------------------
    dataset: str | None = field(default=None, metadata=_help(
        "training text: a .txt/.json/.jsonl/.parquet/.csv file, glob or folder, or a `datasets` name; "
        "default: the embedded corpus (no download)"))
    text_column: str = field(default="text", metadata=_help("column holding the text"))
    dataset_split: str = field(default="train", metadata=_help("split of the dataset to read"))
    streaming: bool = field(default=False, metadata=_help(
        "read the dataset as a stream (examples are built on the fly; nothing is loaded up front)"))
    max_documents: int | None = field(default=None, metadata=_help("use only the first N documents"))
    eval_dataset: str | None = field(default=None, metadata=_help(
        "held-out text for evaluation (same formats as --dataset); default: --eval_fraction of the documents"))
    eval_fraction: float = field(default=0.05, metadata=_help(
        "share of the documents held out for evaluation when no --eval_dataset is given (0: no evaluation)"))
    max_eval_examples: int | None = field(default=512, metadata=_help("evaluate on at most N examples"))
    tokenizer: str | None = field(default=None, metadata=_help(
        "tokenizer folder; default: train one for the architecture on the training text (saved in the output)"))
    vocab_size: int = field(default=8000, metadata=_help("vocabulary size of a tokenizer trained on the fly"))
    max_seq_length: int = field(default=128, metadata=_help("tokens per example, special tokens included"))
    mlm_probability: float | None = field(default=None, metadata=_help(
        "masking rate; default: the architecture's (15%, 30% for ModernBERT)"))
    short_seq_prob: float = field(default=0.1, metadata=_help("share of shorter sentence pairs (NSP/SOP)"))
    dataloader_num_workers: int = field(default=0, metadata=_help("worker processes preparing batches"))

    # --- optimisation --------------------------------------------------------------------------
    max_steps: int = field(default=1000, metadata=_help("optimizer steps to train for"))
    per_device_train_batch_size: int = field(default=32, metadata=_help("examples per micro-batch and process"))
    per_device_eval_batch_size: int | None = field(default=None, metadata=_help(
        "evaluation batch size per process; default: the training one"))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("micro-batches per optimizer step"))
    batch_size_warmup_steps: int = field(default=0, metadata=_help(
        "grow the micro-batches per step from 1 to --gradient_accumulation_steps over N steps (batch-size warmup)"))
    optimizer: Literal[OPTIMIZERS] = field(default="adamw", metadata=_help("adamw or stable_adamw"))
    learning_rate: float = field(default=5e-4, metadata=_help("peak learning rate"))
    weight_decay: float = field(default=0.01, metadata=_help("decoupled weight decay (not on biases and norms)"))
    adam_beta1: float = field(default=0.9, metadata=_help("Adam beta1"))
    adam_beta2: float = field(default=0.98, metadata=_help("Adam beta2"))
    adam_epsilon: float = field(default=1e-6, metadata=_help("Adam epsilon"))
    lr_scheduler: Literal[SCHEDULES] = field(default="linear", metadata=_help(
        "learning-rate schedule: constant, linear, cosine, wsd (warmup-stable-decay) or 1-sqrt"))
    warmup_steps: float = field(default=0.06, metadata=_help(
        "linear warmup: a number of steps, or a fraction of --max_steps when below 1"))
    decay_ratio: float = field(default=0.1, metadata=_help("share of the run spent decaying (wsd, 1-sqrt)"))
    min_lr_ratio: float = field(default=0.0, metadata=_help("final learning rate as a fraction of the peak"))
    max_grad_norm: float | None = field(default=1.0, metadata=_help("clip the gradient norm (0 or none: no clipping)"))
    mixed_precision: Literal["no", "bf16", "fp16"] = field(default="no", metadata=_help(
        "autocast precision: no, bf16 or fp16 (under `accelerate launch`, its --mixed_precision wins)"))
    nan_policy: Literal["stop", "skip"] = field(default="stop", metadata=_help(
        "on a NaN/inf loss: stop with an error naming the step, or skip the step and count it"))
    deepspeed: str | None = field(default=None, metadata=_help(
        "train with DeepSpeed ZeRO: zero2 or zero3 (configs shipped with hf_xfmr) or a DeepSpeed JSON file; "
        "start the processes with `accelerate launch --multi_gpu --num_processes N` or torchrun"))

    # --- run -----------------------------------------------------------------------------------
    output_dir: str = field(default="pretrain_output", metadata=_help(
        "where the model, tokenizer, logs and checkpoints go"))
    overwrite_output_dir: bool = field(default=False, metadata=_help(
        "start afresh in an output folder that holds an earlier run (its checkpoints are deleted)"))
    resume: str | None = field(default=None, metadata=_help(
        "continue from a checkpoint: its folder, or no value for the latest one in the output folder",
        nargs="?", const="latest"))
    seed: int = field(default=42, metadata=_help("seed of the model initialisation, data order and masks"))
    logging_steps: int = field(default=10, metadata=_help("log the training loss every N steps"))
    eval_steps: int = field(default=0, metadata=_help("evaluate every N steps (0: only at the end)"))
    save_steps: int = field(default=500, metadata=_help("write a checkpoint every N steps (0: only at the end)"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep only the last K checkpoints"))
    report_to_tensorboard: bool = field(default=True, metadata=_help(
        "also write TensorBoard event files when tensorboard is installed"))
    progress_bar: bool = field(default=True, metadata=_help("show a progress bar with loss and tokens/s"))
    push_to_hub: str | None = field(default=None, metadata=_help(
        "after training, publish the final model to this Hub repository (needs hf_xfmr.hub)"))
    ddp_timeout: float = field(default=1800.0, metadata=_help(
        "distributed runs: seconds a collective operation waits for the other processes before the run fails "
        "with an error naming the step (default 1800: 30 minutes)"))

    def __post_init__(self):
        positive = ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "max_seq_length",
                    "vocab_size", "logging_steps")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"--{name} must be a positive integer, got {value!r}.")
        for name in ("batch_size_warmup_steps", "eval_steps", "save_steps", "dataloader_num_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"--{name} must be a non-negative integer, got {value!r}.")
        for name in ("per_device_eval_batch_size", "max_documents", "max_eval_examples", "save_total_limit"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name} must be a positive integer or unset, got {value!r}.")
        if self.batch_size_warmup_steps and self.gradient_accumulation_steps < 2:
            raise ValueError("--batch_size_warmup_steps grows the number of micro-batches per step up to "
                             "--gradient_accumulation_steps: set --gradient_accumulation_steps to 2 or more.")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"--eval_fraction must be in [0, 1), got {self.eval_fraction}.")
        if self.mlm_probability is not None and not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability} (BERT uses 0.15).")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob must be in [0, 1], got {self.short_seq_prob}.")
        if self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.warmup_steps < 0 or (self.warmup_steps >= 1 and self.warmup_steps != int(self.warmup_steps)):
            raise ValueError(f"--warmup_steps must be a whole number of steps or a fraction below 1, "
                             f"got {self.warmup_steps}.")
        if not 0.0 <= self.decay_ratio <= 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError("--decay_ratio and --min_lr_ratio must be in [0, 1].")
        if self.max_grad_norm is not None and self.max_grad_norm < 0:
            raise ValueError(f"--max_grad_norm must be >= 0 (0: no clipping), got {self.max_grad_norm}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}.")
        if self.lr_scheduler not in SCHEDULES:
            raise ValueError(f"--lr_scheduler must be one of {', '.join(SCHEDULES)}, got {self.lr_scheduler!r}.")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"--mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}.")
        if self.nan_policy not in ("stop", "skip"):
            raise ValueError(f"--nan_policy must be stop or skip, got {self.nan_policy!r}.")
        if isinstance(self.ddp_timeout, bool) or not isinstance(self.ddp_timeout, (int, float)) or \
                not 0 < self.ddp_timeout < float("inf"):
            raise ValueError(f"--ddp_timeout must be a positive number of seconds, got {self.ddp_timeout!r}.")
        if self.deepspeed is not None and (not isinstance(self.deepspeed, str) or not self.deepspeed.strip()):
            raise ValueError(f"--deepspeed must name a config (zero2, zero3) or a JSON file, got {self.deepspeed!r}.")

    @property
    def warmup(self) -> int:
        """Warmup in optimizer steps."""
        if self.warmup_steps < 1:
            return int(round(self.warmup_steps * self.max_steps))
        return int(self.warmup_steps)

    @property
    def clip_norm(self) -> float | None:
        return self.max_grad_norm or None

    @property
    def eval_batch_size(self) -> int:
        return self.per_device_eval_batch_size or self.per_device_train_batch_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "the settings") -> "PretrainArguments":
        """Build from a mapping of field names (e.g. a YAML file), naming unknown keys in the error."""
        if not isinstance(values, dict):
            raise ValueError(f"{source} must be a mapping of setting names to values, got {type(values).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in values if k.replace("-", "_") not in names)
        if unknown:
            raise ValueError(f"Unknown setting(s) in {source}: {', '.join(unknown)}. "
                             f"Valid settings: {', '.join(sorted(names))}.")
        return cls(**{k.replace("-", "_"): v for k, v in values.items()})

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides) -> "PretrainArguments":
        """Read a YAML file of `field: value` pairs; `overrides` win over the file."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise ValueError(f"Config file {path} does not exist.")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"Config file {path} is not valid YAML: {err}") from None
        if not isinstance(values, dict):
            raise ValueError(f"Config file {path} must hold a mapping of setting names to values.")
        return cls.from_dict({**values, **overrides}, source=str(path))
