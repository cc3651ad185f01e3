"""Checkpoints of a pretraining run: atomic writes, rotation, validation, exact restore, export.

`make_checkpointer` gives a run its checkpoint component (`Checkpointer`; `DeepSpeedCheckpointer` for a
DeepSpeed engine; `FSDPCheckpointer` for a model sharded by FSDP2): the one place where the backends save, load
and export differently.

Layout of `OUTPUT/checkpoints/step_N/` (written as `step_N.tmp/`, renamed when complete):

    trainer_state.json          step, data position, counters, run settings (written last)
    model/                      config.json + model.safetensors: the trained module's whole state dict, a tied
                                weight once (without DeepSpeed; `save_model_state`)
    optimizer.safetensors       optimizer tensors; optimizer.json: its other fields (without DeepSpeed)
    deepspeed/                  the DeepSpeed engine's own checkpoint (ZeRO partitions, its optimizer)
    fsdp/                       FSDP2: each process's shard of the model (model_<rank>.safetensors) and of the
                                optimizer state (optimizer_<rank>.safetensors + optimizer_<rank>.json)
    config.json                 the model config (with DeepSpeed or FSDP, for validation)
    rng_<rank>.safetensors      torch RNG states; rng_<rank>.json: Python/NumPy RNG and data-stream state
    objective_state_<rank>.safetensors   a stateful objective's state (e.g. XLNet memories)

A kill at any moment leaves either the previous complete checkpoint or the new one: the rename of a
finished `.tmp` folder is atomic, and unfinished `.tmp` folders are ignored (and removed by the next save).
Everything we write is safetensors or JSON; only the DeepSpeed engine writes its own (pickle) files.
"""

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

FORMAT_VERSION = 1
CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.json"
DEEPSPEED_TAG = "deepspeed"  # the folder (DeepSpeed "tag") the engine writes its own checkpoint to
FSDP_DIR = "fsdp"  # the folder of the per-process shards of an FSDP2 run
_STEP_DIR = re.compile(r"^step_(\d+)$")
# Config fields that do not change the model (bookkeeping written by transformers).
_CONFIG_BOOKKEEPING = {"transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype",
                       "_attn_implementation", "attn_implementation", "_commit_hash", "output_attentions",
                       "output_hidden_states", "use_cache", "return_dict"}
# Settings that must match for a resumed run to continue exactly where the checkpoint stopped.
RESUME_SETTINGS = ("arch", "objective", "seed", "world_size", "per_device_train_batch_size",
                   "gradient_accumulation_steps", "batch_size_warmup_steps", "max_seq_length", "num_train_examples",
                   "deepspeed", "fsdp", "teacher")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, incomplete, or from a different model or run."""


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / CHECKPOINTS


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (`step_N` folders) of a run, oldest first. `.tmp` folders are not listed."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


def resolve_resume(resume: str, output_dir: str | Path) -> Path:
    """The checkpoint folder meant by `--resume` ("latest" or a path)."""
    if resume == "latest":
        path = latest_checkpoint(output_dir)
        if path is None:
            raise CheckpointError(f"--resume: no checkpoint in {checkpoint_root(output_dir)} to resume from. "
                                  "Run without --resume to start, or pass --resume PATH.")
        return path
    path = Path(resume)
    if not path.is_dir():
        raise CheckpointError(f"--resume {resume}: no such checkpoint folder.")
    return path


def check_unfinished(path: Path, max_steps: int, output_dir: str | Path) -> None:
    """A CheckpointError when the checkpoint `path` already reached `max_steps`: the run is finished and
    `--resume` has nothing to do."""
    step = int(read_state(path)["step"])
    if step < max_steps:
        return
    final = Path(output_dir) / "model.safetensors"
    where = f"its final model is in {output_dir}" if final.is_file() else f"its weights are in {path}"
    reached = "reached" if step == max_steps else "is past"
    raise CheckpointError(
        f"the run is finished: its checkpoint {path} is at step {step}, which {reached} --max_steps {max_steps} "
        f"({where}). To train it further, resume with a larger --max_steps (e.g. --max_steps {2 * step}); to "
        "start a new run, choose a new --output_dir (or pass --overwrite_output_dir without --resume).")


# ----------------------------------------------------------------------------------------------
# Reading and validating
# ----------------------------------------------------------------------------------------------

def read_state(path: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint, or a CheckpointError saying what is wrong with it."""
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path} is not a complete pretraining checkpoint (no {STATE_FILE}). "
                              "Pick another one with --resume PATH.")
    try:
        state = json.loads(state_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{state_file} is corrupted ({err}). Pick another checkpoint with --resume PATH.") from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION or "step" not in state:
        raise CheckpointError(f"{state_file} is not a trainer state written by hf_xfmr pretrain "
                              f"(format {FORMAT_VERSION}). Pick another checkpoint with --resume PATH.")
    return state


def _check_safetensors(file: Path) -> None:
    if not file.is_file():
        raise CheckpointError(f"Checkpoint file {file} is missing. Pick another checkpoint with --resume PATH.")
    try:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                f.get_slice(key)
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"Checkpoint file {file} is corrupted ({err}). "
                              "Pick another checkpoint with --resume PATH.") from None


def _model_config_dict(path: Path) -> dict:
    file = path / "model" / "config.json" if (path / "model" / "config.json").is_file() else path / "config.json"
    try:
        return json.loads(file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no model config ({file}). Pick another checkpoint with --resume PATH.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{file} is corrupted ({err}). Pick another checkpoint with --resume PATH.") from None


def validate_checkpoint(path: Path, config, settings: dict[str, Any], world_size: int) -> dict:
    """Check that `path` can be resumed by this run; returns its trainer state.

    Nothing is loaded or written: every check happens before the run touches its output folder.
    """
    state = read_state(path)
    saved = _model_config_dict(path)
    current = config.to_dict()
    if saved.get("model_type") == current.get("model_type"):
        try:  # through the config class, so defaults and JSON key types compare like for like
            saved = type(config).from_dict(saved).to_dict()
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"The model config in {path} is invalid ({err}). Pick another checkpoint.") from None
    if saved.get("model_type") != current.get("model_type"):
        raise CheckpointError(
            f"{path} holds a {saved.get('model_type')!r} model but this run trains {current.get('model_type')!r} "
            f"(--arch {settings.get('arch')}). Resume with the checkpoint's architecture or start a new --output_dir.")
    differ = sorted(k for k in set(saved) | set(current)
                    if k not in _CONFIG_BOOKKEEPING and saved.get(k) != current.get(k))
    if differ:
        shown = "; ".join(f"{k}: {saved.get(k)!r} in the checkpoint, {current.get(k)!r} now" for k in differ[:6])
        raise CheckpointError(f"{path} was written by a model with a different config ({shown}). Resume with the "
                              "same --preset/--config_overrides/tokenizer, or start a new --output_dir.")
    saved_settings = state.get("settings", {})
    mismatched = [k for k in RESUME_SETTINGS if k in saved_settings and saved_settings[k] != settings.get(k)]
    if mismatched:
        shown = "; ".join(f"{k}: {saved_settings[k]!r} in the checkpoint, {settings.get(k)!r} now" for k in mismatched)
        raise CheckpointError(f"{path} cannot be resumed exactly with these settings ({shown}). Use the checkpoint's "
                              "settings (and number of processes), or start a new --output_dir.")
    if settings.get("deepspeed"):
        if not (path / DEEPSPEED_TAG).is_dir():
            raise CheckpointError(f"{path} has no DeepSpeed state (deepspeed/). Pick another checkpoint.")
    elif settings.get("fsdp"):
        for r in range(world_size):
            _check_safetensors(path / FSDP_DIR / f"model_{r}.safetensors")
            _check_safetensors(path / FSDP_DIR / f"optimizer_{r}.safetensors")
    else:
        _check_safetensors(path / "model" / "model.safetensors")
        _check_safetensors(path / "optimizer.safetensors")
    for r in range(world_size):  # every process checks every file, so all of them stop together
        if not (path / f"rng_{r}.json").is_file():
            raise CheckpointError(f"{path} has no random state for process {r} (rng_{r}.json); it was written "
                                  f"by a run with {saved_settings.get('world_size')} process(es).")
        _check_safetensors(path / f"rng_{r}.safetensors")
    return state


# ----------------------------------------------------------------------------------------------
# Pieces: optimizer, RNG, objective state
# ----------------------------------------------------------------------------------------------

def save_optimizer(optimizer: torch.optim.Optimizer, folder: Path, stem: str = "optimizer") -> None:
    """The optimizer's tensors as safetensors and the rest (param groups, scalars) as JSON (`stem`.safetensors,
    `stem`.json). A tensor sharded by FSDP2 (a DTensor) is written as this process's shard, and named in the JSON
    (`sharded`) so that `load_optimizer` makes it a DTensor again."""
    state_dict = optimizer.state_dict()
    tensors, scalars, sharded = {}, {}, []
    for pid, entry in state_dict["state"].items():
        for key, value in entry.items():
            if torch.is_tensor(value):
                name = f"state.{pid}.{key}"
                if _is_dtensor(value):
                    value = value.to_local()
                    sharded.append(name)
                tensors[name] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    save_file(tensors, str(folder / f"{stem}.safetensors"))
    _write_json(folder / f"{stem}.json", {"param_groups": state_dict["param_groups"], "scalars": scalars,
                                          "sharded": sharded})


def load_optimizer(optimizer: torch.optim.Optimizer, folder: Path, stem: str = "optimizer") -> None:
    """Restore what `save_optimizer` wrote; a shard (named in `sharded`) becomes a DTensor laid out as the
    parameter it belongs to (the checkpoint and this run have the same processes and sharding)."""
    tensors = load_file(str(folder / f"{stem}.safetensors"))
    meta = json.loads((folder / f"{stem}.json").read_text())
    params = [p for group in optimizer.param_groups for p in group["params"]]  # the order of the state's ids
    sharded = set(meta.get("sharded", ()))
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        if name in sharded:
            value = _as_shard_of(params[int(pid)], value)
        state.setdefault(int(pid), {})[key] = value
    for pid, entry in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(entry)
    groups = meta["param_groups"]
    for group in groups:  # JSON turned tuples into lists; optimizers compare e.g. betas by value only
        if "betas" in group:
            group["betas"] = tuple(group["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _is_dtensor(value) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _local(value: torch.Tensor) -> torch.Tensor:
    """This process's part of a tensor: the local shard of a DTensor, the tensor itself otherwise."""
    return value.to_local() if _is_dtensor(value) else value


def _as_shard_of(param, local: torch.Tensor) -> torch.Tensor:
    """`local` (this process's shard) as a DTensor sharded like `param`."""
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(local.to(param.device), param.device_mesh, param.placements, run_check=False,
                              shape=param.shape, stride=param.stride())


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda.{i}"] = s
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    extra = {"python": [version, list(internal), gauss],
             "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    return tensors, extra


def set_rng_state(tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = extra["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = extra["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def flatten_state(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A state of tensors and lists of tensors as a flat safetensors mapping (`name.0`, `name.1`, ...)."""
    flat = {}
    for key, value in state.items():
        if torch.is_tensor(value):
            flat[key] = value.detach().cpu().contiguous()
        elif isinstance(value, (list, tuple)) and all(torch.is_tensor(v) for v in value):
            for i, v in enumerate(value):
                flat[f"{key}.{i}"] = v.detach().cpu().contiguous()
            if not value:
                raise ValueError(f"Objective state {key!r} is an empty list; store None-free tensors only.")
        else:
            raise ValueError(f"Objective state {key!r} must be a tensor or a list of tensors, "
                             f"got {type(value).__name__}.")
    return flat


def unflatten_state(flat: dict[str, torch.Tensor], device) -> dict[str, Any]:
    state: dict[str, Any] = {}
    lists: dict[str, dict[int, torch.Tensor]] = {}
    for key, value in flat.items():
        head, _, tail = key.rpartition(".")
        if head and tail.isdigit():
            lists.setdefault(head, {})[int(tail)] = value.to(device)
        else:
            state[key] = value.to(device)
    for key, items in lists.items():
        state[key] = [items[i] for i in range(len(items))]
    return state


def _write_json(file: Path, value: Any) -> None:
    with open(file, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------

def begin_checkpoint(output_dir: str | Path, step: int, is_main: bool) -> Path:
    """The `.tmp` folder a checkpoint of `step` is written to (created by the main process)."""
    tmp = checkpoint_root(output_dir) / f"step_{step}.tmp"
    if is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    return tmp


def write_process_state(tmp: Path, rank: int, objective_state: dict | None, data_state: dict | None) -> None:
    """What every process writes: its RNG states, data-stream position and objective state."""
    tensors, extra = rng_state()
    save_file(tensors, str(tmp / f"rng_{rank}.safetensors"))
    extra["data"] = data_state
    _write_json(tmp / f"rng_{rank}.json", extra)
    if objective_state:
        save_file(flatten_state(objective_state), str(tmp / f"objective_state_{rank}.safetensors"))


def commit_checkpoint(tmp: Path, state: dict[str, Any], keep: int | None) -> Path:
    """Main process, after every process finished writing: write the trainer state, rename, rotate."""
    state = {"format_version": FORMAT_VERSION, **state}
    _write_json(tmp / STATE_FILE, state)
    final = tmp.with_name(tmp.name[: -len(".tmp")])
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    output_dir = final.parent.parent
    for path in final.parent.iterdir():  # leftovers of interrupted writes
        if path.name.endswith(".tmp") and path != tmp:
            shutil.rmtree(path, ignore_errors=True)
    if keep:
        for _, old in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_process_state(path: Path, rank: int, device) -> tuple[dict, dict | None, dict | None]:
    """(RNG tensors + extra, data-stream state, objective state) of process `rank`."""
    tensors = load_file(str(path / f"rng_{rank}.safetensors"))
    extra = json.loads((path / f"rng_{rank}.json").read_text())
    objective_file = path / f"objective_state_{rank}.safetensors"
    objective_state = unflatten_state(load_file(str(objective_file)), device) if objective_file.is_file() else None
    return {"tensors": tensors, "extra": extra}, extra.get("data"), objective_state


def save_model_state(model: torch.nn.Module, folder: Path) -> None:
    """`folder/config.json` (the model's config) and `folder/model.safetensors`: its whole state dict, each tied
    weight once. Every trained module checkpoints this way, whatever its `save_pretrained` writes (a
    generator + discriminator pair saves as two models; a distillation module is a student beside a teacher),
    so `load_model_weights` restores any of them."""
    folder.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(str(folder / "config.json"))
    tied = tied_names(model)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def load_model_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load `folder/model.safetensors` into `model`; only tied (shared) weights may be absent from the file."""
    load_fitting_state(model, load_file(str(folder / "model.safetensors")), f"The weights in {folder} do not fit")


def load_fitting_state(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], what: str) -> None:
    """Load `state_dict` into `model`, then tie its weights. Only tied (shared) weights may be absent; any
    other missing or unexpected name raises a CheckpointError starting with `what` ("The weights in X do
    not fit")."""
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    tied = tied_names(model)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise CheckpointError(f"{what} the model: missing {missing[:5]}, unexpected {unexpected[:5]}.")
    if hasattr(model, "tie_weights"):
        model.tie_weights()


def save_model_shard(model: torch.nn.Module, file: Path) -> None:
    """This process's shard of an FSDP2 model's state dict (the local part of every DTensor; unsharded buffers
    whole), each tied weight once, as safetensors: no process gathers the whole model."""
    tied = tied_names(model)
    state = {k: _local(v).detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(file), metadata={"format": "pt"})


def load_model_shard(model: torch.nn.Module, file: Path) -> None:
    """Copy `save_model_shard`'s file into this process's shard of `model` (same processes and sharding)."""
    saved = load_file(str(file))
    tied = tied_names(model)
    current = model.state_dict()  # the DTensors share their local storage with the sharded parameters
    missing = [k for k in current if k not in saved and k not in tied]
    unexpected = [k for k in saved if k not in current]
    wrong = [k for k in saved if k in current and _local(current[k]).shape != saved[k].shape]
    if missing or unexpected or wrong:
        raise CheckpointError(f"The model shard {file} does not fit the model: missing {missing[:5]}, unexpected "
                              f"{unexpected[:5]}, other shapes {wrong[:5]}. Resume with the processes and --fsdp "
                              "sharding the checkpoint was written with.")
    with torch.no_grad():
        for name, value in saved.items():
            _local(current[name]).copy_(value)


def gather_full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole state dict of an FSDP2 model, gathered on the CPU of the main process (an empty dict on the
    others). Every process must call it: it all-gathers every shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def tied_names(model: torch.nn.Module) -> set[str]:
    """Names of parameters that share storage with another, earlier-named parameter."""
    seen: dict[int, str] = {}
    tied = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        key = id(param)
        if key in seen:
            tied.add(name)
        else:
            seen[key] = name
    return tied


# ----------------------------------------------------------------------------------------------
# The checkpoint component of a run: plain / DDP and DeepSpeed behind one interface
# ----------------------------------------------------------------------------------------------

class Checkpointer:
    """Saves, restores and exports the model and optimizer of one pretraining run (one process or DDP).

    `DeepSpeedCheckpointer` and `FSDPCheckpointer` are the same interface for a DeepSpeed engine and an FSDP2
    model; `make_checkpointer` picks one,
    so the training loop has no backend branches. Every process calls every method (they wait for each
    other inside); only the main process writes the shared files. Accelerate's `save_state`/`load_state`
    are not used: they write pickles in another layout, and this layout (module docstring) is what
    `--resume` and `validate_checkpoint` read.
    """

    always_save_final_step = False  # DeepSpeed: the final model is consolidated from the last checkpoint

    def __init__(self, output_dir: str | Path, accelerator, keep: int | None):
        self.output_dir, self.accelerator, self.keep = Path(output_dir), accelerator, keep

    def restore(self, path: Path, model, optimizer, *, prepared: bool) -> None:
        """Load the weights and optimizer state of checkpoint `path`. Called twice: before
        `accelerator.prepare` on the bare model and optimizer (`prepared=False`; checkpoints that do not fit
        fail before the output folder is touched), and after it on the wrapped ones (`prepared=True`)."""
        if not prepared:
            load_model_weights(model, path / "model")
            load_optimizer(optimizer, path)

    def write_model(self, tmp: Path, model, unwrapped, optimizer) -> None:
        """Write the model and optimizer into the checkpoint folder `tmp` (`model/`, `optimizer.*`)."""
        if self.accelerator.is_main_process:
            save_model_state(unwrapped, tmp / "model")
            save_optimizer(getattr(optimizer, "optimizer", optimizer), tmp)  # the optimizer Accelerate wraps

    def save(self, step: int, model, unwrapped, optimizer, *, objective_state: dict | None, data_state: dict | None,
             trainer_state: dict[str, Any], on_written=None) -> Path:
        """Write the checkpoint of `step` atomically (`step_N.tmp`, renamed when complete; older ones rotated
        to `keep`). `model` is the prepared (wrapped) model, `unwrapped` the bare one. `on_written(tmp)` runs
        on every process once its files are written, before the commit (callbacks add files there)."""
        accelerator = self.accelerator
        tmp = begin_checkpoint(self.output_dir, step, accelerator.is_main_process)
        accelerator.wait_for_everyone()
        self.write_model(tmp, model, unwrapped, optimizer)
        write_process_state(tmp, accelerator.process_index, objective_state, data_state)
        if on_written is not None:
            on_written(tmp)
        accelerator.wait_for_everyone()
        final = tmp.with_name(f"step_{step}")
        if accelerator.is_main_process:
            final = commit_checkpoint(tmp, trainer_state, self.keep)
        accelerator.wait_for_everyone()
        return final

    def export(self, unwrapped, model_class, last_saved: int | None, *, fresh=None, write=None):
        """Write the final model to the output folder (main process); returns it there, None elsewhere.

        `write(model, folder)` writes the trained module and returns the final model (default:
        `model.save_pretrained(folder)`, returning `model`): a module of two networks writes the one that is
        kept (a distilled student, a discriminator and its generator). `fresh()` builds a new instance of the
        trained module (default: `model_class(unwrapped.config)`), into which DeepSpeed consolidates."""
        if self.accelerator.is_main_process:
            return _write(write, unwrapped, self.output_dir)
        return None


class DeepSpeedCheckpointer(Checkpointer):
    """The `Checkpointer` of a DeepSpeed engine: the engine writes and reads its own checkpoint (ZeRO
    partitions and its optimizer, in `deepspeed/`), and the final model is the fp32 consolidation of the
    last checkpoint, which is therefore always written."""

    always_save_final_step = True

    def restore(self, path: Path, model, optimizer, *, prepared: bool) -> None:
        if prepared:  # the engine (and its optimizer) exist only after `accelerator.prepare`
            model.load_checkpoint(str(path), tag=DEEPSPEED_TAG, load_optimizer_states=True,
                                  load_lr_scheduler_states=False)

    def write_model(self, tmp: Path, model, unwrapped, optimizer) -> None:
        model.save_checkpoint(str(tmp), tag=DEEPSPEED_TAG)  # every process writes its partitions
        if self.accelerator.is_main_process:
            unwrapped.config.to_json_file(str(tmp / "config.json"))  # read by `validate_checkpoint`

    def export(self, unwrapped, model_class, last_saved: int | None, *, fresh=None, write=None):
        path = checkpoint_root(self.output_dir) / f"step_{last_saved}"
        model = None
        if self.accelerator.is_main_process:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            state_dict = get_fp32_state_dict_from_zero_checkpoint(str(path), tag=DEEPSPEED_TAG)
            model = fresh() if fresh is not None else model_class(unwrapped.config)
            load_fitting_state(model, state_dict, f"The DeepSpeed checkpoint {path} does not fit")
            model = _write(write, model, self.output_dir)
        self.accelerator.wait_for_everyone()
        return model


class FSDPCheckpointer(Checkpointer):
    """The `Checkpointer` of a model sharded by FSDP2 (`fully_shard`, through Accelerate's FSDP plugin): every
    process writes and reads only its own shard of the parameters and of the optimizer state (`fsdp/`, as
    safetensors + JSON), so no process ever holds the whole model or optimizer for a checkpoint. A checkpoint
    resumes with the same number of processes (a resume setting) and sharding. The final model is the full
    state dict gathered from the shards at the end (`gather_full_state_dict`), written by `save_pretrained`."""

    def restore(self, path: Path, model, optimizer, *, prepared: bool) -> None:
        if prepared:  # the shards exist only after `accelerator.prepare` has sharded the model
            rank, folder = self.accelerator.process_index, path / FSDP_DIR
            load_model_shard(model, folder / f"model_{rank}.safetensors")
            load_optimizer(getattr(optimizer, "optimizer", optimizer), folder, stem=f"optimizer_{rank}")

    def write_model(self, tmp: Path, model, unwrapped, optimizer) -> None:
        rank, folder = self.accelerator.process_index, tmp / FSDP_DIR
        folder.mkdir(parents=True, exist_ok=True)
        save_model_shard(unwrapped, folder / f"model_{rank}.safetensors")
        save_optimizer(getattr(optimizer, "optimizer", optimizer), folder, stem=f"optimizer_{rank}")
        if self.accelerator.is_main_process:
            unwrapped.config.to_json_file(str(tmp / "config.json"))  # read by `validate_checkpoint`

    def export(self, unwrapped, model_class, last_saved: int | None, *, fresh=None, write=None):
        state_dict = gather_full_state_dict(unwrapped)
        model = None
        if self.accelerator.is_main_process:
            model = fresh() if fresh is not None else model_class(unwrapped.config)
            load_fitting_state(model, state_dict, "The state dict gathered from the FSDP shards does not fit")
            model = _write(write, model, self.output_dir)
        self.accelerator.wait_for_everyone()
        return model


def _write(write, model, folder: Path):
    if write is None:
        model.save_pretrained(folder)
        return model
    return write(model, folder)


def make_checkpointer(output_dir: str | Path, accelerator, keep: int | None, deepspeed: bool,
                      fsdp: bool = False) -> Checkpointer:
    """The checkpoint component of a run: `DeepSpeedCheckpointer` under DeepSpeed, `FSDPCheckpointer` under
    FSDP2, else `Checkpointer`."""
    kind = DeepSpeedCheckpointer if deepspeed else FSDPCheckpointer if fsdp else Checkpointer
    return kind(output_dir, accelerator, keep)


def export_deepspeed_checkpoint(path: Path, model_class, config, out: Path):
    """A consolidated fp32 model from a DeepSpeed checkpoint folder, saved as safetensors in `out`."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state_dict = get_fp32_state_dict_from_zero_checkpoint(str(path), tag=DEEPSPEED_TAG)
    model = model_class(config)
    load_fitting_state(model, state_dict, f"The DeepSpeed checkpoint {path} does not fit")
    model.save_pretrained(out)
    return model
