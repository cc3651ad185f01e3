"""The Layout section of docs/architecture.md matches the source tree, both ways, so it cannot go stale.

How the section is read (the first ``` block after "## Layout"):
- an *entry* is a line whose first word ends in "/" (a folder) or ".py" (a module), indented 0, 2 or 4
  spaces: `src/hf_xfmr/` at 0 is the package; other words at 0 are paths from the repository root
  (`tests/`); at 2, a folder or module of `src/hf_xfmr`; at 4, one inside the folder entry above it at 2;
- every other line continues the entry above it; `name.py` words in an entry's text are modules of the
  entry's folder (of its parent folder for a module entry).
What must be named: every folder of `src/hf_xfmr` and every folder inside one (as entries), every module
of `src/hf_xfmr` (as an entry) and every module of each of its folders (as an entry or in the folder's
text); not `__init__.py` / `__main__.py`, nor the modules inside `models/<arch>/`. What must exist:
every entry and every `name.py` the section mentions.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "hf_xfmr"
SKIP = {"__pycache__"}
LAYOUT_PAGE = "docs/architecture.md"


@dataclass
class Entry:
    path: Path  # what the entry names
    line: int
    text: list[str] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        """Where the `name.py` words of the entry's text live."""
        return self.path if self.path.suffix != ".py" else self.path.parent


def layout_block() -> list[str]:
    page = (ROOT / LAYOUT_PAGE).read_text()
    section = page[page.index("\n## Layout\n"):]
    match = re.search(r"```\n(.*?)```", section, re.S)
    assert match, f"{LAYOUT_PAGE}: no ``` block in the Layout section"
    return match.group(1).splitlines()


def parse(lines: list[str]) -> list[Entry]:
    entries: list[Entry] = []
    parents: dict[int, Path] = {}  # indent -> the folder entry last seen at that indent
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words:
            continue
        indent = len(line) - len(line.lstrip())
        first = words[0]
        if indent in (0, 2, 4) and (first.endswith("/") or first.endswith(".py")):
            if indent == 0:
                path = PACKAGE if first == "src/hf_xfmr/" else ROOT / first
            else:
                assert indent - 2 in parents, f"Layout line {number} ({first}) is indented under no folder entry"
                path = parents[indent - 2] / first
            entries.append(Entry(path, number, words[1:]))
            if first.endswith("/"):
                parents[indent] = path
                for deeper in [i for i in parents if i > indent]:
                    del parents[deeper]
        else:
            assert entries, f"Layout line {number} comes before any entry"
            entries[-1].text += words
    return entries


def mentioned_modules(entry: Entry) -> set[Path]:
    words = re.findall(r"(?<![\w/.])([\w/]+\.py)\b", " ".join(entry.text))
    return {entry.folder / w for w in words}


def folders(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and p.name not in SKIP)


def modules(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("*.py") if not (p.name.startswith("__") and p.name.endswith("__.py")))


def test_every_folder_and_module_of_the_package_is_in_the_layout():
    entries = parse(layout_block())
    named = {e.path for e in entries}
    named_in_text = set().union(*(mentioned_modules(e) for e in entries))
    missing = []
    for path in modules(PACKAGE) + folders(PACKAGE):
        if path not in named:
            missing.append(path.relative_to(PACKAGE).as_posix() + ("/" if path.is_dir() else ""))
    for sub in folders(PACKAGE):
        for path in folders(sub):
            if path not in named:
                missing.append(path.relative_to(PACKAGE).as_posix() + "/")
        for path in modules(sub):
            if path not in named and path not in named_in_text:
                missing.append(path.relative_to(PACKAGE).as_posix())
    assert not missing, (f"{LAYOUT_PAGE}'s Layout section does not name {', '.join(missing)}: add each to the "
                         "```-block there (a folder as an entry line, a module in its folder's text).")


def test_everything_the_layout_names_exists():
    stale = []
    for entry in parse(layout_block()):
        if not entry.path.exists():
            stale.append(f"line {entry.line}: {entry.path.relative_to(ROOT)}")
        stale += [f"line {entry.line}: {p.relative_to(ROOT)}" for p in sorted(mentioned_modules(entry))
                  if not p.is_file()]
    assert not stale, f"{LAYOUT_PAGE}'s Layout section names what does not exist: {'; '.join(stale)}."


def test_the_check_reads_nesting_and_catches_a_missing_module():
    """The parser on a made-up block: nesting by indentation, module words resolved in their folder."""
    entries = parse(["src/hf_xfmr/", "  cli.py   the command", "  models/  registry.py, heads.py,",
                     "           losses.py", "    bert/  modeling_bert.py", "tests/  mirrors src/"])
    assert [e.path for e in entries] == [PACKAGE, PACKAGE / "cli.py", PACKAGE / "models", PACKAGE / "models" / "bert",
                                         ROOT / "tests"]
    assert mentioned_modules(entries[2]) == {PACKAGE / "models" / m for m in ("registry.py", "heads.py", "losses.py")}
    assert mentioned_modules(entries[3]) == {PACKAGE / "models" / "bert" / "modeling_bert.py"}
    assert PACKAGE / "models" / "conversion.py" not in set().union(*(mentioned_modules(e) for e in entries))
