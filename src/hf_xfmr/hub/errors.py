"""The errors of `export` and `publish`, in a module of their own so that both (and the repository-id
check they share) can raise them without importing each other."""


class ExportError(ValueError):
    """Bad input to `export` (or a folder that is not a complete export); the message says how to fix it."""


class PublishError(RuntimeError):
    """Publishing failed; the message says why and what to do (it never contains the token)."""


__all__ = ["ExportError", "PublishError"]
