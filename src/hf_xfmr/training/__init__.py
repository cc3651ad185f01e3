"""Training: the pretraining loop (Accelerate, DeepSpeed) and its recipe pieces, and finetuning with
Trainer + PEFT.

    from hf_xfmr.training import PretrainArguments, pretrain
    result = pretrain(PretrainArguments(arch="bert", objective="mlm", max_steps=100, output_dir="out"))

    from hf_xfmr.training import FinetuneArguments, finetune
    result = finetune(FinetuneArguments(model_name_or_path="out/model", dataset="vader", lora=True, merge=True))

Pieces used by name: `arguments` (the settings dataclasses of pretrain, finetune and distill),
`objectives` (the objective table and its state hooks), `optim` (AdamW / StableAdamW, linear / cosine /
wsd / 1-sqrt schedules, batch-size warmup), `checkpoint` (atomic, validated, exactly resumable
checkpoints), `logs` (JSON lines + TensorBoard); `finetune_tasks` (labels, tokenization, metrics and QA
post-processing of the finetuning tasks).

The names below are imported on first use (PEP 562), so that `hf_xfmr.training.arguments` (what
`hf-xfmr --help` reads) does not pull in torch. Modules of this package import from its submodules,
never from the package itself.
"""

import sys
import types

from ..lazy import lazy_exports

# public name -> the submodule that defines it
_EXPORTS = {
    "PretrainArguments": "arguments",
    "FinetuneArguments": "arguments",
    "DistillArguments": "arguments",
    "CheckpointError": "checkpoint",
    "latest_checkpoint": "checkpoint",
    "list_checkpoints": "checkpoint",
    "FinetuneResult": "finetune",
    "finetune": "finetune",
    "load_adapter_model": "finetune",
    "FinetuneError": "finetune_tasks",
    "read_log": "logs",
    "Objective": "objectives",
    "ObjectiveSettings": "objectives",
    "available_objectives": "objectives",
    "get_objective": "objectives",
    "register_objective": "objectives",
    "StableAdamW": "optim",
    "build_optimizer": "optim",
    "lr_multiplier": "optim",
    "CollectiveError": "pretrain",
    "NonFiniteLossError": "pretrain",
    "PretrainCallback": "pretrain",
    "PretrainResult": "pretrain",
    "PretrainRun": "pretrain",
    "pretrain": "pretrain",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


class _Package(types.ModuleType):
    """`pretrain` and `finetune` name both a submodule and the function it defines. Importing the submodule
    binds its name on the package (the import system's doing); as before this package became lazy, that
    name stays the function: `from hf_xfmr.training import pretrain` is the function, whatever was imported
    first. Anything else is set as usual (e.g. a test's monkeypatch)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
