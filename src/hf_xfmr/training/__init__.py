"""Training: finetuning with Trainer + PEFT (`finetune`)."""

from .finetune import FinetuneArguments, FinetuneResult, finetune, load_adapter_model
from .finetune_tasks import FinetuneError
