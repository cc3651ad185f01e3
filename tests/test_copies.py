"""Marked copies stay in step with their source (transformers' "Copied from" check, for hf_xfmr).

Where two architectures cannot share one definition (the class names differ, e.g. ALBERT's task heads
declare ALBERT's backbone), the copy carries a comment on the line above it:

    # Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertForTokenClassification with Bert->Albert

and this test fails when the copy no longer equals its source after the replacements (`A->B`, applied
in order, comma-separated). To change a copied definition, change the source and the copies together, or
drop the marker where the copy is meant to differ. What can be shared is shared instead
(`models/encoder.py`: the BERT family's attention, layer, pooler, MLM head and encoder loop).
"""

import ast
import re
from pathlib import Path

import pytest

import hf_xfmr

PACKAGE = Path(hf_xfmr.__file__).parent
MARKER = re.compile(r"^# Copied from (?P<target>hf_xfmr(?:\.\w+)+)(?: with (?P<renames>.+))?$")


def definition_source(path: Path, name: str) -> str:
    """The text of the top-level class or function `name` of `path`, decorators included."""
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(text.splitlines()[start - 1:node.end_lineno])
    raise LookupError(f"{path} defines no top-level {name}")


def resolve(target: str) -> tuple[Path, str]:
    """`hf_xfmr.models.bert.modeling_bert.XfmrBertPooler` -> (path of modeling_bert.py, 'XfmrBertPooler')."""
    module, name = target.rsplit(".", 1)
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py"), name


def apply_renames(text: str, renames: str | None) -> str:
    for pair in (renames or "").split(","):
        if pair.strip():
            old, new = (part.strip() for part in pair.split("->"))
            text = text.replace(old, new)
    return text


def marked_copies(path: Path) -> list[tuple[str, str, str | None]]:
    """(copy name, source target, renames) for every marker in `path`; the marked definition must follow it."""
    lines = path.read_text().splitlines()
    copies = []
    for node in ast.parse("\n".join(lines)).body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        match = MARKER.match(lines[start - 2]) if start >= 2 else None
        if match:
            copies.append((node.name, match["target"], match["renames"]))
    return copies


def drift(path: Path) -> list[str]:
    """A message per marked copy of `path` that no longer equals its source (renamed)."""
    problems = []
    for name, target, renames in marked_copies(path):
        source_path, source_name = resolve(target)
        expected = apply_renames(definition_source(source_path, source_name), renames)
        if definition_source(path, name) != expected:
            problems.append(f"{path.relative_to(PACKAGE.parent)}: {name} is marked as a copy of {target}"
                            f"{' with ' + renames if renames else ''} but differs from it")
    return problems


SOURCES = sorted(PACKAGE.rglob("*.py"))
MARKED = [path for path in SOURCES if "# Copied from " in path.read_text()]


def test_the_encoder_copies_are_marked():
    names = {name for path in MARKED for name, _, _ in marked_copies(path)}
    assert {"XfmrAlbertForMaskedLM", "XfmrAlbertForTokenClassification", "XfmrAlbertForQuestionAnswering",
            "XfmrAlbertForMultipleChoice", "XfmrAlbertPooler"} <= names


@pytest.mark.parametrize("path", MARKED, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_marked_copies_match_their_source(path):
    assert not drift(path)


def test_every_marker_names_a_definition_that_follows_it():
    for path in MARKED:
        markers = sum(1 for line in path.read_text().splitlines() if MARKER.match(line))
        assert markers == len(marked_copies(path)), f"{path}: a '# Copied from' line stands above no definition"
        for _, target, _ in marked_copies(path):
            definition_source(*resolve(target))  # raises when the source is gone


def test_drift_is_caught(tmp_path, monkeypatch):
    package = tmp_path / "hf_xfmr"
    package.mkdir()
    (package / "source.py").write_text('class XfmrBertThing:\n    """Bert\'s thing."""\n\n    size = 1\n')
    copy = package / "copy.py"
    marker = "# Copied from hf_xfmr.source.XfmrBertThing with Bert->Albert\n"
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)
    copy.write_text(marker + 'class XfmrAlbertThing:\n    """Albert\'s thing."""\n\n    size = 1\n')
    assert drift(copy) == []
    copy.write_text(marker + 'class XfmrAlbertThing:\n    """Albert\'s thing."""\n\n    size = 2\n')
    assert drift(copy) == ["hf_xfmr/copy.py: XfmrAlbertThing is marked as a copy of hf_xfmr.source.XfmrBertThing "
                           "with Bert->Albert but differs from it"]
