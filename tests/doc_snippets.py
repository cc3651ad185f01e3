"""Reading the code blocks of the README and of docs/, for the tests that run them.

A test takes a ```python block with `snippet(marker, page)`: the one block of `page` that contains `marker`.
tests/test_docs.py reads the tests' `snippet(...)` calls (statically, so it needs no test to have run first)
and fails for a block that no call takes: every block a page shows is run by some test.
"""

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import transformers

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\S*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # relative to the repository root, e.g. "docs/models/gpt.md"
    line: int  # of its opening fence
    language: str  # "python", "bash", ... ("" for a plain ``` block)
    code: str


def doc_pages() -> list[str]:
    """README.md and every page under docs/, as paths relative to the repository root."""
    return ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))


def code_blocks(page: str) -> list[Block]:
    """Every fenced block of `page`, in order."""
    text = (ROOT / page).read_text()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def snippet(marker: str, page: str = "README.md") -> str:
    """The one ```python block of `page` that contains `marker`."""
    blocks = [b.code for b in code_blocks(page) if b.language == "python" and marker in b.code]
    assert len(blocks) == 1, f"expected one ```python block of {page} containing {marker!r}, found {len(blocks)}"
    return blocks[0]


def is_class_name(name: str) -> bool:
    import hf_xfmr.models

    return hasattr(transformers, name) or any(
        cls.__name__ == name for arch in hf_xfmr.models.architectures() for cls in arch.classes.values()
    )


def run_checking_comments(code: str) -> dict:
    """Execute `code` statement by statement; after `name = ...  # ClassName ...`, `name` must be a ClassName.
    The namespace comes back, with `_checked`: how many such comments were checked."""
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(code).readline)
                if tok.type == tokenize.COMMENT}
    namespace: dict = {}
    checked = 0
    for stmt in ast.parse(code).body:
        exec(compile(ast.Module([stmt], []), "<docs snippet>", "exec"), namespace)
        named = re.match(r"#\s*((?:Xfmr)?[A-Z]\w+)\b", comments.get(stmt.end_lineno, ""))
        if isinstance(stmt, ast.Assign) and named and is_class_name(named.group(1)):
            (target,) = stmt.targets
            assert type(namespace[target.id]).__name__ == named.group(1), (
                f"the snippet says {target.id} is a {named.group(1)}, it is a {type(namespace[target.id]).__name__}"
            )
            checked += 1
    namespace["_checked"] = checked
    return namespace


def snippet_calls(source: str) -> list[tuple[str, str]]:
    """(page, marker) of every `snippet("marker", "page")` call in a test module's source (literal
    arguments only: a marker computed at run time cannot be checked statically)."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name != "snippet" or not node.args or not isinstance(node.args[0], ast.Constant):
            continue
        page = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "page"), None)
        if page is None:
            calls.append(("README.md", node.args[0].value))
        elif isinstance(page, ast.Constant):
            calls.append((page.value, node.args[0].value))
    return calls
