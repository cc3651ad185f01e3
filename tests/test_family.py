"""The family records (`hf_xfmr.family`, one `models/<arch>/family.py` per architecture): what the registry, the
tokenizer trainer, the pretraining objectives and the command line read instead of naming architectures."""

import ast
import dataclasses
from pathlib import Path

import pytest

import hf_xfmr.family as family_module
from hf_xfmr.cli.catalog import ARCHITECTURE_OBJECTIVES
from hf_xfmr.data import default_corpus
from hf_xfmr.data.tokenizers import tokenizer_aliases, train_tokenizer
from hf_xfmr.family import Family, TokenizerRecipe, families, get_family, tokenizer_recipe
from hf_xfmr.models import architectures
from hf_xfmr.training import ObjectiveSettings, get_objective


def test_every_architecture_is_registered_from_its_record():
    records = families()
    assert [f.name for f in records] == [a.name for a in architectures()]
    for arch in architectures():
        assert arch.family == get_family(arch.name)  # the record the package imported is the one read from its file
        assert arch.objectives == arch.family.objectives and arch.model_type == arch.family.model_type
    assert ARCHITECTURE_OBJECTIVES == tuple((f.name, f.objectives) for f in records)


def test_records_are_plain_data_importing_only_the_record_types():
    """`hf-xfmr --help` reads them without importing the model packages (tests/test_cli.py checks the modules)."""
    for path in sorted(Path(family_module.MODELS).glob("*/family.py")):
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        assert imported == {"hf_xfmr.family"}, (path, imported)


def test_shared_tokenizer_recipes_follow_to_their_family():
    assert tokenizer_recipe(get_family("distilbert")) is get_family("bert").tokenizer
    assert tokenizer_recipe(get_family("bart")) is get_family("roberta").tokenizer
    assert tokenizer_recipe(get_family("xlnet")).marks_segments and not tokenizer_recipe(get_family("t5")).marks_segments


def test_the_tokenizer_trainer_reads_the_recipes():
    names = {f.name for f in families()} | {alias for f in families() for alias in f.aliases}
    assert set(tokenizer_aliases()) == names | {"wordpiece", "unigram", "bpe"}
    for name in ("xlnet", "t5", "gpt2"):
        recipe = tokenizer_recipe(get_family("gpt" if name == "gpt2" else name))
        tok = train_tokenizer(name, default_corpus(max_documents=20), vocab_size=400)
        assert tok.convert_ids_to_tokens(list(range(len(recipe.special)))) == list(recipe.special)
        assert tok.padding_side == recipe.padding_side
        assert len([t for t in tok.get_vocab() if t.startswith("<extra_id_")]) == recipe.sentinels


@pytest.mark.parametrize("arch,objective,field,value", [("albert", "mlm+sop", "max_ngram", 3),
                                                       ("albert", "mlm", "max_ngram", 3),
                                                       ("modernbert", "mlm", "mlm_probability", 0.3),
                                                       ("bert", "mlm", "max_ngram", None)])
def test_pretraining_defaults_come_from_the_record_and_yield_to_the_run(arch, objective, field, value):
    resolved = get_objective(objective).resolve(ObjectiveSettings(arch=arch))
    assert getattr(resolved, field) == value
    given = get_objective(objective).resolve(ObjectiveSettings(arch=arch, **{field: 2 if field == "max_ngram" else 0.2}))
    assert getattr(given, field) == (2 if field == "max_ngram" else 0.2)


def test_bad_records_are_refused_when_written():
    recipe = TokenizerRecipe(kind="bpe", special=("<pad>",), roles={"pad_token": "<pad>"})
    with pytest.raises(ValueError, match="kind 'sentencepiece'"):
        dataclasses.replace(recipe, kind="sentencepiece")
    with pytest.raises(ValueError, match=r"pretraining_defaults for \['clm'\], which are not among its objectives"):
        Family(name="toy", model_type="xfmr-toy", objectives=("mlm",), tokenizer=recipe,
               pretraining_defaults={"clm": {"max_ngram": 2}})
    with pytest.raises(ValueError, match="Unknown architecture 'toy'; the families are: albert"):
        get_family("toy")


def test_a_new_folder_is_a_new_family(tmp_path, monkeypatch):
    """What adding an architecture takes on this side: a folder with its record (the registry still needs its
    package imported: models/__init__.py)."""
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "family.py").write_text(
        "from hf_xfmr.family import Family\n\n"
        "FAMILY = Family(name='toy', model_type='xfmr-toy', objectives=('mlm',), tokenizer='bert',\n"
        "                pretraining_defaults={'mlm': {'mlm_probability': 0.25}})\n")
    (tmp_path / "wrong").mkdir()
    monkeypatch.setattr(family_module, "MODELS", tmp_path)
    monkeypatch.setattr(family_module, "_FAMILIES", {})
    assert [f.name for f in families()] == ["toy"]
    assert get_family("toy").pretraining_defaults == {"mlm": {"mlm_probability": 0.25}}
    (tmp_path / "wrong" / "family.py").write_text(
        "from hf_xfmr.family import Family\n\n"
        "FAMILY = Family(name='other', model_type='xfmr-other', objectives=(), tokenizer='toy')\n")
    monkeypatch.setattr(family_module, "_FAMILIES", {})
    with pytest.raises(ValueError, match="FAMILY.name is 'other'; a family is named after its folder"):
        families()
