"""The `from_pretrained` of every hf_xfmr model, with room for one loader installed from outside.

Every `Xfmr*PreTrainedModel` base inherits `ConvertsOnLoad` before transformers' `PreTrainedModel`.
Its `from_pretrained` hands the call to the loader in `LOADERS` when one is installed, and is
transformers' own otherwise. `hf_xfmr.models.conversion` installs the loader that converts a
transformers checkpoint on load (a BERT folder or Hub repo id given to `XfmrBertForMaskedLM`).

Quantized loading (`quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)`, QLoRA): a checkpoint
of ours goes straight to transformers, which quantizes it as it loads. A transformers checkpoint is
converted in full precision first (its quantized weights could not be renamed and split), written to a
temporary folder in our layout, and loaded from there by transformers with the quantization config, so
the model comes back exactly as transformers quantizes any model (`is_loaded_in_4bit`,
`config.quantization_config`, `hf_quantizer`), which is what PEFT's `prepare_model_for_kbit_training`
reads. The full-precision copy costs one model's size in memory and on disk while loading.

Why a table rather than an import: Hub exports inline this module into self-contained remote code
(hub/flatten.py), where hf_xfmr is not importable. There the table stays empty and `from_pretrained`
is exactly transformers'.
"""

import tempfile

# "from_pretrained" -> loader(cls, load, pretrained_model_name_or_path, *model_args, **kwargs), where
# `load` is transformers' own `from_pretrained` bound to `cls`; "config_from_pretrained" the same for the configs
# (`config_utils.XfmrPretrainedConfig.from_pretrained`). Filled by hf_xfmr.models.conversion.
LOADERS: dict = {}

# `from_pretrained` keywords that only the final, quantizing load takes (not the full-precision conversion).
_QUANTIZED_LOAD_KWARGS = ("quantization_config", "device_map")


class ConvertsOnLoad:
    """Mixin of the hf_xfmr PreTrainedModel bases, listed before `PreTrainedModel`: `from_pretrained` is
    the loader in `LOADERS` when one is installed (hf_xfmr's converts transformers checkpoints), else
    transformers' own (always, in an exported model's remote code)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """transformers' `from_pretrained`. Where hf_xfmr is imported, a transformers checkpoint of this
        model's family (a folder or a Hub repo id) is also accepted and converted on load, quantized too
        when a `quantization_config` is given (see the module docstring)."""
        load = super().from_pretrained
        loader = LOADERS.get("from_pretrained")
        if loader is None:
            return load(pretrained_model_name_or_path, *model_args, **kwargs)
        if kwargs.get("quantization_config") is None:
            return loader(cls, load, pretrained_model_name_or_path, *model_args, **kwargs)
        return _quantized_load(cls, loader, load, pretrained_model_name_or_path, *model_args, **kwargs)


def _quantized_load(cls, loader, load, src, *model_args, **kwargs):
    """`from_pretrained` with a `quantization_config`: through `loader` without it; a checkpoint of ours reaches
    `load` (transformers' own), which gets the config back and quantizes as it loads; a converted transformers
    checkpoint comes back in full precision and is saved and loaded again, quantized."""
    quantized = {name: kwargs.pop(name) for name in _QUANTIZED_LOAD_KWARGS if name in kwargs}
    loaded_directly = []

    def load_quantized(*args, **load_kwargs):
        loaded_directly.append(True)
        return load(*args, **load_kwargs, **quantized)

    result = loader(cls, load_quantized, src, *model_args, **kwargs)
    if loaded_directly:
        return result
    model, info = result if kwargs.get("output_loading_info") else (result, None)
    keep = {name: kwargs[name] for name in ("dtype", "torch_dtype", "attn_implementation") if name in kwargs}
    # What the user named (PEFT records it as an adapter's base model), not the temporary folder.
    name = model.name_or_path or str(src)
    with tempfile.TemporaryDirectory(prefix="hf_xfmr_quantize_") as folder:
        model.save_pretrained(folder)
        del model
        model = load(folder, **keep, **quantized)
    model.name_or_path = model.config.name_or_path = name
    return (model, info) if info is not None else model
