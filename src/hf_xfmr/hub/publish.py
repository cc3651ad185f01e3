"""`publish`: the one route from a model (or an exported folder) to a Hugging Face Hub repository.

Given a model, `publish` exports it (`export.export`, into a temporary folder or the one named by
`export_folder`) and uploads that folder (`upload_export`); given a folder written by `export`, it
uploads it as it is. `hf-xfmr publish`, `hf-xfmr pretrain --push_to_hub` and `hf-xfmr finetune
--push_to_hub` all come this way, so what reaches the Hub is built and checked in one place.

The whole folder goes up in ONE commit through `huggingface_hub.HfApi.create_commit`: the large files
are uploaded first (Xet, or LFS with HF_HUB_DISABLE_XET=1), and the commit that makes them visible is
posted only once every upload succeeded, so a failed upload never leaves a commit that looks complete.
Files of an earlier publish that the folder no longer has (e.g. old weight shards) are deleted in the
same commit. Unchanged files are neither uploaded nor committed again.

The token comes from the `token` argument, else from huggingface_hub (HF_TOKEN, or `hf auth login`);
it is never printed. The endpoint comes from `endpoint`, else HF_ENDPOINT. Transient failures
(connection errors, timeouts, HTTP 408/429/5xx) are retried with exponential backoff.
"""

import inspect
import json
import logging
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

from transformers import PreTrainedModel

from .cards import REPO_ID_PLACEHOLDER
from .errors import ExportError, PublishError
from .export import CONFIG_FILE, check_export_folder, export
from .repo_id import check_repo_id

logger = logging.getLogger(__name__)

TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)
KEEP_REMOTE = (".gitattributes",)


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


def publish(folder_or_model, repo_id: str, *, tokenizer=None, export_folder=None, **options):
    """Publish a model (exported first) or an exported folder to the Hub repository `repo_id`.

    Args:
        folder_or_model: an hf_xfmr model, or a folder written by `export` (`hf-xfmr export`).
        repo_id: `owner/name`; the repository is created when it does not exist.
        tokenizer: when a model is given, its tokenizer (passed to `export`).
        export_folder: when a model is given, the folder it is exported to and that stays after the upload
            (e.g. a training run's `hub/`); default a temporary folder, removed afterwards.
        **options: how the folder is uploaded, the keyword arguments of `upload_export` (`revision`,
            `private`, `create_pr`, `commit_message`, `token`, `endpoint`, `delete_stale`, `max_retries`,
            `retry_wait`); when a model is given, the others go to `export` (card metadata, logs, ...).

    Returns huggingface_hub's `CommitInfo` (`.oid`, `.commit_url`, `.pr_url`). Raises PublishError (an
    export that fails says "cannot export the model: ...").
    """
    check_repo_id(repo_id)
    upload = {name: options.pop(name) for name in UPLOAD_OPTIONS if name in options}
    export_kwargs = options
    if isinstance(folder_or_model, PreTrainedModel) or hasattr(folder_or_model, "peft_config"):
        with _export_target(export_folder) as target:
            try:
                folder = export(folder_or_model, tokenizer, target, repo_id=repo_id, **export_kwargs)
            except ExportError as err:
                raise PublishError(f"cannot export the model: {err}") from err
            return upload_export(folder, repo_id, **upload)
    given = ["tokenizer"] * (tokenizer is not None) + ["export_folder"] * (export_folder is not None)
    if given or export_kwargs:
        raise PublishError(f"{', '.join(given + sorted(export_kwargs))} only apply when publishing a model; the "
                           f"folder is uploaded as it is (pass them to export instead).")
    return upload_export(folder_or_model, repo_id, **upload)


def _export_target(export_folder):
    """A context giving the folder a model is exported to before its upload."""
    return nullcontext(Path(export_folder)) if export_folder is not None else _temporary_export_folder()


@contextmanager
def _temporary_export_folder():
    with tempfile.TemporaryDirectory(prefix="hf_xfmr-publish-") as tmp:
        yield Path(tmp) / "export"


def upload_export(
    folder,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    delete_stale: bool = True,
    max_retries: int = 3,
    retry_wait: float = 2.0,
):
    """Upload `folder` (a complete export, see `check_export_folder`) to `repo_id` in one commit.

    Args:
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

    Returns huggingface_hub's `CommitInfo`. Raises PublishError.
    """
    check_repo_id(repo_id)
    folder, files = _checked_folder(folder)
    if max_retries < 0:
        raise PublishError(f"max_retries must be >= 0, got {max_retries}")
    from huggingface_hub import HfApi

    token = _token(token)
    api = HfApi(endpoint=endpoint, token=token)
    message = commit_message or f"Upload {_read_architectures(folder) or 'model'} with hf_xfmr"
    retry = dict(max_retries=max_retries, retry_wait=retry_wait)
    try:
        _with_retries("create_repo", lambda: api.create_repo(repo_id, private=private, exist_ok=True), **retry)
        if revision not in (None, "main"):
            _with_retries("create_branch", lambda: api.create_branch(repo_id, branch=revision, exist_ok=True),
                          **retry)
        size = sum((folder / rel).stat().st_size for rel in files)
        logger.info("publishing %d files (%.1f MB) from %s to %s@%s", len(files), size / 1e6, folder, repo_id,
                    revision or "main")
        commit = _committer(api, folder, files, repo_id, revision=revision, message=message, create_pr=create_pr,
                            delete_stale=delete_stale)
        if create_pr:  # a retry after a lost response would open a second pull request
            retry["max_retries"] = 0
        return _with_retries("upload", commit, **retry)
    except PublishError:
        raise
    except Exception as err:  # noqa: BLE001  (turned into one clear message)
        raise _explain(err, repo_id, revision, api.endpoint, token, retry["max_retries"] + 1) from err


UPLOAD_OPTIONS = tuple(inspect.signature(upload_export).parameters)[2:]  # revision, private, ...


def _checked_folder(folder) -> tuple[Path, list[Path]]:
    """`folder` as a Path and its files, once `check_export_folder` found it complete."""
    if not isinstance(folder, (str, Path)):
        raise PublishError(f"`folder_or_model` must be an exported folder or an hf_xfmr model, "
                           f"got {type(folder).__name__}.")
    try:
        return Path(folder), check_export_folder(folder)
    except ExportError as err:
        raise PublishError(str(err)) from None


def _token(token: str | None) -> str:
    import huggingface_hub

    token = token or huggingface_hub.get_token()
    if not token:
        raise PublishError("no Hugging Face token found: log in with `hf auth login`, or set the HF_TOKEN "
                           "environment variable to a token with write access.")
    return token


def _committer(api, folder: Path, files: list[Path], repo_id: str, *, revision, message: str, create_pr: bool,
               delete_stale: bool):
    """The call that makes the one commit: every file of `folder`, and deletions of stale remote files."""
    from huggingface_hub import CommitOperationDelete

    local = {rel.as_posix() for rel in files}

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

    return commit


def _read_architectures(folder: Path) -> str | None:
    try:
        names = json.loads((folder / CONFIG_FILE).read_text()).get("architectures") or []
    except (OSError, ValueError):
        return None
    return ", ".join(names) or None


__all__ = ["PublishError", "check_repo_id", "publish", "upload_export"]
