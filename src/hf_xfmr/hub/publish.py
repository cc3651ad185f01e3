"""`publish`: upload an exported folder (or a model, exported on the fly) to the Hugging Face Hub.

The whole folder goes up in ONE commit through `huggingface_hub.HfApi.create_commit`: the large files
are uploaded first (Xet, or LFS with HF_HUB_DISABLE_XET=1), and the commit that makes them visible is
posted only once every upload succeeded, so a failed upload never leaves a commit that looks complete.
Files of an earlier publish that the folder no longer has (e.g. old weight shards) are deleted in the
same commit. Unchanged files are neither uploaded nor committed again.

The token comes from the `token` argument, else from huggingface_hub (HF_TOKEN, or `hf auth login`);
it is never printed. The endpoint comes from `endpoint`, else HF_ENDPOINT. Transient failures
(connection errors, timeouts, HTTP 408/429/5xx) are retried with exponential backoff.
"""

import logging
import tempfile
import time
from pathlib import Path

from .cards import REPO_ID_PLACEHOLDER
from .export import ExportError, check_export_folder

logger = logging.getLogger(__name__)

TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)
KEEP_REMOTE = (".gitattributes",)


class PublishError(RuntimeError):
    """Publishing failed; the message says why and what to do (it never contains the token)."""


def check_repo_id(repo_id, error=None) -> str:
    """Validate a Hub repository id of the form `owner/name`."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    error = error or PublishError
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise error(f"invalid repo id {repo_id!r}: use the form 'owner/name' (your user or organisation, a slash, "
                    f"the model name), e.g. 'alice/tiny-bert'.")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise error(f"invalid repo id {repo_id!r}: {err}") from None
    return repo_id


def _cause(err: BaseException) -> BaseException:
    """The HTTP or connection error behind `err` (huggingface_hub wraps some, e.g. failed LFS uploads)."""
    seen = err
    for _ in range(6):
        if getattr(seen, "response", None) is not None or _is_connection_error(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
        if seen is None:
            break
    return err


def _is_connection_error(err: BaseException) -> bool:
    names = {cls.__name__ for cls in type(err).__mro__}
    return bool(names & {"TransportError", "TimeoutException", "NetworkError", "ConnectionError", "TimeoutError"})


def _status(err: BaseException) -> int | None:
    return getattr(getattr(err, "response", None), "status_code", None)


def _is_transient(err: BaseException) -> bool:
    cause = _cause(err)
    status = _status(cause)
    return status in TRANSIENT_STATUS if status is not None else _is_connection_error(cause)


def _scrub(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0].strip() if text else type(err).__name__


def _explain(err: BaseException, repo_id: str, revision: str | None, endpoint: str, token: str,
             attempts: int) -> PublishError:
    """A PublishError saying what went wrong and what to do."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    cause = _cause(err)
    status = _status(cause)
    detail = _first_line(err)
    if cause is not err:
        detail += f" ({_first_line(cause)})"
    detail = _scrub(detail, token)
    if isinstance(cause, RevisionNotFoundError):
        message = f"revision {revision!r} does not exist in {repo_id}: {detail}"
    elif status == 401:
        message = (f"the Hub at {endpoint} rejected the token (401 Unauthorized). Log in again with "
                   f"`hf auth login` or set HF_TOKEN to a token with write access.")
    elif status == 403:
        message = (f"no write access to {repo_id} (403 Forbidden): use a token with write access to that "
                   f"namespace, or publish under your own user.")
    elif isinstance(cause, RepositoryNotFoundError):
        message = f"repository {repo_id} was not found at {endpoint} and could not be created: {detail}"
    elif status is None and _is_connection_error(cause) and "Connect" in "".join(
            c.__name__ for c in type(cause).__mro__) and "status" not in detail:
        message = (f"could not reach the Hub at {endpoint} ({detail}; {attempts} attempt(s)). Check the network "
                   f"connection and HF_ENDPOINT, then publish again.")
    else:
        message = (f"publishing to {repo_id} failed after {attempts} attempt(s): {detail}. Nothing was committed; "
                   f"publish again to finish (files already uploaded are not sent twice).")
    return PublishError(message)


def _with_retries(what: str, call, *, max_retries: int, retry_wait: float):
    for attempt in range(max_retries + 1):
        try:
            return call()
        except Exception as err:  # noqa: BLE001  (classified below; non-transient errors re-raise at once)
            if attempt == max_retries or not _is_transient(err):
                raise
            wait = retry_wait * 2**attempt
            logger.warning("%s failed (%s); retrying in %.1fs (%d/%d)", what, type(err).__name__, wait,
                           attempt + 1, max_retries)
            time.sleep(wait)


def _operations(folder: Path, files: list[Path], repo_id: str):
    from huggingface_hub import CommitOperationAdd

    operations = []
    for rel in files:
        path = folder / rel
        content = str(path)
        if rel.as_posix() == "README.md":
            text = path.read_text(encoding="utf-8")
            if REPO_ID_PLACEHOLDER in text:  # exported without a repo id: fill it in now
                content = text.replace(REPO_ID_PLACEHOLDER, repo_id).encode("utf-8")
        operations.append(CommitOperationAdd(path_in_repo=rel.as_posix(), path_or_fileobj=content))
    return operations


def publish(
    folder_or_model,
    repo_id: str,
    *,
    tokenizer=None,
    revision: str | None = None,
    private: bool | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    delete_stale: bool = True,
    max_retries: int = 3,
    retry_wait: float = 2.0,
    **export_kwargs,
):
    """Upload an exported folder, or a model (exported first), to the Hub repository `repo_id`.

    Args:
        folder_or_model: a folder written by `export` (`hf-xfmr export`), or an hf_xfmr model.
        repo_id: `owner/name`; the repository is created when it does not exist.
        tokenizer, **export_kwargs: when a model is given, passed to `export` (card metadata, logs, ...).
        revision: the branch to commit to (created from main if missing); default main.
        private: visibility of a repository created now (ignored for an existing one).
        create_pr: open a pull request with the commit instead of committing to the branch.
        commit_message: default "Upload <model class> with hf_xfmr".
        token: a Hub token with write access; default HF_TOKEN or the `hf auth login` token.
        endpoint: the Hub URL; default HF_ENDPOINT or https://huggingface.co.
        delete_stale: delete files of the repository that the folder does not have (except .gitattributes).
        max_retries, retry_wait: retries of transient failures, waiting retry_wait * 2**attempt seconds
            (huggingface_hub also retries its own requests; a pull request's commit is not retried, since a
            lost response would open a second one).

    Returns huggingface_hub's `CommitInfo` (`.oid`, `.commit_url`, `.pr_url`). Raises PublishError.
    """
    from transformers import PreTrainedModel

    check_repo_id(repo_id)
    if isinstance(folder_or_model, PreTrainedModel) or hasattr(folder_or_model, "peft_config"):
        from .export import export

        with tempfile.TemporaryDirectory(prefix="hf_xfmr-publish-") as tmp:
            try:
                folder = export(folder_or_model, tokenizer, Path(tmp) / "export", repo_id=repo_id, **export_kwargs)
            except ExportError as err:
                raise PublishError(f"cannot export the model: {err}") from err
            return publish(folder, repo_id, revision=revision, private=private, create_pr=create_pr,
                           commit_message=commit_message, token=token, endpoint=endpoint, delete_stale=delete_stale,
                           max_retries=max_retries, retry_wait=retry_wait)
    if tokenizer is not None or export_kwargs:
        given = ", ".join(["tokenizer"] * (tokenizer is not None) + sorted(export_kwargs))
        raise PublishError(f"{given} only apply when publishing a model; the folder is uploaded as it is "
                           f"(pass them to export instead).")
    if not isinstance(folder_or_model, (str, Path)):
        raise PublishError(f"`folder_or_model` must be an exported folder or an hf_xfmr model, "
                           f"got {type(folder_or_model).__name__}.")
    folder = Path(folder_or_model)
    try:
        files = check_export_folder(folder)
    except ExportError as err:
        raise PublishError(str(err)) from None
    if max_retries < 0:
        raise PublishError(f"max_retries must be >= 0, got {max_retries}")

    import huggingface_hub
    from huggingface_hub import CommitOperationDelete, HfApi

    token = token or huggingface_hub.get_token()
    if not token:
        raise PublishError("no Hugging Face token found: log in with `hf auth login`, or set the HF_TOKEN "
                           "environment variable to a token with write access.")
    api = HfApi(endpoint=endpoint, token=token)
    endpoint = api.endpoint
    architectures = _read_architectures(folder)
    message = commit_message or f"Upload {architectures or 'model'} with hf_xfmr"
    retry = dict(max_retries=max_retries, retry_wait=retry_wait)
    try:
        _with_retries("create_repo", lambda: api.create_repo(repo_id, private=private, exist_ok=True), **retry)
        if revision not in (None, "main"):
            _with_retries("create_branch", lambda: api.create_branch(repo_id, branch=revision, exist_ok=True),
                          **retry)
        local = {rel.as_posix() for rel in files}
        size = sum((folder / rel).stat().st_size for rel in files)
        logger.info("publishing %d files (%.1f MB) from %s to %s@%s", len(files), size / 1e6, folder, repo_id,
                    revision or "main")

        def commit():
            # Listed again on every attempt: a retry after a commit whose response was lost must not try
            # to delete files that commit already deleted.
            stale = []
            if delete_stale:
                remote = api.list_repo_files(repo_id, revision=revision)
                stale = sorted(p for p in remote if p not in local and p not in KEEP_REMOTE)
            operations = _operations(folder, files, repo_id)  # fresh objects: a commit mutates them
            operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
            return api.create_commit(repo_id, operations=operations, commit_message=message, revision=revision,
                                     create_pr=create_pr)

        if create_pr:  # a retry after a lost response would open a second pull request
            retry["max_retries"] = 0
        return _with_retries("upload", commit, **retry)
    except PublishError:
        raise
    except Exception as err:  # noqa: BLE001  (turned into one clear message)
        raise _explain(err, repo_id, revision, endpoint, token, retry["max_retries"] + 1) from err


def _read_architectures(folder: Path) -> str | None:
    import json

    try:
        names = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        return None
    return ", ".join(names) or None


__all__ = ["PublishError", "check_repo_id", "publish"]
