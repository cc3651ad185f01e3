"""What every hf_xfmr config shares: field validation, named size presets, and strict keywords.

Errors name the field, the offending value and what would be valid, so a typo in a config
fails at construction time rather than as a shape error deep inside a forward pass.

`XfmrPretrainedConfig` is the base of every config: `from_preset(name, **overrides)`, and keyword
arguments that are neither a field of the config nor one of transformers' own (`config_keyword_known`)
raise a TypeError naming the closest fields. Only a saved config file is read leniently (a key some
other tool wrote must not make a checkpoint unloadable): such keys are kept as attributes, silently, as
transformers' own configs keep them (legacy keys such as `gradient_checkpointing` or `output_past`);
only a key that reads as a misspelling of a field (`misspelt_fields`: `hiden_size`) is warned about,
since the model does not read it.
"""

import contextlib
import contextvars
import copy
import dataclasses
import difflib
import warnings
from typing import Any, ClassVar, Mapping

from transformers import GenerationConfig, PretrainedConfig

from .load_hook import LOADERS

# Feed-forward activations every architecture accepts by name (`layers.mlp.get_activation` builds them).
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


def check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


def check_non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}.")


def check_probability(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        hint = " (or None to fall back to the default)" if allow_none else ""
        raise ValueError(f"`{name}` must be a probability in [0, 1){hint}, got {value!r}.")


def check_positive_float(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")


def check_choice(name: str, value: Any, choices) -> None:
    if value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}`={value!r} is not supported; valid values are: {valid}.")


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by != 0:
        raise ValueError(
            f"`{name}`={value} must be divisible by `{by_name}`={by} (each head gets {name} / {by_name} "
            f"dimensions); pick e.g. {name}={by * max(1, round(value / by))}."
        )


def check_single_id(name: str, value: Any, example: str) -> None:
    """A special id the model reads as one token (an end-of-sequence id), not the list transformers' generation
    configs allow; `example` is the architecture's own ("T5: 1")."""
    if isinstance(value, (list, tuple)):
        raise ValueError(f"`{name}`={value!r}: pass a single id ({example}); the generation config may still "
                         f"list several.")


# Special-token ids outside [0, vocab_size) are an error in a config built in code. A config read from an
# existing checkpoint keeps them: transformers accepts them with a warning, and `GPT2Config(vocab_size=32000)`
# keeps bos/eos=50256. Conversion and loading run inside `special_ids_outside_vocab_allowed()`.
_OUTSIDE_VOCAB_IDS: contextvars.ContextVar = contextvars.ContextVar("outside_vocab_ids", default=None)


@contextlib.contextmanager
def special_ids_outside_vocab_allowed():
    """Within the block, `check_token_id` keeps an integer id outside [0, vocab_size) instead of raising,
    and appends (field name, id) to the list this yields."""
    found = []
    token = _OUTSIDE_VOCAB_IDS.set(found)
    try:
        yield found
    finally:
        _OUTSIDE_VOCAB_IDS.reset(token)


def check_token_id(name: str, value: Any, vocab_size: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or not 0 <= value < vocab_size:
        allowed = _OUTSIDE_VOCAB_IDS.get()
        if allowed is not None and isinstance(value, int) and not isinstance(value, bool):
            allowed.append((name, value))
            return
        raise ValueError(f"`{name}`={value!r} must be None or an id in [0, vocab_size={vocab_size}).")


@dataclasses.dataclass(frozen=True)
class FromVocabEnd:
    """A preset's special-token id counted from the end of the vocabulary: `FromVocabEnd(1)` is the last
    id (GPT-2's <|endoftext|>, 50256 of 50257). It follows a `vocab_size` override, so a preset stays
    valid with a smaller vocabulary; an id given explicitly replaces it."""

    offset: int

    def resolve(self, name: str, vocab_size: int, preset: str) -> int:
        token_id = vocab_size - self.offset
        if token_id < 0:
            raise ValueError(
                f"Preset {preset!r} puts `{name}` {self.offset} ids before the end of the vocabulary, but "
                f"vocab_size={vocab_size} is smaller than that; pass `{name}` explicitly (your tokenizer's id)."
            )
        return token_id


def preset_kwargs(presets: dict, name: str, overrides: dict) -> dict:
    """The keyword arguments of a named size preset, with `overrides` applied on top; special ids the
    preset counts from the end of the vocabulary (`FromVocabEnd`) follow the final `vocab_size`."""
    if name not in presets:
        raise ValueError(f"Unknown preset {name!r}; available presets: {', '.join(sorted(presets))}.")
    kwargs = {**presets[name], **overrides}
    for key, value in kwargs.items():
        if isinstance(value, FromVocabEnd):
            kwargs[key] = value.resolve(key, kwargs["vocab_size"], name)
    return kwargs


@dataclasses.dataclass(frozen=True)
class FieldChecks:
    """The value checks a config declares, by field name; each error names the field, the value and what
    would be valid (the `check_*` functions above). `XfmrPretrainedConfig` runs them in the order of the
    attributes below, then the config's own `check_own_fields`, and the special-token ids last (so an
    architecture's own id checks, e.g. "a single eos id, not a list", come first)."""

    positive_ints: tuple = ()
    optional_positive_ints: tuple = ()  # None, or a positive integer
    head_splits: tuple = ()  # (width field, head-count field) pairs: the width must split evenly into heads
    choices: Mapping = dataclasses.field(default_factory=dict)  # field -> its valid values
    probabilities: tuple = ()
    optional_probabilities: tuple = ()  # None (the config falls back to another rate), or a probability
    positive_floats: tuple = ()
    token_ids: tuple = ("pad_token_id", "bos_token_id", "eos_token_id")  # None, or an id in [0, vocab_size)

    def check_values(self, config) -> None:
        """Every declared check except the special-token ids."""
        for name in self.positive_ints:
            check_positive_int(name, getattr(config, name))
        for name in self.optional_positive_ints:
            if getattr(config, name) is not None:
                check_positive_int(name, getattr(config, name))
        for width, heads in self.head_splits:
            check_divisible(width, getattr(config, width), heads, getattr(config, heads))
        for name, valid in self.choices.items():
            check_choice(name, getattr(config, name), valid)
        for name in self.probabilities:
            check_probability(name, getattr(config, name))
        for name in self.optional_probabilities:
            check_probability(name, getattr(config, name), allow_none=True)
        for name in self.positive_floats:
            check_positive_float(name, getattr(config, name))

    def check_token_ids(self, config) -> None:
        for name in self.token_ids:
            check_token_id(name, getattr(config, name), config.vocab_size)


# -- keyword arguments --------------------------------------------------------------------------------
def _settable_properties(cls) -> set:
    return {name for klass in cls.__mro__ for name, value in vars(klass).items()
            if isinstance(value, property) and value.fset is not None}


# What transformers' PretrainedConfig takes besides the fields of a config, in transformers 5: its own
# fields and settable properties (`num_labels`, `name_or_path`, `torch_dtype`, ...), the keywords its
# `__post_init__` consumes, the generation parameters it drops (old config files carry them; `use_cache`
# is one, which Trainer sets on every model's config), and keys transformers or the Hub write into a
# config.json (`model_type`, remote code's `auto_map`) or read from one (`quantization_config`,
# `tokenizer_class`). Names starting with "_" (`_name_or_path`, `_commit_hash`, ...) are internal to it.
TRANSFORMERS_CONFIG_KEYWORDS = frozenset(
    {f.name for f in dataclasses.fields(PretrainedConfig)}
    | _settable_properties(PretrainedConfig)
    | {"attn_implementation", "experts_implementation", "output_attentions", "torch_dtype", "name_or_path",
       "num_labels", "per_layer_config"}
    | set(GenerationConfig._get_default_generation_params())
    | {"model_type", "auto_map", "quantization_config", "tokenizer_class"}
)


def config_keyword_known(config_class, name: str) -> bool:
    """Whether `config_class(**{name: ...})` means something: one of its fields, an alias of one
    (`attribute_map`), or a keyword transformers itself handles (`TRANSFORMERS_CONFIG_KEYWORDS`)."""
    return (name in {f.name for f in dataclasses.fields(config_class)} or name in config_class.attribute_map
            or name in TRANSFORMERS_CONFIG_KEYWORDS or name.startswith("_"))


def unknown_keywords_message(config_class, names) -> str:
    """"`hiden_size` (did you mean `hidden_size`?)" for each name, and the config's fields when a name
    resembles none of them."""
    own = {f.name for f in dataclasses.fields(config_class)} - {f.name for f in dataclasses.fields(PretrainedConfig)}
    fields = sorted(own | set(config_class.attribute_map))
    parts, unmatched = [], False
    for name in names:
        close = difflib.get_close_matches(name, fields, n=3, cutoff=0.6)
        unmatched = unmatched or not close
        parts.append(f"`{name}`" + (f" (did you mean {' or '.join(f'`{c}`' for c in close)}?)" if close else ""))
    listing = f" {config_class.__name__}'s fields: {', '.join(fields)}." if unmatched else ""
    return f"{', '.join(parts)}.{listing}"


MISSPELLING_SIMILARITY = 0.9  # difflib ratio: `hiden_size` / `hidden_size` 0.95, `n_layers` / `n_layer` 0.93


def misspelt_fields(config_class, names) -> dict[str, str]:
    """name -> the field of `config_class` it reads as a misspelling of (a difflib similarity of at least
    MISSPELLING_SIMILARITY: one or two characters off), for the names that are no keyword the config knows.
    Legacy keys of older configs (`gradient_checkpointing`, `output_past`, `static_position_embeddings`)
    resemble no field that closely."""
    own = {f.name for f in dataclasses.fields(config_class)} - {f.name for f in dataclasses.fields(PretrainedConfig)}
    fields = sorted(own | set(config_class.attribute_map))
    found = {}
    for name in names:
        if not config_keyword_known(config_class, name):
            close = difflib.get_close_matches(name, fields, n=1, cutoff=MISSPELLING_SIMILARITY)
            if close:
                found[name] = close[0]
    return found


def check_known_keywords(config_class, kwargs) -> None:
    """TypeError unless every keyword is a field of `config_class`, an alias, or transformers' own."""
    unknown = [name for name in kwargs if not config_keyword_known(config_class, name)]
    if unknown:
        raise TypeError(f"{config_class.__name__} has no field {unknown_keywords_message(config_class, unknown)}")


class XfmrPretrainedConfig(PretrainedConfig):
    """transformers' `PretrainedConfig` plus what every hf_xfmr config has: size presets (`presets`, a
    name -> keyword arguments dict set by each architecture) read by `from_preset`, field values checked
    at construction (`field_checks`, declared by each architecture, then its `check_own_fields`), and
    keyword arguments checked against the fields (a misspelt field is an error, not a silently ignored
    attribute).

    Construction runs, in order: aliases given as keywords (`attribute_map`: `hidden_size=` for GPT's
    `n_embd`) set their field, so they are checked too; `derive_defaults` fills fields whose default
    derives from another; the declared checks; `check_own_fields`; the special-token ids; the keywords.
    """

    presets: ClassVar[dict] = {}
    field_checks: ClassVar[FieldChecks] = FieldChecks()
    # Every architecture's switch: `position_ids` that restart inside a row (return to the row's first position, as
    # transformers' DataCollatorWithFlattening numbers packed sequences) mark packed sequences,
    # which then attend to themselves only. False: such sequences attend to each other, as under transformers'
    # SDPA and eager attention (explicit boundaries, `cu_seq_lens_q` / `cu_seqlens`, keep them apart either way).
    packed_position_ids: bool = True
    # An encoder-decoder whose `num_hidden_layers` is the encoder's depth names its decoder-depth field here.
    decoder_layers_field: ClassVar[str | None] = None

    def __post_init__(self, **kwargs):
        for alias, name in self.attribute_map.items():
            if alias in kwargs:
                setattr(self, name, kwargs.pop(alias))
        self.derive_defaults()
        self.field_checks.check_values(self)
        self.check_own_fields()
        self.field_checks.check_token_ids(self)
        check_known_keywords(type(self), kwargs)
        super().__post_init__(**kwargs)

    def derive_defaults(self) -> None:
        """Set the fields left None whose default derives from another field (T5's `num_decoder_layers` is
        `num_layers`). Runs before any check; the default does nothing."""

    def check_own_fields(self) -> None:
        """The architecture's checks beyond `field_checks` (relations between fields, ...): run after the
        declared checks, so the fields they read are already known valid, and before the special-token ids."""

    def get_text_config(self, decoder=None, encoder=None):
        """transformers sizes a generation cache from `get_text_config(decoder=True).num_hidden_layers`. For an
        encoder-decoder (`decoder_layers_field`) that is the encoder's depth, so the decoder's view is a copy
        reporting the decoder's depth there."""
        if self.decoder_layers_field is not None and decoder and not encoder:
            encoder_field = self.attribute_map["num_hidden_layers"]
            depth = getattr(self, self.decoder_layers_field)
            if depth != getattr(self, encoder_field):
                view = copy.copy(self)
                view.__dict__[encoder_field] = depth
                return view
        return super().get_text_config(decoder=decoder, encoder=encoder)

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """A config of the named size (a key of `cls.presets`: `tiny` for tests, the published sizes)
        with `overrides` applied; special ids of the preset follow an overridden `vocab_size`."""
        check_known_keywords(cls, overrides)
        return cls(**preset_kwargs(cls.presets, name, overrides))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """transformers' `from_pretrained`. Where hf_xfmr is imported, the config of a transformers checkpoint of
        this family (a folder or a Hub repo id) is converted, as the models' `from_pretrained` converts its
        weights (PEFT reads a base model's config this way when it saves an adapter)."""
        load = super().from_pretrained
        loader = LOADERS.get("config_from_pretrained")
        if loader is None:
            return load(pretrained_model_name_or_path, **kwargs)
        return loader(cls, load, pretrained_model_name_or_path, **kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A config from a saved dict (config.json). Keys other tools wrote there, unknown to this config, are
        kept as plain attributes, silently, as transformers' own configs keep them (the model reads none of
        them: `gradient_checkpointing`, `output_past`, ... of older configs). A key that reads as a misspelling
        of a field (`misspelt_fields`) gets a warning: the field keeps its own value, or its default."""
        config_dict = dict(config_dict)
        extra = {name: config_dict.pop(name) for name in list(config_dict)
                 if not config_keyword_known(cls, name)}
        with special_ids_outside_vocab_allowed():  # a saved config keeps them (see check_token_id)
            result = super().from_dict(config_dict, **kwargs)
        misspelt = misspelt_fields(cls, extra)
        if misspelt:
            named = ", ".join(f"`{name}` (did you mean `{field}`?)" for name, field in misspelt.items())
            warnings.warn(
                f"The saved config has keys that look like misspelt fields of {cls.__name__}: {named}. They are "
                f"kept as attributes, but the model reads none of them: those fields keep their own values (or "
                f"their defaults).",
                UserWarning, stacklevel=2,
            )
        config = result[0] if isinstance(result, tuple) else result
        for name, value in extra.items():
            setattr(config, name, value)
        return result

    @classmethod
    def from_json_file(cls, json_file):
        """A config from a config.json file, read as `from_dict` reads a saved dict."""
        return cls.from_dict(cls._dict_from_json_file(json_file))
