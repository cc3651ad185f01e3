"""The family record: what the rest of hf_xfmr needs to know about an architecture, as plain data.

Each architecture's folder holds one record, `models/<arch>/family.py` defining `FAMILY = Family(...)`: its
`--arch` name and model type, its pretraining objectives (the default first) and their per-family settings,
and its tokenizer recipe. The registry (`models/registry.py`), the tokenizer trainer (`data/tokenizers.py`),
the pretraining objectives (`training/objectives.py`) and the command line's help (`cli/catalog.py`) read
the records instead of naming architectures, so adding a family touches its own folder.

The records import nothing but the standard library, and `families()` reads them from their files without
importing the model packages: `hf-xfmr --help` lists the architectures without importing torch.
"""

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

MODELS = Path(__file__).resolve().parent / "models"
TOKENIZER_KINDS = ("wordpiece", "unigram", "bpe")


@dataclass(frozen=True)
class TokenizerRecipe:
    """How `hf_xfmr.data.train_tokenizer` builds a tokenizer in a family's style.

    kind: the model trained, "wordpiece" | "unigram" (Metaspace) | "bpe" (byte level).
    special: the special tokens, in the order of the first vocabulary ids.
    roles: `PreTrainedTokenizerFast` keywords naming them (`pad_token="[PAD]"`, ...).
    template: (single, pair) `TemplateProcessing` templates (`$A:0`, `:n` the token type id); None: none.
    padding_side: where padding goes ("left" for XLNet, whose summary reads the last token).
    sentinels: span-corruption sentinels `<extra_id_0>`... appended after training, `<extra_id_0>` the last id
        (T5's SentencePiece layout); they count in `vocab_size`.
    """

    kind: str
    special: tuple[str, ...]
    roles: Mapping[str, Any]
    template: tuple[str, str] | None = None
    padding_side: str = "right"
    sentinels: int = 0

    def __post_init__(self):
        if self.kind not in TOKENIZER_KINDS:
            raise ValueError(f"TokenizerRecipe kind {self.kind!r}: choose one of {TOKENIZER_KINDS}.")
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"TokenizerRecipe padding_side {self.padding_side!r}: choose 'left' or 'right'.")

    @property
    def marks_segments(self) -> bool:
        """Whether the pair template gives some token a type id other than 0 (a second segment, XLNet's <cls>)."""
        return self.template is not None and any(not t.endswith(":0") for t in self.template[1].split())


@dataclass(frozen=True)
class Family:
    """One architecture as the rest of the package sees it (see the module docstring).

    name: the `--arch` name (also a `train_tokenizer` kind); model_type: its config's `xfmr-*` type.
    objectives: the pretraining objectives it trains with (keys of the registry's OBJECTIVES), the default first.
    tokenizer: its tokenizer recipe, or the name of the family whose recipe it shares (DistilBERT: "bert").
    pretraining_defaults: objective -> `ObjectiveSettings` fields this family sets when the run leaves them
        unset (ALBERT masks n-grams of up to 3 tokens; ModernBERT masks 30%).
    aliases: other names `train_tokenizer` accepts for its recipe ("gpt2").
    """

    name: str
    model_type: str
    objectives: tuple[str, ...]
    tokenizer: TokenizerRecipe | str
    pretraining_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = sorted(set(self.pretraining_defaults) - set(self.objectives))
        if unknown:
            raise ValueError(f"Family {self.name!r}: pretraining_defaults for {unknown}, which are not among its "
                             f"objectives {self.objectives}.")


_FAMILIES: dict[str, Family] = {}


def families() -> tuple[Family, ...]:
    """Every family record, in the order of the folder names (the registry's order), read once."""
    if not _FAMILIES:
        for path in sorted(MODELS.glob("*/family.py")):
            record = _load(path).FAMILY
            if record.name != path.parent.name:
                raise ValueError(f"{path}: FAMILY.name is {record.name!r}; a family is named after its folder.")
            _FAMILIES[record.name] = record
    return tuple(_FAMILIES.values())


def get_family(name: str) -> Family:
    """The record of the family `name` (its `--arch` name), or a ValueError listing the families."""
    known = {f.name: f for f in families()}
    if name not in known:
        raise ValueError(f"Unknown architecture {name!r}; the families are: {', '.join(known)}.")
    return known[name]


def tokenizer_recipe(family: Family) -> TokenizerRecipe:
    """`family`'s tokenizer recipe, following a shared one to the family that defines it."""
    recipe = family.tokenizer
    return get_family(recipe).tokenizer if isinstance(recipe, str) else recipe


def _load(path: Path):
    """The module of a family record: the one the package imported, else the file run on its own under a private
    name (it imports only the standard library and this module), without importing the model packages."""
    imported = sys.modules.get(f"hf_xfmr.models.{path.parent.name}.family")
    if imported is not None:
        return imported
    spec = importlib.util.spec_from_file_location(f"_hf_xfmr_family_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
