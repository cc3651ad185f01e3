"""Every code block and link of README.md and docs/ is checked, so the manual cannot go stale.

- ```python blocks: each is run by a test that takes it with `snippet(marker, page)` (tests/doc_snippets.py);
  a block no test takes fails here. The blocks no other test covers are run below.
- ```bash / ```sh blocks: every `hf-xfmr ...` command (also after `-m hf_xfmr.cli`) parses with the real
  command-line parser, every `python path/to/script.py` names a file of the repository, every `make X` a
  target of the Makefile.
- Plain ``` blocks: only the source layout of docs/architecture.md (checked by tests/test_layout_doc.py);
  ```text blocks show a shape or a call pattern, never a command to run, and are not checked.
- Links: every relative link points at a file of the repository, and a `#anchor` at a heading of its page.
"""

import re
import shlex
import types
import warnings
from pathlib import Path

import pytest
import torch
import transformers

from .doc_snippets import ROOT, code_blocks, doc_pages, run_checking_comments, snippet, snippet_calls
from .test_layout_doc import LAYOUT_PAGE  # its plain ``` block is the layout that test_layout_doc checks

# Blocks taken by tests that read their page without `snippet()`: (page, marker) -> the test module.
READ_ELSEWHERE = {
    ("docs/pretraining.md", "pretrain(PretrainArguments("): "tests/training/test_pretrain.py",
    ("docs/pretraining.md", "register_objective(Objective("): "tests/training/test_pretrain.py",
}


def all_blocks():
    return [block for page in doc_pages() for block in code_blocks(page)]


def taken_markers() -> set[tuple[str, str]]:
    """(page, marker) of every block a test takes, read from the tests' sources."""
    taken = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        taken.update(snippet_calls(path.read_text()))
    for (page, marker), test_file in READ_ELSEWHERE.items():
        source = (ROOT / test_file).read_text()
        assert marker in source and Path(page).name in source, f"{test_file} no longer reads {marker!r} from {page}"
        taken.add((page, marker))
    return taken


# ----------------------------------------------------------------------------------------------------------
# Python blocks


def test_every_python_block_is_run_by_a_test():
    taken = taken_markers()
    untested = [f"{b.page}:{b.line}" for b in all_blocks() if b.language == "python"
                and not any(page == b.page and marker in b.code for page, marker in taken)]
    assert not untested, (f"no test runs the ```python block(s) at {', '.join(untested)}: take each with "
                          "snippet(marker, page) (tests/doc_snippets.py) in a test that runs it")


def test_every_marker_a_test_names_finds_its_block():
    """A test's `snippet(marker, page)` whose block moved or changed fails here, by name, without running it."""
    stale = []
    for page, marker in sorted(taken_markers()):
        found = [b for b in code_blocks(page) if b.language == "python" and marker in b.code] \
            if (ROOT / page).is_file() else []
        if len(found) != 1:
            stale.append(f"{marker!r} in {page}: {len(found)} blocks")
    assert not stale, f"snippet markers that do not name one block: {'; '.join(stale)}"


def test_every_block_has_a_known_kind():
    unknown = [f"{b.page}:{b.line} ({b.language or 'plain'})" for b in all_blocks()
               if b.language not in ("python", "bash", "sh", "text") and not (b.language == "" and b.page == LAYOUT_PAGE)]
    assert not unknown, (f"blocks no test checks: {', '.join(unknown)}; use ```python (run by a test), ```bash "
                         "(checked here) or ```text (an illustration, not code)")


def test_models_snippet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = snippet('XfmrBertConfig.from_preset("base")', "README.md").replace('"base"', '"tiny"')
    assert '"tiny"' in code
    namespace = run_checking_comments(code)
    assert type(namespace["model"]).__name__ == "XfmrBertForMaskedLM"
    assert (tmp_path / "my-bert" / "model.safetensors").is_file()


def test_gpt_snippet(tmp_path, monkeypatch):
    from .models._gpt import tiny_gpt2_config

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(tiny_gpt2_config(vocab_size=4000)).save_pretrained(tmp_path / "path/to/gpt2")
    monkeypatch.chdir(tmp_path)
    code = snippet('GPT2LMHeadModel.from_pretrained("path/to/gpt2")', "docs/models/gpt.md")
    code = code.replace('"small"', '"tiny"')
    assert '"tiny"' in code
    namespace = run_checking_comments(code)
    assert type(namespace["model"]).__name__ == "XfmrGPTForCausalLM"
    assert namespace["out"].shape[0] == 2 and torch.isfinite(namespace["loss"])


def test_flatten_check_snippet():
    namespace = run_checking_comments(snippet("check_flat_file(text, name", "docs/flatten.md"))
    code = namespace["code"]
    assert any(name.startswith("modeling_") for name in code.files) and "AutoConfig" in code.auto_map


@pytest.mark.slow  # an export and a load of its generated code: a few seconds
def test_hub_export_and_load_snippets(tmp_path, monkeypatch, wordpiece_tokenizer):
    """The export snippet as written, with `publish` standing in for the upload (tested against the test Hub
    server in tests/hub/); then the loading snippet on the exported folder in place of the repo id."""
    import hf_xfmr.hub
    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    torch.manual_seed(0)
    config = XfmrBertConfig.from_preset("tiny", vocab_size=len(wordpiece_tokenizer))
    XfmrBertForMaskedLM(config).save_pretrained(tmp_path / "runs/tiny-bert")
    wordpiece_tokenizer.save_pretrained(tmp_path / "runs/tiny-bert")
    (tmp_path / "runs/tiny-bert/log.jsonl").write_text('{"step": 10, "loss": 2.31}\n{"step": 10, "eval_loss": 2.2}\n')
    published = []

    def publish(folder, repo_id, **kwargs):
        published.append((Path(folder), repo_id))
        return types.SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    monkeypatch.setattr(hf_xfmr.hub, "publish", publish)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace = run_checking_comments(snippet("commit = publish(folder", "docs/hub.md"))
    folder = Path(namespace["folder"])
    assert published == [(folder, "alice/tiny-bert")]
    assert {"config.json", "model.safetensors", "README.md", "loss_curve.png"} <= {p.name for p in folder.iterdir()}

    code = snippet('AutoModelForMaskedLM.from_pretrained("alice/tiny-bert"', "docs/hub.md")
    namespace = run_checking_comments(code.replace('"alice/tiny-bert"', repr(str(folder))))
    assert type(namespace["model"]).__name__ == "XfmrBertForMaskedLM"
    assert len(namespace["tokenizer"]) == len(wordpiece_tokenizer)


# ----------------------------------------------------------------------------------------------------------
# Shell blocks


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a shell block as word lists: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.M))


def command_problem(words: list[str], parser_factory) -> str | None:
    """What is wrong with one command of a shell block, or None."""
    if words[0] == "make":
        missing = [t for t in words[1:] if not t.startswith("-") and t not in make_targets()]
        return f"no Makefile target {missing}" if missing else None
    if words[0] in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
        return None if (ROOT / words[1]).is_file() else f"no file {words[1]}"
    if "hf_xfmr.cli" in words:  # accelerate launch / torchrun ... -m hf_xfmr.cli COMMAND ...
        words = ["hf-xfmr", *words[words.index("hf_xfmr.cli") + 1:]]
    if words[0] != "hf-xfmr":
        return None
    argv = words[1:]
    for i, word in enumerate(argv[:-1]):  # options files are read while parsing: an empty one stands in
        if word == "--config" and not Path(argv[i + 1]).exists():
            Path(argv[i + 1]).write_text("{}\n")
    try:
        parser_factory().parse_args(argv)
    except SystemExit as exit_:
        if exit_.code not in (0, None) or not {"-h", "--help", "--version"} & set(argv):
            return f"does not parse (exit status {exit_.code})"
    return None


def test_shell_blocks_name_real_commands_scripts_and_targets(tmp_path, monkeypatch, capsys):
    from hf_xfmr.cli import build_parser

    monkeypatch.chdir(tmp_path)
    problems, checked = [], 0
    for block in all_blocks():
        if block.language not in ("bash", "sh"):
            continue
        for words in shell_commands(block.code):
            problem = command_problem(words, build_parser)
            checked += words[0] in ("hf-xfmr", "make", "python") or "hf_xfmr.cli" in words
            if problem:
                err = capsys.readouterr().err.strip().splitlines()
                problems.append(f"{block.page}:{block.line}: `{' '.join(words)}`: {problem}"
                                + (f" ({err[-1]})" if err else ""))
    assert not problems, "\n".join(problems)
    assert checked > 30


def test_command_check_catches_a_bad_flag_a_missing_script_and_a_missing_target(tmp_path, monkeypatch, capsys):
    from hf_xfmr.cli import build_parser

    monkeypatch.chdir(tmp_path)
    assert command_problem(["hf-xfmr", "convert", "a", "b", "--no-such-flag"], build_parser)
    assert command_problem(["python", "examples/no_such_script.py"], build_parser)
    assert command_problem(["make", "no-such-target"], build_parser)
    assert command_problem(["hf-xfmr", "convert", "a", "b"], build_parser) is None
    assert shell_commands("hf-xfmr a \\\n    --b c   # note\n\n# only a comment\n") == [["hf-xfmr", "a", "--b", "c"]]


# ----------------------------------------------------------------------------------------------------------
# Links

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of `page`: lower case, punctuation dropped, spaces as dashes."""
    text = FENCED.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def test_every_relative_link_points_at_a_file_and_heading():
    broken = []
    for page in doc_pages():
        source = ROOT / page
        for target in LINK.findall(FENCED.sub("", source.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (source.parent / path).resolve() if path else source
            if not linked.exists():
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme_or_the_index():
    linked = set()
    for page in ("README.md", "docs/index.md"):
        for target in LINK.findall((ROOT / page).read_text()):
            linked.add((ROOT / page).parent.joinpath(target.partition("#")[0]).resolve())
    orphans = [p for p in doc_pages()[1:] if (ROOT / p).resolve() not in linked and p != "docs/index.md"]
    assert not orphans, f"pages neither README.md nor docs/index.md links: {orphans}"


def test_readme_starts_with_the_two_commands_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    first = code_blocks("README.md")[0]
    assert first.language == "bash" and [w[:2] for w in shell_commands(first.code)] == [["make", "demo"],
                                                                                         ["make", "test"]]
    assert readme.count("\n") <= 220, "README.md is the front page: keep the manual in docs/"



# ----------------------------------------------------------------------------------------------------------
# Names of code


def test_every_dotted_hf_xfmr_name_and_script_path_exists():
    """`hf_xfmr.layers.relative_t5`, `hf_xfmr.hub.export`, `tests/models/test_bert_parity.py`: what the pages
    name in the code must exist, so a rename fails here rather than leaving the manual behind."""
    missing = []
    for page in doc_pages():
        text = (ROOT / page).read_text()
        missing += [f"{page}: {name}" for name in sorted(set(re.findall(r"\b(hf_xfmr(?:\.\w+)+)", text)))
                    if resolve(name) is None]
        for path in sorted(set(re.findall(r"(?<![\w/.-])((?:tests|examples|benchmarks|src|hf_xfmr)/[\w/.-]*\.py)\b", text))):
            if not (ROOT / path).is_file() and not (ROOT / "src" / path).is_file():
                missing.append(f"{page}: {path}")
    assert not missing, "names the pages give that do not exist:\n" + "\n".join(missing)


def resolve(dotted: str):
    """The module, or the attribute of the longest importable module prefix, that `dotted` names; None if none."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


def test_resolve_finds_modules_and_attributes_and_nothing_else():
    assert resolve("hf_xfmr.hub.export") is not None and resolve("hf_xfmr.models.registry.OBJECTIVES") is not None
    assert resolve("hf_xfmr.layers.no_such_module") is None and resolve("hf_xfmr.cli.command.NoSuchName") is None
