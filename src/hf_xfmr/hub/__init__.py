"""Sharing models on the Hugging Face Hub.

- `export(model, tokenizer, folder, ...)`: a flat, self-contained folder (weights, config with
  `auto_map`, generated code, tokenizer, model card) that loads with
  `AutoModel...from_pretrained(folder_or_repo, trust_remote_code=True)` even where hf_xfmr is not installed.
- `publish(folder_or_model, repo_id, ...)`: the one route to the Hub: a model is exported first, then the
  folder is uploaded in one commit with huggingface_hub (`upload_export`).
- `cards`: the model card of an export, and the card fields of a training run (`pretrain_card_fields`,
  `finetune_card_fields`).

How the generated code is made, and what model code must respect to stay exportable: docs/flatten.md.
"""

from .errors import ExportError, PublishError
from .export import check_export_folder, export
from .flatten import FlattenError
from .publish import publish, upload_export
from .remote_code import generate_remote_code
from .repo_id import check_repo_id

__all__ = ["ExportError", "FlattenError", "PublishError", "check_export_folder", "check_repo_id", "export",
           "generate_remote_code", "publish", "upload_export"]
