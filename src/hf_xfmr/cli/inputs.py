"""Inputs several commands read: a checkpoint given as a folder or a Hub repo id, and its config.json."""

from pathlib import Path
from typing import Any

from ..options import read_options_file
from .command import CommandError


def checkpoint_folder(option: str, value: str, revision: str | None) -> Path:
    """The local folder of a checkpoint option: `value` itself, or the cached snapshot of the Hub repo it names
    (downloaded if needed, at `revision`; the token comes from HF_TOKEN or `hf auth login`)."""
    from hf_xfmr.models.hub_loading import CheckpointSourceError, resolve_checkpoint

    try:
        return resolve_checkpoint(value, revision=revision)
    except CheckpointSourceError as err:
        raise CommandError(f"{option} {value}: {err}") from None


def checkpoint_config(src: Path) -> dict[str, Any]:
    """The config.json of checkpoint folder `src`, with a message for each way it can be missing or broken."""
    if not src.exists():
        raise CommandError(f"{src} does not exist")
    if not src.is_dir():
        raise CommandError(f"{src} is not a directory (expected a checkpoint folder with config.json)")
    config_file = src / "config.json"
    if not config_file.is_file():
        raise CommandError(f"{src} has no config.json: it is not a saved transformers or hf_xfmr checkpoint")
    config = read_options_file(config_file, error=CommandError, what="the checkpoint config")
    if not config.get("model_type"):
        raise CommandError(f"{config_file} has no model_type")
    return config
