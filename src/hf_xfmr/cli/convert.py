"""`hf-xfmr convert`: a checkpoint between the transformers and hf_xfmr formats."""

import argparse
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from ..options import option
from .catalog import TASKS
from .command import PROG, Command, CommandError
from .inputs import checkpoint_config, checkpoint_folder


@dataclass
class ConvertArguments:
    src: str = option("checkpoint folder (config.json + weights) or Hub repo id", positional=True, metavar="SRC")
    out: str = option("output folder (created; must be empty unless --overwrite)", positional=True, metavar="OUT")
    revision: str | None = option("branch, tag or commit of a Hub repo SRC (token: HF_TOKEN or `hf auth login`)",
                                  None, metavar="REV")
    to: Literal["xfmr", "transformers"] | None = option("target format; default: the opposite of SRC's format", None)
    task: str | None = option("head to convert to; default: SRC's own head (from config.json 'architectures')",
                              None, choices=TASKS)
    overwrite: bool = option("allow writing into a non-empty OUT", False)


def _check_out(src: Path, out: Path, overwrite: bool) -> None:
    if out.resolve() == src.resolve():
        raise CommandError("OUT must differ from SRC")
    if out.exists() and not out.is_dir():
        raise CommandError(f"OUT {out} is an existing file, not a folder; pass the path of a new or empty folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise CommandError(f"{out} exists and is not empty; pass --overwrite to write into it")
    parent = next((p for p in out.resolve().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise CommandError(f"cannot create OUT {out}: {parent} is a file, not a folder")


def _convert_quietly(convert: Callable[[], Any], debug: bool) -> tuple[Any, list[str]]:
    """Run `convert` with transformers' own load reports muted (unless --debug); return its result and
    the messages of the `ConversionWarning`s it raised (other warnings are shown as usual)."""
    import transformers

    from hf_xfmr.models.conversion import ConversionWarning

    verbosity = transformers.logging.get_verbosity()
    if not debug:
        transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = convert()
    finally:
        transformers.logging.set_verbosity(verbosity)
    notes = []
    for w in caught:
        if issubclass(w.category, ConversionWarning):
            notes.append(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return result, notes


def _direction(src: Path, model_type: str, to: str | None) -> str:
    """'xfmr' or 'transformers': where SRC (of `model_type`) goes; a CommandError when it is already there."""
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        known = sorted(t for t in CONFIG_MAPPING if t.startswith("xfmr-"))
        raise CommandError(
            f"unknown model type {model_type!r} in {src / 'config.json'} "
            f"(hf_xfmr model types: {', '.join(known)})"
        )
    is_ours = model_type.startswith("xfmr-")
    direction = to or ("transformers" if is_ours else "xfmr")
    if (direction == "xfmr") == is_ours:
        kind = "an hf_xfmr" if is_ours else "a transformers"
        raise CommandError(f"{src} is already {kind} checkpoint (model_type {model_type!r}); nothing to convert")
    return direction


def _save(model, src: Path, out: Path) -> list[str]:
    """Write the converted model to OUT and copy SRC's tokenizer files; the names copied."""
    from hf_xfmr.models.hub_loading import TOKENIZER_FILES

    try:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        copied = [name for name in TOKENIZER_FILES if (src / name).is_file()]
        for name in copied:
            shutil.copy2(src / name, out / name)
    except OSError as err:
        raise CommandError(f"cannot write {out}: {err}") from err
    return copied


def run(options: ConvertArguments, args: argparse.Namespace) -> int:
    import hf_xfmr
    from hf_xfmr.models.conversion import load_checkpoint

    src, out = checkpoint_folder("SRC", options.src, options.revision), Path(options.out)
    model_type = checkpoint_config(src)["model_type"]
    direction = _direction(src, model_type, options.to)
    _check_out(src, out, options.overwrite)

    def convert():
        if direction == "xfmr":
            return hf_xfmr.from_transformers(src, task=options.task)
        return hf_xfmr.to_transformers(load_checkpoint(src, task=options.task))

    try:
        model, notes = _convert_quietly(convert, getattr(args, "debug", False))
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        # The converters raise these with a message meant for the user (unsupported architecture/head,
        # missing, truncated or mis-sized weights): show it as a command error rather than a traceback.
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise CommandError(f"cannot convert {src}: {message}") from err
    for note in notes:
        print(f"{PROG} convert: warning: {note}", file=sys.stderr)
    copied = _save(model, src, out)
    print(
        f"converted {type(model).__name__} ({model_type} -> {model.config.model_type}) to {out}"
        + (f"; copied {', '.join(copied)}" if copied else "")
    )
    return 0


COMMAND = Command(
    "convert",
    help="convert a checkpoint between the transformers and hf_xfmr formats",
    description=(
        "Convert a checkpoint (a local folder or a Hub repo id) between the transformers format (e.g.\n"
        "model_type 'bert') and the hf_xfmr format ('xfmr-bert'). The direction follows SRC's config.json:\n"
        "'xfmr-*' model types become transformers checkpoints, others become hf_xfmr checkpoints.\n"
        "Weights are saved as safetensors; tokenizer files found in SRC are copied to OUT."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr convert ./bert-base-uncased ./bert-base-xfmr\n"
        "  hf-xfmr convert google-bert/bert-base-uncased ./bert-base-xfmr      # from the Hub (cached)\n"
        "  hf-xfmr convert ./bert-base-xfmr ./bert-back --to transformers\n"
        "  hf-xfmr convert ./my-bert ./my-bert-encoder --task base"
    ),
    arguments=ConvertArguments,
    run=run,
)
