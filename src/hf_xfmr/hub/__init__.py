"""Sharing models on the Hugging Face Hub.

- `export(model, tokenizer, folder, ...)`: a flat, self-contained folder (weights, config with
  `auto_map`, generated code, tokenizer, model card) that loads with
  `AutoModel...from_pretrained(folder_or_repo, trust_remote_code=True)` even where hf_xfmr is not installed.
- `publish(folder_or_model, repo_id, ...)`: upload it in one commit with huggingface_hub.
"""

from .export import ExportError, check_export_folder, export
from .flatten import FlattenError
from .publish import PublishError, check_repo_id, publish
from .remote_code import generate_remote_code

__all__ = ["ExportError", "FlattenError", "PublishError", "check_export_folder", "check_repo_id", "export",
           "generate_remote_code", "publish"]
