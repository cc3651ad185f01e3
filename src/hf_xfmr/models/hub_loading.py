"""Checkpoints named by a local folder or a Hub repo id, turned into a local folder with clear errors.

`resolve_checkpoint(src, revision=..., token=...)` is the one place where every entry point
(`hf_xfmr.from_transformers`, `Xfmr*.from_pretrained`, `hf-xfmr finetune` / `distill` / `convert` /
`pretrain --model_path`) turns what the user named into a folder. A local path is returned as it is;
a Hub repo id is fetched with huggingface_hub's `snapshot_download` into its normal cache, taking only
what a model needs (config, safetensors weights, tokenizer and generation config; never pickled
`.bin` weights), so that the next call works offline. The token is the caller's, or what
huggingface_hub finds itself (`HF_TOKEN`, the `hf auth login` cache). The errors huggingface_hub
raises become messages that say what was wrong and what to do.
"""

import contextlib
import json
import os
from pathlib import Path

CONFIG_FILE = "config.json"
# What `save_pretrained` writes: one safetensors file, or shards and their index.
WEIGHT_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "chat_template.jinja",
)
CHECKPOINT_FILES = (CONFIG_FILE, "generation_config.json", *WEIGHT_FILES, *TOKENIZER_FILES)
# Weights stored as pickles, which hf_xfmr never loads (unpickling runs arbitrary code).
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model-*.bin", "*.pt", "*.pth", "*.ckpt")


class CheckpointSourceError(FileNotFoundError, ValueError):
    """A checkpoint that cannot be had: a Hub repo that does not exist or is private, a revision that does
    not exist, no network and no cached copy, only pickled weights. The message says what to do. Both a
    FileNotFoundError (nothing usable was found) and a ValueError (what the commands report in one line)."""


def is_hub_repo_id(src) -> bool:
    """Whether `src` names a Hub repo rather than a local path: a string that is a valid repo id ("name" or
    "org/name") and no existing file or folder. Path objects, absolute paths and paths starting with
    "." or "~" are always local."""
    if not isinstance(src, str) or not src or os.path.exists(src) or src.startswith((".", "~", "/")) or "\\" in src:
        return False
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(src)
    except HFValidationError:
        return False
    return True


def _where(repo_id: str, revision: str | None) -> str:
    return f"Hub repo '{repo_id}'" + (f" (revision {revision!r})" if revision else "")


@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str | None, local_files_only: bool):
    """Turn huggingface_hub's errors about `repo_id` into `CheckpointSourceError`s that say what to do."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = _where(repo_id, revision)
    token_hint = "pass token=..., set HF_TOKEN, or log in with `hf auth login`"
    try:
        yield
    except GatedRepoError as err:
        raise CheckpointSourceError(
            f"{where} is gated: accept its conditions on its Hub page, then use a token of that account "
            f"({token_hint})."
        ) from err
    except RepositoryNotFoundError as err:
        raise CheckpointSourceError(
            f"'{repo_id}' is not a local folder, and the Hub at {constants.ENDPOINT} has no repo of that name that "
            f"can be read with the token in use (if any): check the id for typos; a private repo needs a token with "
            f"access to it ({token_hint})."
        ) from err
    except RevisionNotFoundError as err:
        raise CheckpointSourceError(
            f"Hub repo '{repo_id}' has no revision {revision!r}: pass an existing branch, tag or commit hash "
            f"(revision= / --revision), or none for the default branch."
        ) from err
    except LocalEntryNotFoundError as err:  # not cached, and the Hub was not asked or not reachable
        cache = constants.HF_HUB_CACHE
        if constants.HF_HUB_OFFLINE:
            reason = ("HF_HUB_OFFLINE=1 forbids downloading it: run once with network access (HF_HUB_OFFLINE "
                      "unset or 0); from then on it loads offline from the cache")
        elif local_files_only:
            reason = "local_files_only=True forbids downloading it: run once without it, with network access"
        else:
            cause = err.__cause__ or err
            reason = (f"the Hub at {constants.ENDPOINT} could not be reached ({type(cause).__name__}: {cause}). "
                      f"Check the network connection and HF_ENDPOINT; once downloaded, it also loads offline "
                      f"(HF_HUB_OFFLINE=1)")
        as_repo = "as a Hub repo" + (f" (revision {revision!r})" if revision else "")
        raise CheckpointSourceError(
            f"'{repo_id}' is not a local folder; {as_repo} it is not in the local Hugging Face cache ({cache}), "
            f"and {reason}."
        ) from err
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        hint = (f"the token was rejected: check it ({token_hint})" if status in (401, 403) else
                "try again later, or check HF_ENDPOINT")
        raise CheckpointSourceError(f"The Hub refused {where} (HTTP {status}): {hint}.") from err


def read_config(src, *, revision=None, token=None, cache_dir=None, local_files_only=False, subfolder="") -> dict | None:
    """config.json of the checkpoint `src` (a folder or a Hub repo id) as a dict; None when it has none or
    it cannot be parsed (the loader that follows then reports it). For a repo id only config.json is
    downloaded; a repo that cannot be read raises `CheckpointSourceError`."""
    if is_hub_repo_id(src):
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import RemoteEntryNotFoundError

        with _hub_errors(src, revision, local_files_only):
            try:
                file = hf_hub_download(src, CONFIG_FILE, subfolder=subfolder or None, revision=revision,
                                       token=token, cache_dir=cache_dir, local_files_only=local_files_only)
            except RemoteEntryNotFoundError:  # the repo exists but has no config.json
                return None
    else:
        file = Path(src, subfolder, CONFIG_FILE) if subfolder else Path(src, CONFIG_FILE)
        if not Path(file).is_file():
            return None
    try:
        config = json.loads(Path(file).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def pickled_weights(folder) -> list[str]:
    """Names of the pickled weight files in `folder` (`pytorch_model.bin`, ...), sorted."""
    folder = Path(folder)
    return sorted({p.name for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern)})


def pickles_only_message(where: str, names, architecture: str | None, src: str) -> str:
    """The error for a checkpoint whose weights exist only as pickles: how to convert them safely."""
    loader = f"transformers.{architecture}" if architecture else "its transformers class (e.g. AutoModelForMaskedLM)"
    return (
        f"{where} has its weights only as pickled PyTorch files ({', '.join(names)}): hf_xfmr reads safetensors "
        f"weights only and never loads pickles (unpickling can run arbitrary code). Convert them to safetensors "
        f"once, in an environment you trust: `{loader}.from_pretrained({src!r}, use_safetensors=False).save_pretrained(FOLDER)` writes "
        f"model.safetensors (save the tokenizer there too); then pass FOLDER (or upload it and pass its repo id)."
    )


def check_not_pickles_only(folder, src=None) -> None:
    """`CheckpointSourceError` when the local checkpoint `folder` has pickled weights but no safetensors."""
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return
    names = pickled_weights(folder)
    if names:
        architecture = ((read_config(folder) or {}).get("architectures") or [None])[0]
        raise CheckpointSourceError(pickles_only_message(str(folder), names, architecture, str(src or folder)))


def _remote_pickles(repo_id: str, revision, token) -> list[str]:
    """Pickled weight files the Hub lists for the repo ([] when it cannot be asked)."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi

    try:
        files = HfApi().list_repo_files(repo_id, revision=revision, token=token)
    except Exception:  # noqa: BLE001  (offline or refused: the generic message is given instead)
        return []
    return sorted(f for f in files if any(fnmatch(f.rsplit("/", 1)[-1], p) for p in PICKLED_WEIGHTS))


def resolve_checkpoint(src, *, revision=None, token=None, cache_dir=None, local_files_only=False,
                       subfolder: str = "") -> Path:
    """The local folder holding the checkpoint `src`.

    A local path (anything but a Hub repo id, see `is_hub_repo_id`) is returned as it is, existing or not:
    the caller checks it. A Hub repo id is fetched (`revision`: branch, tag or commit; `token`: None for
    huggingface_hub's own lookup) into the Hugging Face cache: config.json, generation_config.json, the
    safetensors weights (single file or shards) and the tokenizer files; pickled weights never. Once
    cached it loads without network (HF_HUB_OFFLINE=1). Raises `CheckpointSourceError` for a repo that
    cannot be read, a missing revision, no network and no cached copy, a repo without config.json, and
    a repo whose weights are only pickles (the message says how to convert them safely).
    """
    if not is_hub_repo_id(src):
        return Path(src, subfolder) if subfolder else Path(src)
    from huggingface_hub import snapshot_download

    prefix = subfolder.strip("/") + "/" if subfolder else ""
    with _hub_errors(src, revision, local_files_only):
        folder = Path(snapshot_download(src, revision=revision, token=token, cache_dir=cache_dir,
                                        local_files_only=local_files_only,
                                        allow_patterns=[prefix + name for name in CHECKPOINT_FILES]))
    folder = folder / subfolder if subfolder else folder
    where = _where(src, revision)
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointSourceError(f"{where} has no {prefix}{CONFIG_FILE}: it is not a saved transformers or "
                                    f"hf_xfmr model.")
    if not any(folder.glob("*.safetensors")):
        names = [] if local_files_only else _remote_pickles(src, revision, token)
        if names:
            architecture = ((read_config(folder) or {}).get("architectures") or [None])[0]
            raise CheckpointSourceError(pickles_only_message(where, names, architecture, src))
        raise CheckpointSourceError(f"{where} has no safetensors weights ({WEIGHT_FILES[0]} or shards with "
                                    f"{WEIGHT_FILES[2]}): hf_xfmr reads safetensors weights only.")
    return folder
