"""The shared homes (conversion machinery, registry, task heads, generation, benchmark harness) import no
architecture: each architecture registers itself with them, so adding one never edits them (and no
import circle can form between a shared module and `convert_<arch>.py`)."""

import ast
from pathlib import Path

import pytest

import hf_xfmr

PACKAGE = Path(hf_xfmr.__file__).parent
ARCHITECTURES = sorted(p.name for p in (PACKAGE / "models").iterdir() if (p / "__init__.py").exists())
SHARED = ["models/conversion.py", "models/registry.py", "models/heads.py", "models/generation.py",
          "models/causal_lm.py", "models/encoder.py", "models/losses.py", "models/input_checks.py",
          "bench/harness.py", "bench/sweep.py"]


def imported_modules(path: Path) -> list[str]:
    """Every module an import statement of `path` names, relative ones as written ('..bert.modeling_bert')."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.append(base)
            names += [f"{base}.{alias.name}" if node.module else base + alias.name for alias in node.names]
    return names


def test_every_architecture_package_is_seen():
    assert {"bert", "roberta", "albert", "distilbert", "gpt", "xlnet", "t5"} <= set(ARCHITECTURES)


def offending_imports(path: Path) -> list[str]:
    return [name for name in imported_modules(path) if set(name.replace(".", " ").split()) & set(ARCHITECTURES)]


@pytest.mark.parametrize("module", SHARED)
def test_shared_module_imports_no_architecture(module):
    offending = offending_imports(PACKAGE / module)
    assert not offending, f"{module} imports architecture modules: {offending}"


def test_the_check_catches_each_import_form(tmp_path):
    probe = tmp_path / "probe.py"
    for line in ("from .bert.convert_bert import ENCODER_RULES", "from . import xlnet", "import hf_xfmr.models.gpt",
                 "from ..models.albert import XfmrAlbertModel"):
        probe.write_text(line + "\n")
        assert offending_imports(probe), line
    probe.write_text("from .conversion import Conversion\nimport torch\n")
    assert not offending_imports(probe)


SHARED_HEADS = {"ForSequenceClassification": "SequenceClassificationHead",
                "ForTokenClassification": "TokenClassificationHead",
                "ForQuestionAnswering": "QuestionAnsweringHead", "ForQuestionAnsweringSimple": "QuestionAnsweringHead",
                "ForMultipleChoice": "MultipleChoiceHead"}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_task_head_comes_from_the_shared_home(arch):
    """No architecture writes its own classification/QA/multiple-choice head: each states its backbone and
    pooling on top of the one in models/heads.py."""
    import importlib

    from hf_xfmr.models import heads

    module = importlib.import_module(f"hf_xfmr.models.{arch}")
    found = 0
    for name in dir(module):
        suffix = next((s for s in SHARED_HEADS if name.startswith("Xfmr") and name.endswith(s)), None)
        if suffix is None or (suffix == "ForQuestionAnswering" and name.endswith("Simple")):
            continue
        found += 1
        assert issubclass(getattr(module, name), getattr(heads, SHARED_HEADS[suffix])), name
    assert found >= 2, f"{arch}: no task heads found"  # BART has two (sequence classification, QA)


@pytest.mark.parametrize("arch", ["bert", "albert", "distilbert", "modernbert", "gpt", "xlnet", "t5", "bart"])
def test_set_attn_implementation_takes_effect(arch):
    """Every attention layer picks its kernel per call through `layers.attention.resolve_kernel`, so
    switching the implementation on a built model is honoured (`XfmrPreTrainedModel`)."""
    from hf_xfmr.models import get_architecture

    spec = get_architecture(arch)
    model = spec.classes["base"]._from_config(spec.config_class.from_preset("tiny"), attn_implementation="sdpa")
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
