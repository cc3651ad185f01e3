"""The one check of a checkpoint folder's weight files, run before anything reads them.

Every command that reads a checkpoint (pretrain --model_path, finetune, distill, export, convert) calls
`check_weight_files` first, so a damaged or unusable folder gets the same message everywhere instead of a
safetensors or transformers error from deep inside `from_pretrained`:

- no safetensors weights (e.g. only a pickled `pytorch_model.bin`, which hf_xfmr never loads);
- a PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`) where a model is needed;
- a `model.safetensors.index.json` whose shards are missing;
- a safetensors file that does not open: truncated or empty (an interrupted download or copy).
"""

import json
from pathlib import Path

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


class MissingWeightsError(FileNotFoundError, ValueError):
    """The folder has no model weights hf_xfmr can read. Both a FileNotFoundError (what the loaders raised
    before) and a ValueError (what the commands turn into a one-line message)."""


def _adapter_message(path: Path) -> str:
    merged = path.parent / "merged"
    where = (f"the merged model {merged} that `hf-xfmr finetune --lora --merge` wrote next to it"
             if (merged / "config.json").is_file() else
             "the merged model: rerun `hf-xfmr finetune` with --lora --merge (it writes merged/ next to adapter/)")
    return (f"{path} is a PEFT (LoRA) adapter folder ({ADAPTER_CONFIG_FILE}), not a complete model: it holds only "
            f"the adapter and head weights, which need their base model. Use {where}, or merge it in Python: "
            "`hf_xfmr.training.load_adapter_model(folder).merge_and_unload()` and save that.")


def check_weight_files(path, *, adapter: bool = False) -> list[Path]:
    """Check the weights of the checkpoint folder `path` before they are loaded; returns its safetensors files.

    Raises MissingWeightsError when the folder has no model weights (only pickles, or only a PEFT adapter:
    the message then points at the merged model), ValueError for a missing shard or a safetensors file
    that does not open (probably truncated or empty; the message names the file and its size).
    `adapter`: `path` is a PEFT adapter folder, whose weights are adapter_model.safetensors.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    files = sorted(path.glob("*.safetensors"))
    if adapter:
        has_model = (path / ADAPTER_WEIGHTS_FILE).is_file()
        if not has_model:
            raise MissingWeightsError(f"{path} has no {ADAPTER_WEIGHTS_FILE}: it is not a complete adapter folder "
                                      "(PEFT's save_pretrained writes it, with adapter_config.json).")
    else:
        has_model = (path / WEIGHTS_FILE).is_file() or (path / WEIGHTS_INDEX_FILE).is_file()
    if not has_model and (path / ADAPTER_CONFIG_FILE).is_file():
        raise MissingWeightsError(_adapter_message(path))
    if not files and not has_model:
        raise MissingWeightsError(
            f"{path} has no {WEIGHTS_FILE}: hf_xfmr reads safetensors weights only (never pickled "
            f"pytorch_model.bin files). Save the checkpoint again with `save_pretrained` (safetensors by default)."
        )
    index = path / WEIGHTS_INDEX_FILE
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{index} is not a valid safetensors index ({type(err).__name__}: {err}); download "
                             "or save the checkpoint again.") from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ValueError(f"{path} lacks weight shard(s) {', '.join(missing)} listed in {WEIGHTS_INDEX_FILE}: "
                             "the download or copy is incomplete. Download or save the checkpoint again.")
    for file in files:
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            size = file.stat().st_size
            raise ValueError(
                f"{file} is not a valid safetensors file ({size} bytes; {err}): it is probably truncated or empty, "
                f"e.g. an interrupted download or copy. Download or save the checkpoint again."
            ) from err
    return files


__all__ = ["MissingWeightsError", "check_weight_files"]
