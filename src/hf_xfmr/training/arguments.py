"""The settings of the training commands, as typed dataclasses: `PretrainArguments` (`hf-xfmr pretrain`),
`FinetuneArguments` (`hf-xfmr finetune`) and `DistillArguments` (`hf-xfmr distill`), on one base,
`RunArguments`, that holds what every training run has: where it writes, its seed and logging, the
optimizer steps and their size, the learning rate and weight decay, the sequence length and the Hub revision
of the checkpoint it starts from. A subclass redeclares a shared field where its default or its help differs.

Each dataclass is filled the same three ways:
- from Python: `PretrainArguments(arch="bert", max_steps=100)`;
- from the command line: each field with a help text is an option, `--max_steps` or `--max-steps`
  (`hf_xfmr.cli.command` builds the parser from the dataclass);
- from a YAML/JSON file: `PretrainArguments.from_yaml(path, **overrides)` (= `from_file`), or
  `hf-xfmr <command> --config FILE` (options given on the command line win).

Field metadata read by the command line: `help` (required for an option), `aliases` (older names, each
also in both spellings), `metavar`, `nargs`/`const` (e.g. `--resume` without a value), `parse` (how the
text becomes the value, when the type does not say it), `required` (on the command line).

Only the standard library here (and `finetune_tasks`' names): `hf-xfmr --help` imports this module.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..options import option, parse_int_list, read_options_file, values_from_mapping
from .finetune_tasks import (
    CAUSAL_LM,
    CLASSIFICATION,
    FINETUNE_TASKS,
    LABEL_COLUMNS,
    QUESTION_ANSWERING,
    SEQ2SEQ_TASKS,
    TAGS_COLUMNS,
    TEXT_COLUMNS,
    TOKENS_COLUMNS,
    FinetuneError,
)

OPTIMIZERS = ("adamw", "stable_adamw")  # hf_xfmr.training.optim.build_optimizer
SCHEDULES = ("constant", "linear", "cosine", "wsd", "1-sqrt")  # hf_xfmr.training.optim.lr_multiplier
# Projection names shared by every hf_xfmr architecture; those a model lacks (gate_proj in ungated MLPs)
# are skipped.
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _positive_ints(obj, names) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"--{name} must be a positive integer, got {value!r}.")


def _non_negative_ints(obj, names) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"--{name} must be a non-negative integer, got {value!r}.")


def _check_compile_backend(obj) -> None:
    """--compile_backend names a backend (a non-empty string); whether torch knows it is checked when the model is
    compiled (listing torch's backends here would import torch for --help)."""
    if not isinstance(obj.compile_backend, str) or not obj.compile_backend.strip():
        raise obj.Error(f"--compile_backend must name a torch.compile backend (e.g. inductor), got "
                        f"{obj.compile_backend!r}.")


def _positive_ints_or_unset(obj, names) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"--{name} must be a positive integer or unset, got {value!r}.")


@dataclass(kw_only=True)
class RunArguments:
    """What every training run has. Errors in the settings are raised as `Error` (ValueError, or a subclass
    such as `FinetuneError`), with a message naming the command-line option."""

    Error: ClassVar[type[Exception]] = ValueError

    output_dir: str | None = option("where the results are written", None)
    overwrite_output_dir: bool = option("write into a non-empty --output_dir", False)
    revision: str | None = option(
        "branch, tag or commit of the Hub repo the run starts from (token: HF_TOKEN or `hf auth login`)", None)
    seed: int = option("seed of the model initialisation, data order and masks", 42)
    max_steps: int = option("optimizer steps", 1000)
    gradient_accumulation_steps: int = option("micro-batches per optimizer step", 1)
    learning_rate: float = option("peak learning rate", 5e-4)
    weight_decay: float = option("AdamW weight decay", 0.01)
    max_seq_length: int = option("tokens per example, special tokens included", 128)
    logging_steps: int = option("log the training loss every N steps", 10)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "the settings", **overrides):
        """Build from a mapping of option names (e.g. a YAML file; `max-steps` and aliases are accepted,
        numbers written as text become numbers), with `overrides` (field names) applied on top. Unknown keys
        are named in the error."""
        return cls(**{**values_from_mapping(cls, values, source, error=cls.Error), **overrides})

    @classmethod
    def from_file(cls, path: str | Path, **overrides):
        """Read a YAML or JSON file of `option: value` pairs; `overrides` win over the file."""
        return cls(**{**cls.read_file(path), **overrides})

    from_yaml = from_file  # the name PretrainArguments has always had

    @classmethod
    def read_file(cls, path: str | Path) -> dict[str, Any]:
        """The settings of a YAML or JSON file as field name -> value (checked, numbers parsed), not built."""
        return values_from_mapping(cls, read_options_file(path, error=cls.Error), str(path), error=cls.Error)


@dataclass(kw_only=True)
class PretrainArguments(RunArguments):
    """Settings of a pretraining run. Fields are grouped as model / data / optimisation / run (seed,
    learning_rate, max_seq_length, logging_steps and gradient_accumulation_steps come from `RunArguments`)."""

    # --- model ---------------------------------------------------------------------------------
    arch: str = option("architecture to pretrain (hf_xfmr name, e.g. bert, roberta)", "bert")
    objective: str | None = option(
        "pretraining objective (mlm, wwm, mlm+nsp, mlm+sop, plm, clm, ...); default: the architecture's first", None)
    preset: str = option("named model size of the architecture (tiny, base, large, ...)", "tiny")
    config_overrides: str | None = option(
        "comma-separated config fields applied on top of the preset, e.g. 'hidden_size=128,num_hidden_layers=4'", None)
    model_path: str | None = option(
        "start from this checkpoint instead of a fresh preset (continued pretraining): a folder or a Hub repo id, "
        "hf_xfmr or transformers format (converted on load); its tokenizer unless --tokenizer is given", None)
    revision: str | None = option(
        "branch, tag or commit of a Hub repo --model_path (token: HF_TOKEN or `hf auth login`)", None)
    base_model: str | None = option(
        "Hub id of the model --model_path continues, for the model card of --push_to_hub (base_model); default: "
        "the repo id --model_path names, none for a local folder", None, metavar="ID")
    attn_implementation: str | None = option("attention backend: eager or sdpa", None)
    gradient_checkpointing: bool = option("recompute activations in the backward pass", False)
    compile: bool = option(
        "compile the model with torch.compile (dynamic shapes: batches of other lengths do not recompile); a model "
        "that cannot compile trains eagerly, with a warning naming it", False)
    compile_backend: str = option(
        "torch.compile backend of --compile: inductor (the default, the fast one) or another registered backend "
        "(aot_eager and eager compile quickly, for checking that a model traces)", "inductor")

    # --- data ----------------------------------------------------------------------------------
    dataset: str | None = option(
        "training text: a .txt/.json/.jsonl/.parquet/.csv file, glob or folder, or a `datasets` name; default: the "
        "embedded corpus (no download)", None)
    text_column: str = option("column holding the text", "text")
    dataset_split: str = option("split of the dataset to read", "train")
    streaming: bool = option(
        "read the dataset as a stream (examples are built on the fly; nothing is loaded up front)", False)
    max_documents: int | None = option("use only the first N documents", None)
    eval_dataset: str | None = option(
        "held-out text for evaluation (same formats as --dataset); default: --eval_fraction of the documents", None)
    eval_fraction: float = option(
        "share of the documents held out for evaluation when no --eval_dataset is given (0: no evaluation)", 0.05)
    max_eval_examples: int | None = option("evaluate on at most N examples", 512)
    tokenizer: str | None = option(
        "tokenizer folder; default: train one for the architecture on the training text (saved in the output)", None)
    vocab_size: int = option("vocabulary size of a tokenizer trained on the fly", 8000)
    mlm_probability: float | None = option("masking rate; default: the architecture's (15%, 30% for ModernBERT)", None)
    short_seq_prob: float = option("share of shorter sentence pairs (NSP/SOP)", 0.1)
    generator_size_ratio: float | None = option(
        "rtd: the generator's width as a share of the discriminator's (default 0.25)", None)
    generator_loss_weight: float | None = option("rtd: weight of the generator's MLM loss (default 1)", None)
    discriminator_loss_weight: float | None = option(
        "rtd: weight of the discriminator's replaced-token loss (default 50)", None)
    discriminator_mlm_weight: float | None = option(
        "rtd: weight of an auxiliary MLM loss on the discriminator (default 0: none, the paper's objective)", None)
    gsg_ratio: float | None = option(
        "gsg: share of each window's sentences masked and generated (default 0.3, PEGASUS's)", None)
    gsg_strategy: str | None = option(
        "gsg: how the gap sentences are chosen: ind-orig (PEGASUS's, the default) or another of "
        "hf_xfmr.data.gsg.STRATEGIES (seq-orig, ind-uniq, seq-uniq, random, lead)", None)
    packing: bool = option(
        "pack several windows into each row of --max_seq_length (best fit), each attending only to itself: "
        "rows with little padding (mlm, wwm)", False)
    dataloader_num_workers: int = option("worker processes preparing batches", 0)

    # --- optimisation --------------------------------------------------------------------------
    max_steps: int = option("optimizer steps to train for", 1000)
    per_device_train_batch_size: int = option("examples per micro-batch and process", 32)
    per_device_eval_batch_size: int | None = option(
        "evaluation batch size per process; default: the training one", None)
    batch_size_warmup_steps: int = option(
        "grow the micro-batches per step from 1 to --gradient_accumulation_steps over N steps (batch-size warmup)", 0)
    optimizer: Literal[OPTIMIZERS] = option("adamw or stable_adamw", "adamw")
    weight_decay: float = option("decoupled weight decay (not on biases and norms)", 0.01)
    adam_beta1: float = option("Adam beta1", 0.9)
    adam_beta2: float = option("Adam beta2", 0.98)
    adam_epsilon: float = option("Adam epsilon", 1e-6)
    lr_scheduler: Literal[SCHEDULES] = option(
        "learning-rate schedule: constant, linear, cosine, wsd (warmup-stable-decay) or 1-sqrt", "linear")
    warmup_steps: float = option("linear warmup: a number of steps, or a fraction of --max_steps when below 1", 0.06)
    decay_ratio: float = option("share of the run spent decaying (wsd, 1-sqrt)", 0.1)
    min_lr_ratio: float = option("final learning rate as a fraction of the peak", 0.0)
    max_grad_norm: float | None = option("clip the gradient norm (0 or none: no clipping)", 1.0)
    mixed_precision: Literal["no", "bf16", "fp16"] = option(
        "autocast precision: no, bf16 or fp16 (under `accelerate launch`, its --mixed_precision wins)", "no")
    nan_policy: Literal["stop", "skip"] = option(
        "on a NaN/inf loss: stop with an error naming the step, or skip the step and count it", "stop")
    deepspeed: str | None = option(
        "train with DeepSpeed ZeRO: zero2 or zero3 (configs shipped with hf_xfmr) or a DeepSpeed JSON file; start the "
        "processes with `accelerate launch --multi_gpu --num_processes N` or torchrun", None)
    fsdp: str | None = option(
        "train with PyTorch FSDP2 (fully sharded data parallel, through Accelerate): full_shard or shard_grad_op "
        "(configs shipped with hf_xfmr) or an Accelerate FSDP config file (YAML/JSON); start the processes with "
        "`accelerate launch --multi_gpu --num_processes N` or torchrun", None)

    # --- run -----------------------------------------------------------------------------------
    output_dir: str = option("where the model, tokenizer, logs and checkpoints go", "pretrain_output")
    overwrite_output_dir: bool = option(
        "start afresh in an output folder that holds an earlier run (its checkpoints are deleted)", False)
    resume: str | None = option(
        "continue from a checkpoint: its folder, or no value for the latest one in the output folder",
        None, nargs="?", const="latest")
    eval_steps: int = option("evaluate every N steps (0: only at the end)", 0)
    save_steps: int = option("write a checkpoint every N steps (0: only at the end)", 500)
    save_total_limit: int | None = option("keep only the last K checkpoints", 2)
    report_to_tensorboard: bool = option("also write TensorBoard event files when tensorboard is installed", True)
    progress_bar: bool = option("show a progress bar with loss and tokens/s", True)
    push_to_hub: str | None = option(
        "after training, publish the final model to this Hub repository (needs hf_xfmr.hub)", None)
    ddp_timeout: float = option(
        "distributed runs: seconds a collective operation waits for the other processes before the run fails with an "
        "error naming the step (default 1800: 30 minutes)", 1800.0)
    peak_tflops: float | None = option(
        "the device's peak TFLOP/s for the run's dtype, which the logged MFU divides by (GPUs: the datasheet's dense "
        "figure); default: HF_XFMR_PEAK_GFLOPS, else a matmul probe measured once per machine and cached", None)

    def __post_init__(self):
        _positive_ints(self, ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
                              "max_seq_length", "vocab_size", "logging_steps"))
        _non_negative_ints(self, ("batch_size_warmup_steps", "eval_steps", "save_steps", "dataloader_num_workers"))
        _positive_ints_or_unset(self, ("per_device_eval_batch_size", "max_documents", "max_eval_examples",
                                       "save_total_limit"))
        if self.batch_size_warmup_steps and self.gradient_accumulation_steps < 2:
            raise ValueError("--batch_size_warmup_steps grows the number of micro-batches per step up to "
                             "--gradient_accumulation_steps: set --gradient_accumulation_steps to 2 or more.")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"--eval_fraction must be in [0, 1), got {self.eval_fraction}.")
        if self.mlm_probability is not None and not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability} (BERT uses 0.15).")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob must be in [0, 1], got {self.short_seq_prob}.")
        if self.generator_size_ratio is not None and not 0.0 < self.generator_size_ratio <= 1.0:
            raise ValueError(f"--generator_size_ratio must be in (0, 1], got {self.generator_size_ratio} (ELECTRA: "
                             "0.25, a generator a quarter of the discriminator's width).")
        if self.gsg_ratio is not None and not 0.0 < self.gsg_ratio < 1.0:
            raise ValueError(f"--gsg_ratio must be in (0, 1), got {self.gsg_ratio} (PEGASUS: 0.3).")
        for name in ("generator_loss_weight", "discriminator_loss_weight", "discriminator_mlm_weight"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"--{name} must be >= 0, got {value} (ELECTRA: 1 and 50, no discriminator MLM: 0).")
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
        if self.fsdp is not None and (not isinstance(self.fsdp, str) or not self.fsdp.strip()):
            raise ValueError(f"--fsdp must name a config (full_shard, shard_grad_op) or a YAML/JSON file, "
                             f"got {self.fsdp!r}.")
        if self.fsdp is not None and self.deepspeed is not None:
            raise ValueError("--fsdp and --deepspeed both shard the model: choose one (--fsdp full_shard is the "
                             "counterpart of --deepspeed zero3, --fsdp shard_grad_op of zero2).")
        _check_compile_backend(self)
        if self.peak_tflops is not None and (isinstance(self.peak_tflops, bool) or not isinstance(
                self.peak_tflops, (int, float)) or not 0 < self.peak_tflops < float("inf")):
            raise ValueError(f"--peak_tflops must be a positive number of TFLOP/s (e.g. 989 for an H100's dense bf16), "
                             f"got {self.peak_tflops!r}.")

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


@dataclass(kw_only=True)
class FinetuneArguments(RunArguments):
    """Every option of `finetune` / `hf-xfmr finetune` (the field names are the command-line flags; weight_decay
    comes from `RunArguments`)."""

    Error: ClassVar[type[Exception]] = FinetuneError

    # -- model -------------------------------------------------------------------------------------
    model_name_or_path: str | None = option(
        "checkpoint to start from, a folder or a Hub repo id: hf_xfmr or transformers format (config.json + "
        "safetensors); its tokenizer by default", default=None)
    revision: str | None = option("branch, tag or commit of a Hub repo --model_name_or_path (token: HF_TOKEN or "
                                 "`hf auth login`)", default=None)
    base_model: str | None = option(
        "Hub id of the model this run starts from, for metrics.json and the model card (base_model); default: "
        "the repo id --model_name_or_path names, none for a local folder (a `_name_or_path` in its config.json "
        "is not used)", default=None, metavar="ID")
    arch: str | None = option("architecture for a from-scratch model (instead of --model_name_or_path), e.g. bert",
                             default=None)
    preset: str = option("size preset of --arch (tiny, base, large)", default="tiny")
    config_overrides: str | None = option("config fields for --arch, e.g. 'hidden_size=64,num_hidden_layers=2'",
                                         default=None)
    tokenizer_name_or_path: str | None = option(
        "tokenizer folder; default: the checkpoint's own, or (with --arch) one trained on the training texts",
        default=None)
    vocab_size: int = option("vocabulary size of a tokenizer trained for --arch", default=8000)
    # -- task and data -----------------------------------------------------------------------------
    task: Literal["sequence-classification", "token-classification", "question-answering", "causal-lm", "seq2seq",
                  "summarization", "translation"] = option(
        "what to finetune for; causal-lm: supervised finetuning (SFT) of a decoder on 'messages' chats, "
        "'prompt'/'completion' pairs or plain 'text'; seq2seq: an encoder-decoder (T5, BART, ...) on source/target "
        "texts, scored by ROUGE and BLEU of generated text (summarization and translation: the same, the best "
        "checkpoint by rougeL / bleu)", default=CLASSIFICATION)
    dataset: str | None = option(
        "local data folder or file (csv/tsv/json/jsonl/parquet/txt, or a save_to_disk folder), a datasets Hub "
        "name (needs network or cache), 'vader' / 'vader-3way' (built-in human-rated sentiment sentences), or "
        "for seq2seq 'html-entities' / 'stdlib-docstrings' (built-in tasks from Python's standard library)",
        default=None)
    dataset_config: str | None = option(
        "dataset configuration name; for vader: comma-separated sources (tweets,movies,amazon,nyt)", default=None)
    train_file: str | None = option("training data file (instead of --dataset)", default=None)
    validation_file: str | None = option("validation data file", default=None)
    test_file: str | None = option("test data file (evaluated once, with the best model)", default=None)
    validation_split: float = option("fraction of train held out when there is no validation split", default=0.1)
    text_column: str | None = option(f"text column (default: first of {', '.join(TEXT_COLUMNS)})", default=None)
    text_pair_column: str | None = option("second text column for sentence-pair classification", default=None)
    label_column: str | None = option(f"label column (default: first of {', '.join(LABEL_COLUMNS)})", default=None)
    tokens_column: str | None = option(f"word list column for tagging (default: first of {', '.join(TOKENS_COLUMNS)})",
                                      default=None)
    tags_column: str | None = option(f"tag list column for tagging (default: first of {', '.join(TAGS_COLUMNS)})",
                                    default=None)
    question_column: str = option("question column for QA", default="question")
    context_column: str = option("context column for QA", default="context")
    answers_column: str = option("answers column for QA, SQuAD format {'text': [...], 'answer_start': [...]}",
                                default="answers")
    max_seq_length: int = option("tokens per example (longer texts are truncated; QA contexts are windowed)",
                                default=128)
    chat_template: str | None = option(
        "causal-lm: chat template for 'messages' data, 'chatml' or Jinja (text or a file); default: the "
        "tokenizer's own (saved with the model)", default=None, metavar="TEMPLATE")
    loss_on_prompt: bool = option(
        "causal-lm: train on every token (default: on the assistant turns of chats and on the completion of "
        "prompt/completion pairs only, TRL's assistant_only_loss / completion_only_loss)", default=False)
    padding_free: bool = option(
        "causal-lm: flatten each batch into one row without padding (position_ids restarting per sequence, "
        "cu_seq_lens_*); the sequences stay apart, so the loss is the padded batch's", default=False)
    source_column: str | None = option(
        "seq2seq: the source text column, or with --source_lang the column of translation dicts (default: first of "
        "document, article, source, text, ..., or 'translation')", default=None)
    target_column: str | None = option("seq2seq: the target text column (default: first of summary, highlights, "
                                       "target, ...)", default=None)
    source_lang: str | None = option("translation: the language key to translate from, e.g. en", default=None)
    target_lang: str | None = option("translation: the language key to translate to, e.g. de", default=None)
    source_prefix: str = option("seq2seq: text put before every source, e.g. 'summarize: ' for T5", default="")
    max_target_length: int = option("seq2seq: target tokens kept (longer targets are truncated)", default=128)
    num_beams: int = option("seq2seq: beams of the generation run at each evaluation (1: greedy)", default=1)
    max_new_tokens: int | None = option("seq2seq: tokens generated at most at each evaluation (default: "
                                        "--max_target_length)", default=None)
    doc_stride: int = option("QA: tokens of overlap between windows of a long context", default=32)
    max_answer_length: int = option("QA: longest answer span predicted, in tokens", default=30)
    label_all_tokens: bool = option("tagging: give every sub-word piece its word's tag (default: the first only)",
                                   default=False)
    max_train_samples: int | None = option("use at most this many training examples", default=None)
    max_eval_samples: int | None = option("use at most this many validation examples", default=None)
    max_test_samples: int | None = option("use at most this many test examples", default=None)
    # -- LoRA --------------------------------------------------------------------------------------
    lora: bool = option("train LoRA adapters (plus the task head) instead of all weights", default=False)
    lora_r: int = option("LoRA rank", default=8)
    lora_alpha: int = option("LoRA scaling numerator (the update is scaled by alpha / r)", default=16)
    lora_dropout: float = option("dropout on the LoRA branch", default=0.05)
    lora_target_modules: list[str] | None = option(
        f"module names to adapt (default: those of {', '.join(DEFAULT_LORA_TARGETS)} the model has)", default=None)
    merge: bool = option("with --lora: also write merged/, the adapter folded into a plain model", default=False)
    load_in_4bit: bool = option(
        "QLoRA: load the checkpoint's linear layers in 4-bit NF4 (bitsandbytes, the hf_xfmr[qlora] extra) and "
        "train LoRA adapters on them; needs --lora; --merge folds them into a full-precision copy",
        default=False)
    # -- training ----------------------------------------------------------------------------------
    output_dir: str = option("where everything is written", default="finetune_output")
    overwrite_output_dir: bool = option("allow writing into a non-empty --output_dir", default=False)
    num_train_epochs: float = option("passes over the training data (ignored when --max_steps > 0)", default=3.0)
    max_steps: int = option("optimizer steps; > 0 overrides --num_train_epochs", default=-1)
    per_device_train_batch_size: int = option("training batch size", default=16)
    per_device_eval_batch_size: int = option("evaluation batch size", default=64)
    gradient_accumulation_steps: int = option("batches per optimizer step", default=1)
    learning_rate: float | None = option("peak learning rate (default: 5e-5, or 5e-4 with --lora)", default=None)
    warmup_steps: float = option("warm-up steps; a value below 1 is a fraction of all steps", default=0.1)
    lr_scheduler_type: str = option("learning-rate schedule (linear, cosine, constant, ...)", default="linear")
    eval_strategy: Literal["steps", "epoch"] = option("evaluate (and checkpoint) every --eval_steps or every epoch",
                                                     default="steps")
    eval_steps: int | None = option("steps between evaluations (default: about 5 evaluations per run)", default=None)
    logging_steps: int | None = option("steps between loss logs (default: about 50 logs per run)", default=None)
    metric_for_best_model: str | None = option(
        "validation metric that picks the best checkpoint, e.g. accuracy, f1, exact_match, loss "
        "(default: accuracy for classification, loss for causal-lm, f1 otherwise)", default=None)
    greater_is_better: bool | None = option("whether a larger --metric_for_best_model is better (default: "
                                           "True, False for loss)", default=None)
    seed: int = option("random seed (model init, data order, dropout)", default=42)
    nan_policy: Literal["stop", "skip"] = option(
        "on a NaN/inf training loss: stop with an error naming the step (no model is saved), or skip that batch "
        "(no update from it) and count it", default="stop")
    bf16: bool = option("bfloat16 mixed precision", default=False)
    use_cpu: bool = option("train on the CPU even when a GPU is available", default=False)
    compile: bool = option(
        "compile the model with torch.compile (dynamic shapes: batches of other lengths do not recompile); a model "
        "that cannot compile trains eagerly, with a warning naming it", default=False)
    compile_backend: str = option(
        "torch.compile backend of --compile: inductor (the default, the fast one) or another registered backend "
        "(aot_eager and eager compile quickly, for checking that a model traces)", default="inductor")
    dataloader_num_workers: int = option("data loading worker processes", default=0)
    report_to: str = option("experiment trackers for Trainer ('none', 'tensorboard', 'wandb', ...)", default="none")
    disable_tqdm: bool = option("hide progress bars", default=False)
    keep_checkpoints: bool = option("keep the intermediate checkpoints in output_dir/checkpoints", default=False)
    push_to_hub: str | None = option("after training, export the final model and upload it to this Hub repo id "
                                    "(needs --merge with --lora)", default=None)
    resume: str | None = option(
        "continue an interrupted run from a checkpoint of --output_dir/checkpoints: its folder, or no value for the "
        "latest (checkpoints hold the optimizer state with --keep_checkpoints)", default=None, nargs="?",
        const="latest")

    def __post_init__(self):
        if (self.model_name_or_path is None) == (self.arch is None):
            raise FinetuneError("Pass exactly one of --model_name_or_path (a checkpoint folder) and --arch "
                                "(a from-scratch model), got " +
                                ("both." if self.arch else "neither."))
        if self.task not in FINETUNE_TASKS:
            raise FinetuneError(f"--task {self.task!r} is not a finetuning task; choose one of "
                                f"{', '.join(FINETUNE_TASKS)}.")
        if self.dataset is None and self.train_file is None:
            raise FinetuneError("No data: pass --dataset (folder, file, Hub name, 'vader' or 'html-entities') or --train_file.")
        if self.dataset is not None and self.train_file is not None:
            raise FinetuneError("Pass either --dataset or --train_file/--validation_file/--test_file, not both.")
        if self.merge and not self.lora:
            raise FinetuneError("--merge folds LoRA adapters into the model; it needs --lora (full finetuning "
                                "already writes a plain model).")
        if self.push_to_hub and self.lora and not self.merge:
            raise FinetuneError("--push_to_hub uploads a complete model: with --lora also pass --merge.")
        self._check_sft_options()
        self._check_seq2seq_options()
        for name in ("max_seq_length", "per_device_train_batch_size", "per_device_eval_batch_size",
                     "gradient_accumulation_steps", "lora_r", "vocab_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise FinetuneError(f"--{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("max_train_samples", "max_eval_samples", "max_test_samples", "eval_steps", "logging_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise FinetuneError(f"--{name} must be >= 1 (or left unset), got {value}.")
        if not 0 < self.validation_split < 1:
            raise FinetuneError(f"--validation_split must be between 0 and 1, got {self.validation_split}.")
        if not 0 <= self.lora_dropout < 1:
            raise FinetuneError(f"--lora_dropout must be in [0, 1), got {self.lora_dropout}.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise FinetuneError(f"--learning_rate must be > 0, got {self.learning_rate}.")
        if self.nan_policy not in ("stop", "skip"):
            raise FinetuneError(f"--nan_policy must be stop or skip, got {self.nan_policy!r}.")
        _check_compile_backend(self)
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise FinetuneError("Set --num_train_epochs > 0 or --max_steps > 0.")
        if self.task == QUESTION_ANSWERING and not 0 <= self.doc_stride < self.max_seq_length // 2:
            raise FinetuneError(f"--doc_stride ({self.doc_stride}) must be >= 0 and below half of --max_seq_length "
                                f"({self.max_seq_length}) so that windows advance.")


    def _check_seq2seq_options(self) -> None:
        if self.task not in SEQ2SEQ_TASKS:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            used = [name for name in ("source_column", "target_column", "source_lang", "target_lang", "source_prefix",
                                 "max_target_length", "num_beams", "max_new_tokens")
                    if getattr(self, name) != defaults[name]]
            if used:
                raise FinetuneError(f"--{used[0]} applies to --task seq2seq / summarization / translation, not to "
                                    f"--task {self.task}.")
        for name in ("max_target_length", "num_beams"):
            if getattr(self, name) < 1:
                raise FinetuneError(f"--{name} must be >= 1, got {getattr(self, name)}.")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise FinetuneError(f"--max_new_tokens must be >= 1 (or left unset), got {self.max_new_tokens}.")
        if self.resume is not None and self.overwrite_output_dir:
            raise FinetuneError("--resume continues the run in --output_dir; --overwrite_output_dir would delete its "
                                "checkpoints: pass one of them.")

    def _check_sft_options(self) -> None:
        if self.load_in_4bit and not self.lora:
            raise FinetuneError("--load_in_4bit quantizes the base weights, which then cannot be trained: pass "
                                "--lora as well (QLoRA trains LoRA adapters on the 4-bit base).")
        if self.load_in_4bit and self.model_name_or_path is None:
            raise FinetuneError("--load_in_4bit loads a checkpoint in 4 bits: pass --model_name_or_path (a "
                                "from-scratch --arch model has no pretrained weights to quantize).")
        if self.task != CAUSAL_LM:
            used = [name for name in ("chat_template", "loss_on_prompt", "padding_free") if getattr(self, name)]
            if used:
                raise FinetuneError(f"--{used[0]} applies to --task causal-lm (SFT), not to --task {self.task}.")


def read_config_file(path) -> dict:
    """A finetuning options file (YAML or JSON) as field name -> value, checked and with numbers parsed
    (`FinetuneArguments.read_file`; kept under the name `hf_xfmr.training.finetune` has always exported)."""
    return FinetuneArguments.read_file(path)


def check_distillation_loss(temperature: float, alpha_ce: float, alpha_mlm: float, alpha_cos: float) -> None:
    """The loss settings `DistillationLoss` and `DistillArguments` accept: T > 0, weights >= 0, not all 0."""
    if not temperature > 0:
        raise ValueError(f"`temperature` (--temperature) must be > 0, got {temperature} (the recipe uses 2.0).")
    for name, value in (("alpha_ce", alpha_ce), ("alpha_mlm", alpha_mlm), ("alpha_cos", alpha_cos)):
        if not value >= 0:
            raise ValueError(f"`{name}` (--{name}) must be >= 0, got {value}.")
    if alpha_ce + alpha_mlm + alpha_cos == 0:
        raise ValueError("At least one of `alpha_ce`, `alpha_mlm`, `alpha_cos` (--alpha_ce, --alpha_mlm, "
                         "--alpha_cos) must be > 0 (the recipe: 5, 2, 1).")


def _student_kind(text: str) -> str | None:
    """`--student auto` -> None (the recipe's student); anything else as given."""
    return None if text == "auto" else text


@dataclass(kw_only=True)
class DistillArguments(RunArguments):
    """Everything a distillation run needs; defaults follow the DistilBERT recipe where it states one.

    Args:
        teacher: a checkpoint folder or Hub repo id (hf_xfmr or transformers format, loaded as an MLM) or an MLM
            model; revision: the branch, tag or commit of a Hub repo teacher.
        output_dir: where the student, its tokenizer and `distill_log.json` are written (None: not saved).
        tokenizer: a tokenizer or a folder; default the teacher's folder.
        student: None (the recipe's student: DistilBERT for a BERT teacher, the teacher's architecture
            otherwise), "same", "distilbert", a student config, or a folder / model to continue training.
        student_layers: student depth (default half the teacher's); student_layer_ids: which teacher layers.
        corpus: anything `hf_xfmr.data.load_corpus` takes (None: the embedded corpus); max_documents caps it.
        text_column: the corpus column holding the text (as `hf-xfmr pretrain --text_column`).
        max_seq_length: tokens per training sequence (longer documents are cut into several).
        max_steps, batch_size, gradient_accumulation_steps: optimizer steps and their size.
        learning_rate, warmup_ratio, weight_decay, adam_epsilon, max_grad_norm: AdamW with linear warmup and decay.
        temperature, alpha_ce, alpha_mlm, alpha_cos: the loss (see `DistillationLoss`).
        mlm_probability: masking rate of the inputs (80/10/10 replacement).
        eval_sequences: held-out sequences for the top-1 agreement reported before and after (0: none).
        bf16: bf16 autocast; device: "cpu", "cuda" (default: cuda when available).
        logging_steps: progress-bar / log interval; seed: data order, masking and anything random.
        resume, save_steps, save_total_limit, deepspeed: as for `hf-xfmr pretrain`, whose training loop
            (`Pretrainer`) distillation runs on: exact resume from a checkpoint, DDP and DeepSpeed ZeRO.
    Each field but `progress` is an `hf-xfmr distill` option; the older short names (--output, --seq_len,
    --lr, ...) are its aliases. max_steps comes from `RunArguments` as it is.
    """

    teacher: Any = option("teacher checkpoint folder or Hub repo id (loaded as an MLM)", metavar="DIR")
    revision: str | None = option("branch, tag or commit of a Hub repo --teacher (token: HF_TOKEN or "
                                  "`hf auth login`)", None, metavar="REV")
    output_dir: str | None = option("where the student is written", None, aliases=("output",), metavar="DIR",
                                    required=True)
    corpus: Any = option("text: a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets name (default: the "
                         "embedded offline corpus)", None, metavar="SRC")
    text_column: str = option("the corpus column holding the text", "text", metavar="NAME")
    max_documents: int | None = option("use at most N documents", None, metavar="N")
    tokenizer: Any = option("tokenizer folder (default: --teacher)", None, metavar="DIR")
    student: Any = option("'auto' (DistilBERT for a BERT teacher, else the teacher's architecture), 'same', "
                          "'distilbert', or a student checkpoint folder to keep training (default: auto)", None,
                          metavar="KIND", parse=_student_kind)
    student_layers: int | None = option("student depth (default: half the teacher's, rounded up)", None,
                                        metavar="N")
    student_layer_ids: list[int] | None = option(
        "teacher layers to copy (default: evenly spaced, first and last included)", None, aliases=("layer_ids",),
        metavar="I,J,...", parse=parse_int_list)
    batch_size: int = option("sequences per step", 16, metavar="N")
    gradient_accumulation_steps: int = option("micro-batches per optimizer step", 1, aliases=("grad_accum",),
                                              metavar="N")
    max_seq_length: int = option("tokens per sequence", 128, aliases=("seq_len",), metavar="N")
    learning_rate: float = option("peak AdamW learning rate", 5e-4, aliases=("lr",), metavar="X")
    warmup_ratio: float = option("share of steps warming up", 0.05, metavar="X")
    weight_decay: float = option("AdamW weight decay", 0.0, metavar="X")
    adam_epsilon: float = option("AdamW epsilon", 1e-6, metavar="X")
    max_grad_norm: float = option("gradient clipping, 0 = off", 5.0, metavar="X")
    temperature: float = option("softmax temperature T", 2.0, metavar="X")
    alpha_ce: float = option("weight of the soft-target KL", 5.0, metavar="X")
    alpha_mlm: float = option("weight of the MLM loss", 2.0, metavar="X")
    alpha_cos: float = option("weight of the hidden-state cosine", 1.0, metavar="X")
    mlm_probability: float = option("masking rate", 0.15, metavar="X")
    eval_sequences: int = option("held-out sequences for the top-1 agreement report, 0 = none", 64, metavar="N")
    bf16: bool = option("bf16 autocast", False)
    device: str | None = option("default: cuda when available", None, choices=("cpu", "cuda"))
    logging_steps: int = option("progress update interval", 10, metavar="N")
    seed: int = option("data order, masking and anything random", 0, metavar="N")
    overwrite_output_dir: bool = option("write into a non-empty --output_dir", False, aliases=("overwrite",))
    resume: str | None = option(
        "continue from a checkpoint: its folder, or no value for the latest one in --output_dir", None, nargs="?",
        const="latest", metavar="DIR")
    save_steps: int = option("write a checkpoint every N steps (0: none, except the last one under DeepSpeed)", 0,
                             metavar="N")
    save_total_limit: int | None = option("keep only the last K checkpoints", 2, metavar="K")
    deepspeed: str | None = option(
        "train with DeepSpeed ZeRO: zero2 or zero3 (configs shipped with hf_xfmr) or a DeepSpeed JSON file; start the "
        "processes with `accelerate launch --multi_gpu --num_processes N` or torchrun", None, metavar="CONFIG")
    progress: bool = True

    def __post_init__(self):
        # Messages name the `hf-xfmr distill` flag, which is the field's own name (as in PretrainArguments).
        _positive_ints(self, ("max_seq_length", "max_steps", "batch_size", "gradient_accumulation_steps",
                              "logging_steps"))
        if self.max_seq_length < 4:
            raise ValueError(f"--max_seq_length {self.max_seq_length} is too short; use at least 4 (e.g. 128).")
        if not self.learning_rate > 0:
            raise ValueError(f"--learning_rate must be > 0, got {self.learning_rate}.")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"--warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability} (BERT uses 0.15).")
        if not isinstance(self.eval_sequences, int) or self.eval_sequences < 0:
            raise ValueError(f"--eval_sequences must be an integer >= 0, got {self.eval_sequences!r}.")
        _positive_ints_or_unset(self, ("max_documents", "save_total_limit"))
        _non_negative_ints(self, ("save_steps",))
        if self.deepspeed is not None and (not isinstance(self.deepspeed, str) or not self.deepspeed.strip()):
            raise ValueError(f"--deepspeed must name a config (zero2, zero3) or a JSON file, got {self.deepspeed!r}.")
        if not isinstance(self.text_column, str) or not self.text_column:
            raise ValueError(f"--text_column must name a column of the corpus, got {self.text_column!r}.")
        if self.device not in (None, "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ValueError(f"--device must be 'cpu' or 'cuda' (or None for automatic), got {self.device!r}.")
        check_distillation_loss(self.temperature, self.alpha_ce, self.alpha_mlm, self.alpha_cos)


__all__ = [
    "DEFAULT_LORA_TARGETS",
    "OPTIMIZERS",
    "SCHEDULES",
    "DistillArguments",
    "FinetuneArguments",
    "PretrainArguments",
    "RunArguments",
    "check_distillation_loss",
    "option",
    "read_config_file",
]
