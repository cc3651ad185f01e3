"""`export`: a flat, Hub-ready folder that loads anywhere with `trust_remote_code=True`.

The folder holds config.json (our `xfmr-*` model type, `architectures`, and an `auto_map` for every
Auto class the architecture serves), safetensors weights (sharded with an index when large), the
generated `configuration_<type>.py` / `modeling_<type>.py`, the tokenizer files,
`generation_config.json` for models that generate, a README.md model card and, when training logs
are given, the loss-curve plot. It is written to a temporary sibling folder and moved into place at
the end, so a failed export never leaves a half-written folder behind.
"""

import copy
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Mapping, Sequence

from transformers import PreTrainedModel

from ..data.tokenizers import fit_tokenizer_to_model
from ..models.registry import TASK_AUTO_CLASSES, Architecture, architectures, get_architecture
from .cards import LOSS_CURVE_FILE, CardInfo, render_card
from .errors import ExportError
from .flatten import FlattenError
from .remote_code import GENERATED_MARKER, RemoteCode, generate_remote_code
from .repo_id import check_repo_id

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")

_CODE_CACHE: dict[str, RemoteCode] = {}


def remote_code_for(arch: Architecture) -> RemoteCode:
    """The generated code of `arch`, generated once per process."""
    if arch.name not in _CODE_CACHE:
        try:
            _CODE_CACHE[arch.name] = generate_remote_code(arch)
        except FlattenError as err:
            raise ExportError(f"cannot generate the remote code of {arch.name}: {err}") from err
    return _CODE_CACHE[arch.name]


def _check_model(model) -> tuple[Architecture, str]:
    if hasattr(model, "merge_and_unload") and hasattr(model, "peft_config"):
        raise ExportError("`model` is a PEFT model: merge its adapters into the weights first "
                          "(`model = model.merge_and_unload()`), then export the merged model.")
    if not isinstance(model, PreTrainedModel):
        raise ExportError(f"`model` must be an hf_xfmr model (a transformers PreTrainedModel), "
                          f"got {type(model).__name__}.")
    try:
        arch = get_architecture(model)
    except ValueError:
        known = ", ".join(a.model_type for a in architectures())
        raise ExportError(
            f"cannot export a {type(model).__name__} (model_type {model.config.model_type!r}): only hf_xfmr "
            f"models can be exported (model types: {known}). Convert a transformers model first with "
            f"`hf_xfmr.from_transformers(model)`."
        ) from None
    tasks = [task for task, cls in arch.classes.items() if cls is type(model)]
    if not tasks:
        names = ", ".join(sorted({cls.__name__ for cls in arch.classes.values()}))
        raise ExportError(
            f"{type(model).__name__} is not one of hf_xfmr's {arch.name} classes ({names}); the exported code is "
            f"generated from those classes, so subclasses and other models cannot be exported."
        )
    return arch, tasks[0]


def _is_export(folder: Path) -> bool:
    """Whether `folder` holds a previous export (config.json with auto_map and generated code)."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    generated = any(GENERATED_MARKER in p.read_text(errors="replace")[:400] for p in folder.glob("*.py"))
    return isinstance(config, dict) and "auto_map" in config and generated


def _check_folder(folder: Path, overwrite: bool) -> None:
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"{folder} exists and is a file; export writes a folder: choose another path.")
    if folder.is_dir() and any(folder.iterdir()):
        if not overwrite:
            raise ExportError(f"{folder} exists and is not empty; pass overwrite=True (--overwrite) to replace "
                              f"a previous export, or choose a new folder.")
        if not _is_export(folder):
            raise ExportError(f"{folder} is not empty and does not hold an hf_xfmr export; refusing to replace "
                              f"it. Choose a new folder (or empty it yourself).")


def auto_map_for(code: RemoteCode, model_class: type, task: str) -> dict[str, str]:
    """Every Auto class of the architecture; the exported class takes its task's slot (AutoModel when its
    task has no Auto class, e.g. an encoder-only model), so `Auto...from_pretrained` returns it."""
    auto_map = dict(code.auto_map)
    auto_map[TASK_AUTO_CLASSES.get(task) or "AutoModel"] = f"{code.modeling_module}.{code.class_names[model_class]}"
    return auto_map


def _check_tokenizer(tokenizer, model) -> None:
    if tokenizer is None:
        warnings.warn("exporting without a tokenizer: users of the folder will need to find the matching "
                      "tokenizer themselves. Pass the tokenizer the model was trained with.", stacklevel=3)
        return
    if not hasattr(tokenizer, "save_pretrained"):
        raise ExportError(f"`tokenizer` must be a transformers tokenizer (with save_pretrained), "
                          f"got {type(tokenizer).__name__}.")
    vocab_size = getattr(model.config, "vocab_size", None)
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise ExportError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {vocab_size}: ids past "
            f"{vocab_size - 1} would fail. Resize the model first (`model.resize_token_embeddings(len(tokenizer))`) "
            f"or pass the tokenizer the model was trained with."
        )


def _write_config(folder: Path, code: RemoteCode, model, task: str) -> None:
    path = folder / CONFIG_FILE
    config = json.loads(path.read_text())
    config["architectures"] = [code.class_names[type(model)]]
    config["auto_map"] = auto_map_for(code, type(model), task)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _write_generation_config(folder: Path, model) -> None:
    if not model.can_generate() or (folder / "generation_config.json").is_file():
        return
    from transformers import GenerationConfig

    generation_config = model.generation_config or GenerationConfig.from_model_config(model.config)
    generation_config.save_pretrained(folder)


def export(
    model,
    tokenizer,
    folder,
    *,
    repo_id: str | None = None,
    title: str | None = None,
    description: str | None = None,
    license: str | None = None,
    language: str | Sequence[str] | None = None,
    datasets: Sequence[str] = (),
    base_model: str | None = None,
    tags: Sequence[str] = (),
    metrics: Mapping[str, float] | None = None,
    eval_dataset: str | None = None,
    eval_dataset_config: str | None = None,
    eval_split: str | None = None,
    eval_source: str | None = None,
    training: Mapping[str, Any] | None = None,
    training_logs=None,
    max_shard_size: int | str = "5GB",
    overwrite: bool = False,
) -> Path:
    """Write `model` (an hf_xfmr model) and `tokenizer` as a self-contained, Hub-ready folder.

    The folder loads with `AutoModel...from_pretrained(folder_or_repo, trust_remote_code=True)` where
    hf_xfmr is not installed: its code is generated from hf_xfmr's sources (see `remote_code.py`).

    Args:
        model: an hf_xfmr model of any registered architecture and head (merge LoRA adapters first).
        tokenizer: its tokenizer (saved into the folder); None only warns.
        folder: the output folder; must be new or empty, or a previous export with `overwrite=True`.
        repo_id: the Hub repository it will be published to (used in the card's code samples; `publish`
            fills it in when left out).
        title, description: the card's heading (default: the repository's name, else the folder's) and opening
            paragraph.
        license, language, datasets, base_model, tags: the card's metadata (Hub ids for datasets and
            base_model). No licence is stated unless one is given.
        metrics: evaluation results, e.g. {"accuracy": 0.91}, measured on `eval_dataset` (a Hub dataset
            id; with `eval_dataset_config` and `eval_split`): they go into the card's model-index and its
            Evaluation section. Measured on other data, pass `eval_source` instead (a description, e.g.
            "the validation split of train.csv"): they are then shown in the Evaluation section only.
        training: training settings shown in the card, e.g. {"steps": 1000, "learning_rate": 5e-4}.
        training_logs: JSON-lines training logs (Trainer's log_history records; see `hf_xfmr.plots`): a
            path, a list of paths or a {label: path} mapping. Their loss curves are plotted into
            `loss_curve.png` and summarised in the card.
        max_shard_size: largest weights file before sharding (with model.safetensors.index.json).
        overwrite: replace `folder` if it holds a previous export.

    Returns the folder. Raises ExportError for a model that cannot be exported or bad arguments.
    """
    arch, task = _check_model(model)
    folder = Path(folder)
    _check_folder(folder, overwrite)
    _check_tokenizer(tokenizer, model)
    if repo_id is not None:
        check_repo_id(repo_id, error=ExportError)
    code = remote_code_for(arch)
    title = title or (repo_id.split("/")[-1] if repo_id else folder.name)
    card = dict(title=title, description=description, repo_id=repo_id, license=license,
                language=language, datasets=tuple(datasets), base_model=base_model, tags=tuple(tags),
                metrics=metrics, eval_dataset=eval_dataset, eval_dataset_config=eval_dataset_config,
                eval_split=eval_split, eval_source=eval_source, training=training)
    with _staged(folder) as tmp:
        _write_model(tmp, model, task, code, tokenizer, max_shard_size)
        curves = _plot_training_logs(training_logs, tmp, card["title"])
        _write_card(tmp, _card_info(model, arch, task, code, curves, card))
        check_export_folder(tmp)
    return folder


@contextmanager
def _staged(folder: Path):
    """A temporary sibling of `folder` to write into; moved into place when the block succeeds (replacing
    a previous export), removed when it fails, so a failed export never leaves a half-written folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.export-", dir=folder.parent))
    try:
        yield tmp
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_model(folder: Path, model, task: str, code: RemoteCode, tokenizer, max_shard_size) -> None:
    """The weights, config.json (with `auto_map`), generation_config.json, the generated code and the
    tokenizer files."""
    try:
        model.save_pretrained(folder, max_shard_size=max_shard_size)
    except ValueError as err:
        raise ExportError(f"cannot save the weights: {err}") from err
    _write_config(folder, code, model, task)
    _write_generation_config(folder, model)
    for name, text in code.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    if tokenizer is not None:  # a copy emitting what the model takes (DistilBERT: no token_type_ids)
        fit_tokenizer_to_model(copy.copy(tokenizer), model).save_pretrained(folder)


def _plot_training_logs(training_logs, folder: Path, title: str) -> list:
    """The loss curves of `training_logs` (plots.LossCurves), plotted into folder/loss_curve.png; [] without logs."""
    if training_logs is None:
        return []
    from ..plots import plot_loss_curves

    try:
        return plot_loss_curves(training_logs, folder / LOSS_CURVE_FILE, title=f"{title} loss")
    except (OSError, ValueError) as err:
        raise ExportError(f"cannot plot the training logs: {err}") from err


def _card_info(model, arch: Architecture, task: str, code: RemoteCode, curves: list, card: dict) -> CardInfo:
    """What the model card shows: facts read from the model and its generated code, plus `card` (the
    metadata `export` was given)."""
    return CardInfo(
        task=task, auto_class=TASK_AUTO_CLASSES.get(task) or "AutoModel", arch_name=arch.name,
        model_type=arch.model_type, model_class=code.class_names[type(model)], config=model.config,
        num_parameters=model.num_parameters(), dtype=str(model.dtype).replace("torch.", ""),
        code_files=sorted(code.files), can_generate=model.can_generate(), loss_curves=curves,
        loss_curve_file=LOSS_CURVE_FILE if curves else None, **card,
    )


def _write_card(folder: Path, info: CardInfo) -> None:
    try:
        card = render_card(info)
    except ValueError as err:
        raise ExportError(str(err)) from err
    (folder / "README.md").write_text(card, encoding="utf-8")


def check_export_folder(folder) -> list[Path]:
    """Check that `folder` is a complete export; returns its files (relative paths, sorted).

    Raises ExportError naming what is missing: config.json (with model_type and auto_map), the
    weights (model.safetensors, or the index and every shard it lists), the code files `auto_map`
    points to. Pickle files are refused: exports are safetensors only.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ExportError(f"{folder} is not a folder; pass the folder written by export (hf-xfmr export).")
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise ExportError(f"{folder} has no {CONFIG_FILE}: it is not an exported model. Write one with "
                          f"`hf_xfmr.hub.export(model, tokenizer, folder)` or `hf-xfmr export`.")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as err:
        raise ExportError(f"{config_path} is not valid JSON: {err}") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ExportError(f"{config_path} has no model_type; re-export the model.")
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    pickles = [str(p) for p in files if p.suffix in PICKLE_SUFFIXES]
    if pickles:
        raise ExportError(f"{folder} contains pickle files ({', '.join(pickles)}); hf_xfmr publishes safetensors "
                          f"only. Remove them (the weights are in {WEIGHTS_FILE}).")
    index_path = folder / WEIGHTS_INDEX_FILE
    if index_path.is_file():
        try:
            shards = set(json.loads(index_path.read_text())["weight_map"].values())
        except (ValueError, KeyError, AttributeError) as err:
            raise ExportError(f"{index_path} is not a valid safetensors index ({err}); re-export the model.") from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise ExportError(f"{folder} is missing weight shards listed in {WEIGHTS_INDEX_FILE}: "
                              f"{', '.join(missing)}; re-export the model.")
    elif not (folder / WEIGHTS_FILE).is_file():
        raise ExportError(f"{folder} has no model weights ({WEIGHTS_FILE} or {WEIGHTS_INDEX_FILE}); re-export "
                          f"the model.")
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map:
        raise ExportError(f"{config_path} has no auto_map, so the model cannot load where hf_xfmr is not "
                          f"installed; write the folder with hf_xfmr.hub.export (hf-xfmr export).")
    modules = {str(ref).rsplit(".", 1)[0] for ref in auto_map.values()}
    missing = sorted(f"{m}.py" for m in modules if not (folder / f"{m}.py").is_file())
    if missing:
        raise ExportError(f"{folder} is missing the model code {', '.join(missing)} named in config.json's "
                          f"auto_map; re-export the model.")
    return files


__all__ = ["ExportError", "auto_map_for", "check_export_folder", "export", "remote_code_for"]
