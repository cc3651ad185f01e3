"""The `from_pretrained` of every hf_xfmr model, with room for one loader installed from outside.

Every `Xfmr*PreTrainedModel` base inherits `ConvertsOnLoad` before transformers' `PreTrainedModel`.
Its `from_pretrained` hands the call to the loader in `LOADERS` when one is installed, and is
transformers' own otherwise. `hf_xfmr.models.conversion` installs the loader that converts a
transformers checkpoint on load (a BERT folder or Hub repo given to `XfmrBertForMaskedLM`).

Why a table rather than an import: Hub exports inline this module into self-contained remote code
(hub/flatten.py), where hf_xfmr is not importable. There the table stays empty and `from_pretrained`
is exactly transformers'.
"""

# "from_pretrained" -> loader(cls, load, pretrained_model_name_or_path, *model_args, **kwargs), where
# `load` is transformers' own `from_pretrained` bound to `cls`; "config_from_pretrained" the same for the configs
# (`config_utils.XfmrPretrainedConfig.from_pretrained`). Filled by hf_xfmr.models.conversion.
LOADERS: dict = {}


class ConvertsOnLoad:
    """Mixin of the hf_xfmr PreTrainedModel bases, listed before `PreTrainedModel`: `from_pretrained` is
    the loader in `LOADERS` when one is installed (hf_xfmr's converts transformers checkpoints), else
    transformers' own (always, in an exported model's remote code)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """transformers' `from_pretrained`. Where hf_xfmr is imported, a transformers checkpoint of this
        model's family (a folder or a Hub repo id) is also accepted and converted on load."""
        load = super().from_pretrained
        loader = LOADERS.get("from_pretrained")
        if loader is None:
            return load(pretrained_model_name_or_path, *model_args, **kwargs)
        return loader(cls, load, pretrained_model_name_or_path, *model_args, **kwargs)
