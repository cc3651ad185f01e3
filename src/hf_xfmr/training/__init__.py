"""Training: the pretraining loop (Accelerate, DeepSpeed) and its recipe pieces, and finetuning with
Trainer + PEFT.

    from hf_xfmr.training import PretrainArguments, pretrain
    result = pretrain(PretrainArguments(arch="bert", objective="mlm", max_steps=100, output_dir="out"))

    from hf_xfmr.training import FinetuneArguments, finetune
    result = finetune(FinetuneArguments(model_name_or_path="out/model", dataset="vader", lora=True, merge=True))

Pieces used by name: `objectives` (the objective table and its state hooks), `optim` (AdamW /
StableAdamW, linear / cosine / wsd / 1-sqrt schedules, batch-size warmup), `checkpoint` (atomic,
validated, exactly resumable checkpoints), `logs` (JSON lines + TensorBoard); `finetune_tasks`
(labels, tokenization, metrics and QA post-processing of the finetuning tasks).
"""

from .arguments import PretrainArguments
from .checkpoint import CheckpointError, latest_checkpoint, list_checkpoints
from .finetune import FinetuneArguments, FinetuneResult, finetune, load_adapter_model
from .finetune_tasks import FinetuneError
from .logs import read_log
from .objectives import Objective, ObjectiveSettings, available_objectives, get_objective, register_objective
from .optim import StableAdamW, build_optimizer, lr_multiplier
from .pretrain import CollectiveError, NonFiniteLossError, PretrainCallback, PretrainResult, PretrainRun, pretrain

__all__ = [
    "CheckpointError",
    "CollectiveError",
    "FinetuneArguments",
    "FinetuneError",
    "FinetuneResult",
    "NonFiniteLossError",
    "Objective",
    "ObjectiveSettings",
    "PretrainArguments",
    "PretrainCallback",
    "PretrainResult",
    "PretrainRun",
    "StableAdamW",
    "available_objectives",
    "build_optimizer",
    "finetune",
    "get_objective",
    "latest_checkpoint",
    "list_checkpoints",
    "load_adapter_model",
    "lr_multiplier",
    "pretrain",
    "read_log",
    "register_objective",
]
