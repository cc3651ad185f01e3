"""FSDP2 for pretraining (`hf-xfmr pretrain --fsdp full_shard|shard_grad_op|FILE`): the shipped configs, the
Accelerate plugin, and what Accelerate's FSDP2 preparation does not do for every model.

Accelerate (1.15) runs FSDP2 only on accelerator devices; `pin_fsdp` makes it run on CPU over gloo too (torch's
`fully_shard` does), which is how the suite tests it with 2 processes. Checkpoints: `checkpoint.FSDPCheckpointer`.
"""

import os
from pathlib import Path
from typing import Any

import torch

from .arguments import PretrainArguments

# The FSDP2 configs shipped with the package (`--fsdp full_shard`): the `fsdp_config` keys of an Accelerate config.
FSDP_CONFIGS = Path(__file__).with_name("fsdp_configs")
# What an FSDP config file may set: its key -> the field of Accelerate's FullyShardedDataParallelPlugin.
FSDP_KEYS = {"fsdp_version": "fsdp_version", "fsdp_reshard_after_forward": "reshard_after_forward",
             "fsdp_auto_wrap_policy": "auto_wrap_policy",
             "fsdp_transformer_layer_cls_to_wrap": "transformer_cls_names_to_wrap",
             "fsdp_min_num_params": "min_num_params", "fsdp_state_dict_type": "state_dict_type",
             "fsdp_offload_params": "cpu_offload", "fsdp_activation_checkpointing": "activation_checkpointing",
             "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading"}
FSDP_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")


def shipped_fsdp_configs() -> list[str]:
    """Names of the FSDP2 configs shipped with hf_xfmr (full_shard, shard_grad_op)."""
    return sorted(p.stem for p in FSDP_CONFIGS.glob("*.yaml"))


def resolve_fsdp_config(value: str, source: str = "--fsdp") -> dict[str, Any]:
    """The FullyShardedDataParallelPlugin arguments meant by `value`: a shipped config by name (full_shard,
    shard_grad_op) or a YAML/JSON file (relative to the current folder) holding either the `fsdp_config` keys
    themselves or a whole Accelerate config with an `fsdp_config` section. Raises a ValueError naming `source`."""
    from ..options import read_options_file, shipped_or_path

    path = shipped_or_path(value, FSDP_CONFIGS, ".yaml", source=source, kind="an FSDP",
                           example="e.g. --fsdp full_shard", file="an Accelerate FSDP config (YAML or JSON)")
    values = read_options_file(path, what=f"{source} {value}: the FSDP config")
    if "fsdp_config" in values:  # a whole Accelerate config (accelerate launch --config_file)
        if values.get("distributed_type", "FSDP") != "FSDP":
            raise ValueError(f"{source} {value}: {path} is an Accelerate config for distributed_type "
                             f"{values['distributed_type']}, not FSDP.")
        values = values["fsdp_config"] or {}
    unknown = sorted(set(values) - set(FSDP_KEYS))
    if unknown:
        raise ValueError(f"{source} {value}: {path} sets {', '.join(unknown)}, which hf-xfmr pretrain does not take; "
                         f"an FSDP config may set {', '.join(FSDP_KEYS)} (see {FSDP_CONFIGS}/full_shard.yaml).")
    if values.get("fsdp_version") != 2:
        raise ValueError(f"{source} {value}: {path} must set fsdp_version: 2 (FSDP2, torch's fully_shard); "
                         f"got {values.get('fsdp_version')!r}. FSDP1 is not supported.")
    if values.get("fsdp_state_dict_type", "SHARDED_STATE_DICT") != "SHARDED_STATE_DICT":
        raise ValueError(f"{source} {value}: fsdp_state_dict_type must be SHARDED_STATE_DICT: checkpoints are always "
                         "sharded (one file per process) and the final model is always the gathered full state dict.")
    policy = str(values.get("fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP")).upper()
    if policy not in FSDP_WRAP_POLICIES:
        raise ValueError(f"{source} {value}: fsdp_auto_wrap_policy must be one of {', '.join(FSDP_WRAP_POLICIES)}, "
                         f"got {policy!r}.")
    kwargs = {FSDP_KEYS[k]: v for k, v in values.items()}
    kwargs.update(auto_wrap_policy=policy.lower(), state_dict_type="SHARDED_STATE_DICT")
    layers = kwargs.get("transformer_cls_names_to_wrap")
    if isinstance(layers, str):  # Accelerate's spelling: class names separated by commas
        kwargs["transformer_cls_names_to_wrap"] = [name.strip() for name in layers.split(",") if name.strip()]
    return kwargs


def launched_with_fsdp() -> bool:
    """`accelerate launch` with an Accelerate config whose distributed_type is FSDP."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true", "yes")


def using_fsdp(args: PretrainArguments) -> bool:
    return bool(getattr(args, "fsdp", None)) or launched_with_fsdp()


def make_fsdp_plugin(args: PretrainArguments):
    """Accelerate's FSDP2 plugin for the run: `--fsdp`'s config, else the one `accelerate launch` set up from its
    config file (which must be FSDP2)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    if getattr(args, "fsdp", None):
        return FullyShardedDataParallelPlugin(**resolve_fsdp_config(args.fsdp))
    plugin = FullyShardedDataParallelPlugin()  # from the FSDP_* variables accelerate launch sets
    if plugin.fsdp_version != 2:
        raise ValueError(f"The Accelerate config asks for FSDP version {plugin.fsdp_version}; hf-xfmr pretrain runs "
                         "FSDP2: set fsdp_version: 2 in its fsdp_config, or pass --fsdp full_shard.")
    return plugin


# Where `pin_fsdp` keeps the process group's own distributed type while a run shards with FSDP.
_PROCESS_GROUP_TYPE = "_hf_xfmr_distributed_type"


def pin_fsdp(accelerator, plugin, mixed_precision: str | None) -> None:
    """Make the run's distributed type FSDP, and keep it so, on CPU too.

    Accelerate (1.15) makes an FSDP plugin the distributed type FSDP only on accelerator devices
    (AcceleratorState switches MULTI_GPU, MULTI_XPU, ... to FSDP, never MULTI_CPU), so on CPU it would wrap the
    model in DDP, although torch's `fully_shard` runs on CPU over gloo: set what Accelerate sets on a GPU (the
    plugin, its mixed-precision policy). And every later `AcceleratorState()` (e.g. the one each prepared
    optimizer makes) copies the process group's distributed type (PartialState) over the FSDP one; so the
    process group says FSDP too, until the next run (`unpin_fsdp`). Its collectives are the same for FSDP."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    if not accelerator.is_fsdp2:
        if mixed_precision is not None:
            plugin.set_mixed_precision(mixed_precision)
        accelerator.state.fsdp_plugin = plugin
    partial = PartialState._shared_state
    partial.setdefault(_PROCESS_GROUP_TYPE, partial["distributed_type"])
    partial["distributed_type"] = accelerator.state.distributed_type = DistributedType.FSDP


def unpin_fsdp() -> None:
    """The process group's own distributed type again (after an FSDP run in this process)."""
    from accelerate.state import PartialState

    partial = PartialState._shared_state
    if _PROCESS_GROUP_TYPE in partial:
        partial["distributed_type"] = partial.pop(_PROCESS_GROUP_TYPE)


def fsdp_layer_classes(model: torch.nn.Module) -> list[str]:
    """The classes FSDP2 shards one by one (each gathers its parameters when it is called): the model's
    `_no_split_modules`, where a container that is never called itself (no `forward` of its own: ALBERT's layer
    group, whose layers the encoder calls in turn) stands for the classes of the modules it holds, and without
    a module that holds the input or output embeddings (ModernBERT's embeddings): Accelerate shards those itself."""
    by_name = {type(m).__name__: m for m in model.modules()}
    embeddings = [m for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None]
    names: list[str] = []

    def add(module: torch.nn.Module) -> None:
        name = type(module).__name__
        if any(e is m for e in embeddings for m in module.modules()):
            return
        if type(module).forward is not torch.nn.Module.forward:
            if name not in names:
                names.append(name)
            return
        for child in module.children():
            add(child)

    for name in getattr(model, "_no_split_modules", None) or []:
        if name in by_name:
            add(by_name[name])
    return names


def shared_parameter_owners(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """The groups of modules that hold one parameter between them (tied or shared weights), as lists of the
    modules that hold the parameter itself; a group per set of such modules."""
    owners: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None and module not in owners.setdefault(id(param), []):
                owners[id(param)].append(module)
    groups: list[list[torch.nn.Module]] = []
    for modules in owners.values():
        if len(modules) > 1 and not any(set(map(id, modules)) == set(map(id, g)) for g in groups):
            groups.append(modules)
    return groups


def prepare_fsdp(accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """What Accelerate's FSDP2 preparation does not do for every model, done before it:

    - the layer classes of a transformer-based wrap policy, unless the FSDP config names them
      (`fsdp_transformer_layer_cls_to_wrap`): `fsdp_layer_classes`;
    - modules that share a parameter sharded as one group (FSDP2 refuses a parameter in two groups), unless
      Accelerate groups them itself (a model's input and output embeddings tied): e.g. the embeddings and the
      generator's decoder that replaced-token detection shares between its generator and its discriminator
      (the optimizer, still without state, then holds the sharded parameters in place of the originals)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    plugin = accelerator.state.fsdp_plugin
    if plugin.auto_wrap_policy is transformer_auto_wrap_policy and not plugin.transformer_cls_names_to_wrap:
        plugin.transformer_cls_names_to_wrap = fsdp_layer_classes(model)
    tied = {id(m) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None}
    groups = [modules for modules in shared_parameter_owners(model) if {id(m) for m in modules} != tied]
    if not groups:
        return
    before = dict(model.named_parameters())
    for modules in groups:
        fully_shard(modules, reshard_after_forward=plugin.reshard_after_forward, offload_policy=plugin.cpu_offload,
                    mp_policy=plugin.mixed_precision_policy or MixedPrecisionPolicy())
    sharded = {id(before[name]): param for name, param in model.named_parameters()}
    for group in optimizer.param_groups:
        group["params"] = [sharded.get(id(param), param) for param in group["params"]]
