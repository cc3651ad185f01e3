"""Model cards: the README.md of an exported model, and the card fields of a training run.

`render_card(CardInfo)` renders the README.md from the templates in `model_cards/`: one template per
task family (`TASK_FAMILIES`); the YAML metadata is built with huggingface_hub's
`ModelCardData`/`EvalResult`, so the model-index follows the Hub's schema. Templates are found in the
package (`hf_xfmr/hub/model_cards`, a link to the repository's top-level `model_cards/` in a checkout,
a copy in an installed wheel) or, failing that, in the checkout's top-level `model_cards/`.

`pretrain_card_fields` and `finetune_card_fields` turn a run's settings and metrics into the card
arguments of `export` (description, base model, training settings, metrics and where they were
measured): `--push_to_hub` and `hf-xfmr export` of a finetuning run's model both use them.
"""

import glob
import json
import math
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import __version__
from .repo_id import is_model_id

# task -> (template name, Hub pipeline tag). Every task of models.registry.TASK_AUTO_CLASSES is here.
TASK_FAMILIES = {
    "base": ("feature-extraction", "feature-extraction"),
    "encoder": ("feature-extraction", "feature-extraction"),
    "pretraining": ("fill-mask", "fill-mask"),
    "masked-lm": ("fill-mask", "fill-mask"),
    "causal-lm": ("text-generation", "text-generation"),
    "seq2seq-lm": ("text2text-generation", "text2text-generation"),
    "sequence-classification": ("text-classification", "text-classification"),
    "token-classification": ("token-classification", "token-classification"),
    "question-answering": ("question-answering", "question-answering"),
    "multiple-choice": ("multiple-choice", None),  # the Hub has no multiple-choice pipeline
}
REPO_ID_PLACEHOLDER = "<your-username>/<model-name>"
LOSS_CURVE_FILE = "loss_curve.png"

# Config fields shown in the card when the config has them (reference names differ per architecture).
_SIZE_FIELDS = (
    ("layers", ("num_hidden_layers", "n_layer", "num_layers")),
    ("hidden size", ("hidden_size", "d_model", "n_embd")),
    ("attention heads", ("num_attention_heads", "n_head", "num_heads")),
    ("feed-forward size", ("intermediate_size", "d_inner", "d_ff", "n_inner")),
    ("vocabulary", ("vocab_size",)),
    ("max positions", ("max_position_embeddings", "n_positions")),
)


def templates_dir() -> Path:
    """The folder holding the card templates (package data first, then the checkout's model_cards/)."""
    here = Path(__file__).resolve().parent
    candidates = [here / "model_cards", here.parents[2] / "model_cards"]
    for candidate in candidates:
        if (candidate / "fill-mask.md").is_file():
            return candidate
    raise FileNotFoundError(
        "hf_xfmr's model card templates are missing (looked in " + ", ".join(map(str, candidates)) + "); "
        "reinstall hf_xfmr"
    )


def template_for(task: str, can_generate: bool = False) -> tuple[str, str | None]:
    """(template name, pipeline tag) of a task. A generative pretraining head reads as text generation."""
    if task not in TASK_FAMILIES:
        raise ValueError(f"no model card template for task {task!r}; known tasks: {', '.join(TASK_FAMILIES)}")
    if task == "pretraining" and can_generate:
        return TASK_FAMILIES["causal-lm"]
    return TASK_FAMILIES[task]


def hub_model_id(name_or_path) -> str | None:
    """The Hub model id that `name_or_path` (what a model was loaded from) stands for, for a card's
    `base_model`; None when there is no real id to name (a local folder).

    A string that is not a local path is taken as the id itself, and a folder in the Hugging Face cache
    (`models--owner--name/snapshots/<revision>`, where a Hub id was downloaded to) gives `owner/name`. Any
    other folder gives None, whatever its config.json records: a `_name_or_path` there (transformers 4 saved
    one) names the model that checkpoint was itself trained from, not the checkpoint (pass the id explicitly,
    e.g. `--base_model`, when the folder is a copy of a Hub model).
    """
    if name_or_path is None:
        return None
    text = str(name_or_path)
    path = Path(text).expanduser()
    if not path.exists():
        return text if is_model_id(text) else None
    parts = path.resolve().parts
    for i, part in enumerate(parts[:-2]):
        if part.startswith("models--") and parts[i + 1] == "snapshots":
            candidate = part.removeprefix("models--").replace("--", "/")
            return candidate if is_model_id(candidate) else None
    return None


@dataclass
class CardInfo:
    """Everything a model card shows; `export` fills it from the model and its arguments."""

    title: str
    task: str
    auto_class: str
    arch_name: str
    model_type: str
    model_class: str
    config: Any
    num_parameters: int
    dtype: str
    code_files: Sequence[str]
    can_generate: bool = False
    description: str | None = None
    repo_id: str | None = None
    license: str | None = None  # only what the user gave: a card never claims a licence by default
    language: str | Sequence[str] | None = None
    datasets: Sequence[str] = ()
    base_model: str | None = None
    tags: Sequence[str] = ()
    metrics: Mapping[str, float] | None = None
    eval_dataset: str | None = None
    eval_dataset_config: str | None = None
    eval_split: str | None = None
    eval_source: str | None = None  # where `metrics` come from when it is not a Hub dataset (text only)
    training: Mapping[str, Any] | None = None
    loss_curves: list = field(default_factory=list)  # plots.LossCurves of the training logs
    loss_curve_file: str | None = None


def _metadata(info: CardInfo, pipeline_tag: str | None) -> str:
    from huggingface_hub import EvalResult, ModelCardData

    tags = list(dict.fromkeys(["hf_xfmr", info.arch_name, info.model_type, "custom_code", *info.tags]))
    eval_results = None
    if info.metrics and not info.eval_dataset and not info.eval_source:
        raise ValueError("evaluation metrics need the dataset they were measured on: pass eval_dataset "
                         "(a Hub dataset id such as 'glue'), or eval_source (a description of other data; the "
                         "metrics are then shown in the card's text only, not in its model-index)")
    if info.metrics and info.eval_dataset:  # the model-index needs a Hub dataset id
        eval_results = [
            EvalResult(
                task_type=pipeline_tag or info.task, dataset_type=info.eval_dataset,
                dataset_name=info.eval_dataset, dataset_config=info.eval_dataset_config,
                dataset_split=info.eval_split, metric_type=name, metric_value=_metric_value(name, value),
            )
            for name, value in info.metrics.items()
        ]
    data = ModelCardData(
        language=info.language,
        license=info.license,
        library_name="transformers",
        tags=tags,
        datasets=list(info.datasets) or None,
        base_model=info.base_model,
        pipeline_tag=pipeline_tag,
        model_name=info.title,
        eval_results=eval_results,
    )
    return data.to_yaml()


def _metric_value(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"metric {name!r} must be a number, got {value!r}")
    return float(value)


def _table(rows: Sequence[tuple[str, str]], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in rows]
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit} ({n:,})"
    return f"{n:,}"


def _model_details(info: CardInfo) -> str:
    rows = [
        ("architecture", f"{info.arch_name} (`model_type: {info.model_type}`)"),
        ("class", f"`{info.model_class}`"),
        ("parameters", _human(info.num_parameters)),
    ]
    for label, names in _SIZE_FIELDS:
        for name in names:
            value = getattr(info.config, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                rows.append((label, str(value)))
                break
    id2label = getattr(info.config, "id2label", None) or {}
    if info.task in ("sequence-classification", "token-classification") and id2label:
        rows.append(("labels", ", ".join(f"`{label}`" for label in id2label.values())))
    rows.append(("weights", f"safetensors, {info.dtype}"))
    rows.append(("code", ", ".join(f"`{f}`" for f in info.code_files) + f" (generated by hf_xfmr {__version__})"))
    return _table(rows, ("", ""))


def _format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def _training(info: CardInfo) -> str:
    parts = []
    if info.training:
        parts.append(_table([(str(k), _format_value(v)) for k, v in info.training.items()], ("setting", "value")))
    for curve in info.loss_curves:
        facts = []
        if curve.last_step is not None:
            facts.append(f"{curve.last_step} steps")
        if curve.final_train_loss is not None:
            facts.append(f"final training loss {curve.final_train_loss:.4f}")
        if curve.final_eval_loss is not None:
            facts.append(f"final evaluation loss {curve.final_eval_loss:.4f}")
        if facts:
            parts.append(f"`{curve.label}`: " + ", ".join(facts) + ".")
    if info.loss_curve_file:
        parts.append(f"![Training and evaluation loss]({info.loss_curve_file})")
    return "\n\n".join(parts) if parts else "No training details were recorded for this export."


def _evaluation(info: CardInfo) -> str:
    if not info.metrics:
        return "No evaluation results were given for this export."
    if info.eval_dataset:
        where = info.eval_dataset + (f" ({info.eval_dataset_config})" if info.eval_dataset_config else "")
        where += f", split `{info.eval_split}`" if info.eval_split else ""
    else:
        where = info.eval_source
    rows = [(name, f"{_metric_value(name, value):.4g}") for name, value in info.metrics.items()]
    return f"On {where}:\n\n" + _table(rows, ("metric", "value"))


def _remote_code(info: CardInfo) -> str:
    return (
        f"The model code ships with the weights ({', '.join(f'`{f}`' for f in info.code_files)}), generated "
        f"by hf_xfmr {__version__}, so transformers loads the model without hf_xfmr "
        "installed; `trust_remote_code=True` allows it to run that code (read it first). Without it, "
        "transformers refuses to load the model. With hf_xfmr installed and imported, its own classes are used."
    )


def render_card(info: CardInfo) -> str:
    """The README.md text for `info`."""
    name, pipeline_tag = template_for(info.task, info.can_generate)
    path = templates_dir() / f"{name}.md"
    template = string.Template(path.read_text(encoding="utf-8"))
    description = info.description or (
        f"A {info.arch_name} model (`{info.model_class}`) built with hf_xfmr."
    )
    values = {
        "metadata": _metadata(info, pipeline_tag).strip(),
        "title": info.title,
        "description": description.strip(),
        "repo_id": info.repo_id or REPO_ID_PLACEHOLDER,
        "auto_class": info.auto_class,
        "model_details": _model_details(info),
        "training": _training(info),
        "evaluation": _evaluation(info),
        "remote_code": _remote_code(info),
    }
    try:
        return template.substitute(values)
    except (KeyError, ValueError) as err:
        raise ValueError(f"model card template {path} has an unknown or malformed placeholder: {err}") from None


# ----------------------------------------------------------------------------------------------
# The card fields of a training run (keyword arguments of `export`)
# ----------------------------------------------------------------------------------------------

FINETUNE_RUN_FILES = ("finetune_args.json", "metrics.json")  # what `hf-xfmr finetune` saves next to model/
BUILTIN_DATA_DESCRIPTION = "the VADER human-rated sentences (Hutto & Gilbert, ICWSM 2014; vaderSentiment sdist, MIT)"


def is_local_source(source: str) -> bool:
    """A file, folder or glob on this machine (anything else is a `datasets` name, e.g. a Hub dataset id)."""
    return Path(source).exists() or bool(glob.glob(source)) or any(c in source for c in "*?[")


def evaluation_fields(metrics: Mapping[str, float], *, hub_dataset: str | None, split: str | None,
                      source: str, dataset_config: str | None = None) -> dict:
    """Where a run's metrics go in its card: into the model-index when they were measured on a Hub dataset
    (`hub_dataset`, its `dataset_config` and `split`), else into the card's text only, as measured on
    `source` (a model-index entry without a Hub dataset is invalid, and export refuses it)."""
    if not metrics:
        return {}
    if hub_dataset:
        return dict(metrics=metrics, eval_dataset=hub_dataset, eval_dataset_config=dataset_config, eval_split=split)
    return dict(metrics=metrics, eval_source=source)


def _shown(results: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in results.items())


def pretrain_card_fields(settings: Mapping[str, Any], metrics: Mapping[str, float], *, objective: str) -> dict:
    """The card fields of a pretraining run, from its settings (PretrainArguments as a dict) and its final
    evaluation `metrics` (`eval_*`; infinite ones are left out): a description, the training settings,
    the metrics (in the model-index when evaluated on a Hub dataset), the Hub dataset it was trained on and
    the base model (`base_model_of`: --base_model, or the Hub checkpoint --model_path continued from)."""
    training = {"objective": objective, "steps": settings.get("max_steps"),
                "learning_rate": settings.get("learning_rate"),
                "per_device_train_batch_size": settings.get("per_device_train_batch_size"),
                "gradient_accumulation_steps": settings.get("gradient_accumulation_steps"),
                "max_seq_length": settings.get("max_seq_length"), "optimizer": settings.get("optimizer"),
                "lr_scheduler": settings.get("lr_scheduler")}
    results = {k.removeprefix("eval_"): v for k, v in metrics.items() if math.isfinite(v)}
    dataset, eval_dataset, split = settings.get("dataset"), settings.get("eval_dataset"), settings.get("dataset_split")
    evaluated_on = eval_dataset or dataset
    source = dataset or "the embedded corpus (Python's documentation)"
    description = f"Pretrained with `hf-xfmr pretrain` ({objective}) on {source}" + (
        f" (held-out evaluation: {_shown(results)})." if results else ".")
    hub_dataset = evaluated_on if evaluated_on and not is_local_source(evaluated_on) else None
    if hub_dataset and not eval_dataset:  # held out of the training dataset
        split = f"{split} (held-out {settings.get('eval_fraction'):.0%})"
    fields = dict(description=description, training=training)
    fields.update(evaluation_fields(results, hub_dataset=hub_dataset, split=split,
                                    source=f"held-out text of {evaluated_on or source}"))
    base_model = base_model_of(settings, "model_path")  # --base_model, or the Hub model it continued from
    if base_model:
        fields["base_model"] = base_model
    if dataset and not is_local_source(dataset):
        fields["datasets"] = [dataset]
    return fields


def base_model_of(settings: Mapping[str, Any], source_option: str) -> str | None:
    """The `base_model` of a run's card: only what the user gave, never a guess. `--base_model` when set, else
    the Hub id of the checkpoint the run started from (`settings[source_option]`, a repo id or its folder in
    the Hugging Face cache: `hub_model_id`); None for a local folder or a from-scratch model."""
    return settings.get("base_model") or hub_model_id(settings.get(source_option))


def finetune_provenance(settings: Mapping[str, Any], *, given_dataset: bool,
                        builtin_datasets: Sequence[str] = ()) -> dict:
    """Where a finetuned model and its data came from, as its card names them, resolved while the run's
    relative paths still mean what they meant (a run saves it in metrics.json): the base model's Hub id
    (`base_model_of`: --base_model, or the Hub id the run loaded; None for a local folder or a from-scratch
    model), the Hub dataset (None for local data) and a description of the data. `settings` holds
    FinetuneArguments' fields."""
    dataset, hub_dataset = settings.get("dataset"), None
    if given_dataset:
        data = "a custom dataset"
    elif dataset in builtin_datasets:
        data = BUILTIN_DATA_DESCRIPTION
    elif dataset is not None and not Path(dataset).exists():
        data = hub_dataset = dataset
    else:
        data = f"local data (`{Path(dataset or settings.get('train_file')).name}`)"
    return {"base_model": base_model_of(settings, "model_name_or_path"), "lora": settings.get("lora"),
            "dataset": hub_dataset, "dataset_config": settings.get("dataset_config") if hub_dataset else None,
            "data": data}


def _finetune_results(metrics: Mapping[str, Any]) -> tuple[str, dict]:
    """(split, results): the test metrics of a finetuning run (validation ones without a test split), with
    the majority-class baseline of that split."""
    split = "test" if "test" in metrics else "validation"
    prefix = "test_" if split == "test" else "eval_"
    results = {key.removeprefix(prefix): value for key, value in (metrics.get(prefix[:-1]) or {}).items()
               if isinstance(value, float) and math.isfinite(value) and key != "epoch"
               and not key.endswith(("_runtime", "_per_second"))}
    majority = (metrics.get("baseline") or {}).get(f"{split}_majority_accuracy")
    if results and majority is not None:
        results["majority_accuracy"] = majority
    return split, results


def _finetune_training(settings: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict:
    lora = bool(settings.get("lora"))
    max_steps = settings.get("max_steps") or -1
    training = {"task": settings.get("task"), "lora": lora,
                "learning_rate": settings.get("learning_rate") or (5e-4 if lora else 5e-5),
                "epochs": settings.get("num_train_epochs") if max_steps <= 0 else None,
                "max_steps": max_steps if max_steps > 0 else None,
                "per_device_train_batch_size": settings.get("per_device_train_batch_size"),
                "max_seq_length": settings.get("max_seq_length"), "best_checkpoint": metrics.get("best_checkpoint")}
    if lora:
        training.update(lora_r=settings.get("lora_r"), lora_alpha=settings.get("lora_alpha"))
    for name in ("load_in_4bit", "padding_free", "loss_on_prompt"):  # causal-LM SFT settings, shown when on
        if settings.get(name):
            training[name] = True
    for name, subset in (metrics.get("subsets") or {}).items():  # --max_*_samples
        training[f"{name} examples"] = f"{subset['examples']:,} of {subset['of']:,} ({subset['how']})"
    return {k: v for k, v in training.items() if v is not None}


def finetune_card_fields(settings: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict:
    """The card fields of a finetuning run, from its options (`finetune_args.json`) and its `metrics.json`
    (with the `provenance` of `finetune_provenance`): a description; the base model (a Hub id, when the run
    started from one) and a `lora` tag; the training settings; the test metrics (validation ones without
    a test split), in the card's model-index when measured on a Hub dataset, else in its text only."""
    origin = metrics.get("provenance") or {}
    lora = bool(settings.get("lora"))
    split, results = _finetune_results(metrics)
    base = origin.get("base_model")
    start = f"from `{base}`" if base else "from scratch" if settings.get("arch") else "from a local checkpoint"
    how = (f"with LoRA (r={settings.get('lora_r')}, alpha={settings.get('lora_alpha')}; adapters merged into the "
           "weights)" if lora else "in full")
    if lora and settings.get("load_in_4bit"):  # QLoRA: trained on NF4 weights, merged into the full-precision ones
        how = (f"with QLoRA (LoRA r={settings.get('lora_r')}, alpha={settings.get('lora_alpha')}, on the 4-bit NF4 "
               "base; adapters merged into a full-precision copy of it)")
    data = origin.get("data") or "its training data"
    description = (f"Finetuned {how} {start} with `hf-xfmr finetune` for {settings.get('task')} on {data}"
                   + (f" ({split} split: {_shown(results)})." if results else "."))
    subsets = metrics.get("subsets") or {}
    if subsets:
        description += (" Trained and evaluated on subsets of the data, so the figures are those of the subsets: "
                        + "; ".join(subset["description"] for subset in subsets.values()) + ".")
    if "majority_accuracy" in results:
        description += (f" `majority_accuracy` is the {split} accuracy of always answering the most frequent label "
                        "of the training data.")
    fields = dict(description=description, base_model=base, tags=["lora"] if lora else [],
                  training=_finetune_training(settings, metrics))
    if origin.get("dataset"):
        fields["datasets"] = [origin["dataset"]]
    evaluated = subsets.get(split)
    cut = f" ({evaluated['examples']:,} of {evaluated['of']:,} examples, {evaluated['how']})" if evaluated else ""
    fields.update(evaluation_fields(results, hub_dataset=origin.get("dataset"), split=split + cut,
                                    dataset_config=origin.get("dataset_config"),
                                    source=f"the {split} split of {data}{cut}"))
    return fields


def finetune_run_folder(checkpoint) -> Path | None:
    """The `hf-xfmr finetune` run that saved `checkpoint`, when it is the run's model/ or merged/ folder (its
    finetune_args.json and metrics.json sit next to it); None for any other folder."""
    checkpoint = Path(checkpoint)
    run = checkpoint.parent
    if checkpoint.name in ("model", "merged") and all((run / name).is_file() for name in FINETUNE_RUN_FILES):
        return run
    return None


def finetune_run_card(run, given: Mapping[str, Any]) -> dict:
    """The card fields of the finetune run in `run` (base model, LoRA, metrics, settings, loss log) that
    `given` (the card arguments of `export` the user set, by name) leaves unset; the run's tags are added
    to the given ones. Raises ValueError when the run's files cannot be read."""
    run = Path(run)
    try:
        fields = finetune_card_fields(*(json.loads((run / name).read_text()) for name in FINETUNE_RUN_FILES))
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(str(err)) from err
    filled = {key: fields[key] for key in ("description", "base_model", "datasets", "training")
              if fields.get(key) and not given.get(key)}
    if not (given.get("metrics") or given.get("eval_dataset") or given.get("eval_source")):
        filled.update({key: fields[key] for key in ("metrics", "eval_dataset", "eval_dataset_config", "eval_split",
                                                    "eval_source") if fields.get(key)})
    if not given.get("training_logs") and (run / "log_history.jsonl").is_file():
        filled["training_logs"] = str(run / "log_history.jsonl")
    if fields["tags"]:
        filled["tags"] = list(dict.fromkeys([*fields["tags"], *(given.get("tags") or ())]))
    return filled


def name_base_model_in_adapter_card(adapter_dir, base_model: str | None) -> None:
    """PEFT's `save_pretrained` writes a card (README.md) whose `base_model` is the local base folder, which
    is no Hub id: name the Hub id (`base_model`, with PEFT's `base_model:adapter:` tag), or none."""
    from huggingface_hub import ModelCard

    path = Path(adapter_dir) / "README.md"
    if not path.is_file():
        return
    card = ModelCard.load(path)
    card.data.base_model = base_model
    tags = [tag for tag in (card.data.tags or []) if not tag.startswith("base_model:")]
    card.data.tags = ([f"base_model:adapter:{base_model}"] if base_model else []) + ["hf_xfmr"] + tags
    card.save(path)


__all__ = ["BUILTIN_DATA_DESCRIPTION", "CardInfo", "FINETUNE_RUN_FILES", "LOSS_CURVE_FILE", "REPO_ID_PLACEHOLDER",
           "TASK_FAMILIES", "base_model_of", "evaluation_fields", "finetune_card_fields", "finetune_provenance",
           "finetune_run_card", "finetune_run_folder", "hub_model_id", "is_local_source",
           "name_base_model_in_adapter_card", "pretrain_card_fields", "render_card", "template_for", "templates_dir"]
