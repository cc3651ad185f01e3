"""Hub repository ids: the `owner/name` check of `export` and `publish`, and the looser test a model
card's `base_model` needs (an id such as `bert-base-uncased` has no owner)."""

from .errors import PublishError


def _hub_validation_error(text: str):
    """huggingface_hub's objection to `text` as a repository id (an HFValidationError), or None."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as err:
        return err
    return None


def check_repo_id(repo_id, error: type[Exception] = PublishError) -> str:
    """Return `repo_id` if it is a Hub repository id of the form `owner/name`, else raise `error` saying
    what the form is (export raises ExportError, publish PublishError)."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise error(f"invalid repo id {repo_id!r}: use the form 'owner/name' (your user or organisation, a slash, "
                    f"the model name), e.g. 'alice/tiny-bert'.")
    problem = _hub_validation_error(repo_id)
    if problem is not None:
        raise error(f"invalid repo id {repo_id!r}: {problem}")
    return repo_id


def is_model_id(text: str) -> bool:
    """Whether `text` reads as a Hub model id (`name` or `owner/name`), not as a path."""
    if text.count("/") > 1 or text.startswith((".", "/", "~")) or text.endswith("/"):
        return False
    return _hub_validation_error(text) is None


def check_model_id(text, option: str, error: type[Exception] = ValueError) -> str:
    """Return `text` if it reads as a Hub model id (`is_model_id`), else raise `error` naming `option` (the
    `--base_model` of the training commands: a card's base_model must be a real id, not a path)."""
    if not isinstance(text, str) or not is_model_id(text):
        raise error(f"{option} {text!r} is not a Hub model id: use 'name' or 'owner/name' (e.g. "
                    f"'google-bert/bert-base-uncased'), not a path.")
    return text


__all__ = ["check_model_id", "check_repo_id", "is_model_id"]
