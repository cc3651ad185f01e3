"""The `hf-xfmr` command: help texts, `convert` round trips and errors, `bench` end to end."""

import json
import subprocess
import sys

import pytest
import torch
import transformers

from hf_xfmr import cli
from tests.cli_run import run_cli as run

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]


@pytest.fixture
def bert_checkpoint(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.BertForMaskedLM(config).eval()
    path = tmp_path / "bert"
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return path, model


def _batch():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, len(VOCAB), (2, 12), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": (input_ids % 2)}


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], ["convert", "bench"]),
        (["convert"], ["SRC", "OUT", "--to", "--task", "--overwrite", "safetensors", "tokenizer"]),
        (["bench"], ["--cases", "--suite", "--list", "--repeats", "--warmup", "--threads", "--no-memory", "--output"]),
    ],
)
def test_help(argv, expected, capsys):
    status, out, _ = run([*argv, "--help"], capsys)
    assert status == 0
    for word in expected:
        assert word in out
    assert "usage: hf-xfmr" in out


def test_convert_round_trip(bert_checkpoint, tmp_path, capsys):
    src, reference = bert_checkpoint
    ours_dir, back_dir = tmp_path / "xfmr", tmp_path / "back"

    status, out, _ = run(["convert", str(src), str(ours_dir)], capsys)
    assert status == 0, out
    assert json.loads((ours_dir / "config.json").read_text())["model_type"] == "xfmr-bert"
    assert (ours_dir / "model.safetensors").is_file()
    assert (ours_dir / "vocab.txt").read_text() == (src / "vocab.txt").read_text()
    assert (ours_dir / "tokenizer_config.json").is_file()
    assert "copied tokenizer_config.json, vocab.txt" in out

    status, out, _ = run(["convert", str(ours_dir), str(back_dir)], capsys)
    assert status == 0, out
    assert json.loads((back_dir / "config.json").read_text())["model_type"] == "bert"
    assert (back_dir / "vocab.txt").is_file()

    batch = _batch()
    ours = transformers.AutoModelForMaskedLM.from_pretrained(ours_dir).eval()
    back = transformers.BertForMaskedLM.from_pretrained(back_dir).eval()
    assert type(ours).__name__ == "XfmrBertForMaskedLM"
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = reference(**batch).logits
        # ours unpads by default: equal at real positions; with unpad_inputs=False at every position
        torch.testing.assert_close(ours(**batch).logits[real], expected[real], atol=1e-6, rtol=0)
        ours.config.unpad_inputs = False
        torch.testing.assert_close(ours(**batch).logits, expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(back(**batch).logits, expected, atol=1e-6, rtol=0)
    back_state = back.state_dict()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(back_state[key], value, atol=0, rtol=0)


def test_convert_task_base(bert_checkpoint, tmp_path, capsys):
    src, reference = bert_checkpoint
    status, out, err = run(["convert", str(src), str(tmp_path / "enc"), "--task", "base"], capsys)
    assert status == 0, err
    # An MLM checkpoint has no pooler: the one written is random, and the command says so.
    (warning,) = [line for line in err.splitlines() if "warning:" in line]
    assert warning.startswith("hf-xfmr convert: warning:")
    assert "randomly initialised" in warning and "pooler.dense.weight" in warning and "pooler_output" in warning
    assert "LOAD REPORT" not in err  # transformers' own table is replaced by that one line
    config = json.loads((tmp_path / "enc" / "config.json").read_text())
    assert config["architectures"] == ["XfmrBertModel"]
    encoder = transformers.AutoModel.from_pretrained(tmp_path / "enc").eval()
    batch = _batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = reference.bert(**batch).last_hidden_state
        torch.testing.assert_close(encoder(**batch).last_hidden_state[real], expected[real], atol=1e-6, rtol=0)
        encoder.config.unpad_inputs = False  # the reference's padded path: every position
        torch.testing.assert_close(encoder(**batch).last_hidden_state, expected, atol=1e-6, rtol=0)


def test_convert_task_base_with_a_pooler_is_silent(tmp_path, capsys):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(tmp_path / "base")
    status, _, err = run(["convert", str(tmp_path / "base"), str(tmp_path / "out"), "--task", "base"], capsys)
    assert status == 0, err
    assert "warning" not in err


def test_convert_task_choices_come_from_the_registry(capsys):
    from hf_xfmr.models import supported_tasks

    parser = cli.build_parser()
    convert = parser._subparsers._group_actions[0].choices["convert"]
    (task,) = [a for a in convert._actions if a.dest == "task"]
    assert list(task.choices) == supported_tasks()
    status, _, err = run(["convert", "a", "b", "--task", "no-such-task"], capsys)
    assert status == 2 and "invalid choice" in err


def _write_config(path, **config):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("file", "is not a directory"),
        ("no-config", "has no config.json"),
        ("bad-json", "is not valid JSON"),
        ("unknown-type", "unknown model type 'not-a-model'"),
        ("unsupported-type", "cannot convert"),
        ("already-xfmr", "already an hf_xfmr checkpoint"),
        ("out-not-empty", "is not empty; pass --overwrite"),
        ("out-is-file", "OUT {out} is an existing file, not a folder"),
        ("out-is-file-overwrite", "OUT {out} is an existing file, not a folder"),
        ("out-under-file", "cannot create OUT {out}: {file} is a file"),
        ("truncated-weights", "model.safetensors is not a valid safetensors file"),
        ("empty-weights", "model.safetensors is not a valid safetensors file (0 bytes"),
        ("no-weights", "has no model.safetensors: hf_xfmr reads safetensors weights only"),
        ("config-does-not-match", "do not match the sizes in its config.json"),
        ("config-vocab-does-not-match", "(99, 32) in the weights, (120, 32) from config.json"),
    ],
)
def test_convert_errors(case, message, bert_checkpoint, tmp_path, capsys):
    src, _ = bert_checkpoint
    out = tmp_path / "out"
    extra = []
    if case == "missing":
        src = tmp_path / "missing"
    elif case == "file":
        src = tmp_path / "file.bin"
        src.write_text("x")
    elif case == "no-config":
        src = tmp_path / "empty"
        src.mkdir()
    elif case == "bad-json":
        src = tmp_path / "bad"
        src.mkdir()
        (src / "config.json").write_text("{not json")
    elif case == "unknown-type":
        src = _write_config(tmp_path / "unknown", model_type="not-a-model")
    elif case == "unsupported-type":
        src = tmp_path / "t5"
        transformers.T5Config(d_model=8, d_ff=16, num_layers=1, num_heads=1, d_kv=8, vocab_size=32).save_pretrained(src)
    elif case == "already-xfmr":
        src = _write_config(tmp_path / "ours", model_type="xfmr-bert", architectures=["XfmrBertForMaskedLM"])
        extra = ["--to", "xfmr"]
    elif case == "out-not-empty":
        out.mkdir()
        (out / "keep.txt").write_text("x")
    elif case.startswith("out-is-file"):
        out = tmp_path / "out.txt"
        out.write_text("x")
        extra = ["--overwrite"] if case.endswith("overwrite") else []
    elif case == "out-under-file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    elif case.endswith("-weights"):
        src = _copy_checkpoint(src, tmp_path / case)
        weights = src / "model.safetensors"
        if case == "no-weights":
            weights.unlink()
        else:
            data = weights.read_bytes()
            weights.write_bytes(data[: len(data) // 2] if case == "truncated-weights" else b"")
    elif case.startswith("config-"):
        src = _copy_checkpoint(src, tmp_path / case)
        config = json.loads((src / "config.json").read_text())
        if case == "config-does-not-match":
            config.update(hidden_size=64, num_attention_heads=4)
        else:
            config.update(vocab_size=120)
        (src / "config.json").write_text(json.dumps(config))
    status, _, err = run(["convert", str(src), str(out), *extra], capsys)
    assert status == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("hf-xfmr convert: error:") and message.format(out=out, file=tmp_path / "file") in last
    assert "Traceback" not in err and "usage:" not in err
    assert not out.is_dir() or case == "out-not-empty"


def _copy_checkpoint(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_debug_shows_the_traceback(tmp_path, capsys):
    for argv in (["--debug", "convert", str(tmp_path / "missing"), str(tmp_path / "out")],
                 ["convert", str(tmp_path / "missing"), str(tmp_path / "out"), "--debug"]):
        status, _, err = run(argv, capsys)
        assert status == 2
        assert "Traceback (most recent call last)" in err and "CommandError" in err
        assert err.strip().splitlines()[-1].startswith("hf-xfmr convert: error:")


def test_unexpected_errors_are_one_line_unless_debug(monkeypatch, capsys):
    def _add_boom(subparsers):
        cli.add_parser(subparsers, "boom", help="fail", description="Fail.", func=_run_boom)

    def _run_boom(args):
        raise RuntimeError("something broke")

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, _add_boom))
    status, _, err = run(["boom"], capsys)
    assert status == 1
    assert err.strip().splitlines() == [
        "hf-xfmr boom: error: unexpected RuntimeError: something broke (this is a bug in hf-xfmr; rerun with "
        "--debug for the traceback and report it)"
    ]
    with pytest.raises(RuntimeError, match="something broke"):
        cli.main(["boom", "--debug"])


def test_convert_error_from_the_console(tmp_path):
    # The real entry point: exit status 2 and a one-line error, no traceback.
    proc = subprocess.run(
        [sys.executable, "-m", "hf_xfmr.cli", "convert", str(tmp_path / "missing"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"hf-xfmr convert: error: {tmp_path / 'missing'} does not exist"
    assert "Traceback" not in proc.stderr


def test_bench_list(capsys):
    status, out, _ = run(["bench", "--list"], capsys)
    assert status == 0
    for name in ["bert-mlm-train", "bert-mlm-train-bf16", "bert-mlm-infer", "roberta-mlm-train", "collators"]:
        assert name in out
    assert "suite quick:" in out
    assert "toy-mlp" not in out  # test-only cases are not offered to users


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cases", "nope"], "unknown case(s) nope"),
        (["--cases", "toy-mlp", "--tiny"], "unknown case(s) toy-mlp"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--suite", "quick", "--cases", "bert-mlm-train"], "not allowed with argument"),
    ],
)
def test_bench_bad_input(argv, message, capsys):
    status, _, err = run(["bench", *argv], capsys)
    assert status == 2 and "hf-xfmr bench: error:" in err and message in err


def test_bench_writes_results(tmp_path, capsys):
    argv = ["bench", "--cases", "bert-mlm-train", "--tiny", "--repeats", "2", "--warmup", "0", "--threads", "1"]
    status, out, err = run([*argv, "--output", str(tmp_path)], capsys)
    assert status == 0, err
    assert "| bert-mlm-train | train | fp32 |" in out
    assert (tmp_path / "models.md").read_text() in out
    results = json.loads((tmp_path / "models.json").read_text())
    assert results["environment"]["threads"] == 1 and results["tiny"] is True
    (row,) = results["results"]
    assert row["repeats"] == 2 and row["memory"]["ours"]["peak_mb"] >= 0
    assert row["params"]["hidden"] == 32


def test_bench_runs_the_collator_benchmark(tmp_path, capsys):
    argv = ["bench", "--cases", "collators", "--tiny", "--repeats", "2", "--warmup", "0", "--threads", "1"]
    status, out, err = run([*argv, "--output", str(tmp_path)], capsys)
    assert status == 0, err
    assert "DataCollatorForPermutationLanguageModeling" in out and "DataCollatorForLanguageModeling" in out
    assert (tmp_path / "collators.md").read_text() in out
    rows = json.loads((tmp_path / "collators.json").read_text())["results"]
    assert {"plm", "mlm"} <= {row["name"].split()[0] for row in rows}
    assert all(row["ours_per_s"] > 0 and row["ref_per_s"] > 0 for row in rows)


def test_adding_a_command_is_one_function(monkeypatch, capsys):
    def _add_hello(subparsers):
        parser = cli.add_parser(subparsers, "hello", help="say hello", description="Say hello.", func=_run_hello)
        parser.add_argument("--name", default="world", help="who to greet")

    def _run_hello(args):
        if args.name == "":
            raise cli.CommandError("--name must not be empty")
        print(f"hello {args.name}")
        return 0

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, _add_hello))
    assert run(["hello", "--name", "bert"], capsys)[:2] == (0, "hello bert\n")
    status, _, err = run(["hello", "--name", ""], capsys)
    assert status == 2 and "hf-xfmr hello: error: --name must not be empty" in err


def test_bench_output_that_is_a_file_fails_before_running(tmp_path, monkeypatch, capsys):
    from hf_xfmr import bench

    monkeypatch.setattr(bench, "measure_case", lambda *a, **k: pytest.fail("must fail before measuring"))
    (tmp_path / "results").write_text("x")
    status, _, err = run(["bench", "--cases", "bert-mlm-infer", "--tiny", "--output", str(tmp_path / "results")],
                         capsys)
    assert status == 2
    assert err.strip().splitlines()[-1] == f"hf-xfmr bench: error: --output {tmp_path / 'results'} is a file; pass " \
                                           "a folder (created if missing)"


def test_pretrain_output_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "out").write_text("x")
    status, _, err = run(["pretrain", "--arch", "bert", "--preset", "tiny", "--max_steps", "1",
                          "--output_dir", str(tmp_path / "out")], capsys)
    assert status == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"hf-xfmr pretrain: error: --output_dir {tmp_path / 'out'} is a file, "
                                            "not a folder: choose another path.")


@pytest.mark.parametrize("error, status, message", [
    (NotADirectoryError(20, "Not a directory", "/x/file/sub"), 2, "cannot use /x/file/sub: Not a directory"),
    (PermissionError(13, "Permission denied", "/root/out"), 2, "cannot use /root/out: Permission denied"),
    (OSError(28, "No space left on device", "/out/model.safetensors"), 2,
     "cannot use /out/model.safetensors: No space left on device"),
    (OSError("no path involved"), 1, "unexpected OSError: no path involved (this is a bug"),
])
def test_filesystem_errors_of_any_command_are_one_line(error, status, message, monkeypatch, capsys):
    def _add_write(subparsers):
        cli.add_parser(subparsers, "write", help="write", description="Write.", func=_run_write)

    def _run_write(args):
        raise error

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, _add_write))
    got, _, err = run(["write"], capsys)
    assert got == status
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"hf-xfmr write: error: {message}")
    with pytest.raises(type(error)):
        cli.main(["write", "--debug"])


@pytest.mark.parametrize("arch", ["roberta", "albert", "distilbert"])
def test_convert_task_base_from_an_mlm_checkpoint_of_other_encoders(arch, tmp_path, capsys):
    # Only a pooler the checkpoint lacks is reported (RoBERTa, ALBERT); DistilBERT has none to report.
    torch.manual_seed(0)
    sizes = dict(vocab_size=len(VOCAB), max_position_embeddings=66)
    if arch == "distilbert":
        config = transformers.DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=37, **sizes)
        model = transformers.DistilBertForMaskedLM(config)
    else:
        sizes.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
        config = (transformers.RobertaConfig(**sizes) if arch == "roberta"
                  else transformers.AlbertConfig(embedding_size=16, **sizes))
        model = getattr(transformers, f"{type(config).__name__[:-6]}ForMaskedLM")(config)
    model.save_pretrained(tmp_path / "mlm")
    status, out, err = run(["convert", str(tmp_path / "mlm"), str(tmp_path / "enc"), "--task", "base"], capsys)
    assert status == 0, err
    warnings_ = [line for line in err.splitlines() if "warning:" in line]
    if arch == "distilbert":
        assert warnings_ == []
    else:
        (warning,) = warnings_
        assert "randomly initialised" in warning and "pooler" in warning


def test_every_offered_task_is_convertible_by_some_architecture():
    # `--task` offers exactly the tasks some converter handles: no choice that nothing supports.
    from hf_xfmr.models import supported_tasks
    from hf_xfmr.models.conversion import conversions

    convertible = {task for conversion in conversions() for task in conversion.tasks}
    assert set(supported_tasks()) == convertible


# -- the command line as one package: help without torch, both spellings, --config everywhere ----------------

COMMAND_NAMES = ["pretrain", "finetune", "convert", "bench", "export", "publish", "distill"]
HEAVY = ("torch", "transformers", "accelerate", "datasets", "peft")


def _heavy(modules) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("hf_xfmr.models"))


@pytest.mark.parametrize("argv", [[], *[[name] for name in COMMAND_NAMES]])
def test_help_imports_no_torch(argv):
    """`hf-xfmr [<command>] --help` in a fresh process imports neither torch nor transformers nor the model
    registry (it is what made --help take seconds). The process starts as the console script does: argv[0]
    names `hf-xfmr` when `hf_xfmr` is imported."""
    code = ("import sys\n"
            f"sys.argv = ['hf-xfmr', *{argv!r}, '--help']\n"
            "from hf_xfmr.cli import main\n"
            "try:\n    main()\nexcept SystemExit as exit_:\n    assert exit_.code == 0, exit_.code\n"
            "print('IMPORTED:', *sorted(sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: hf-xfmr" in proc.stdout
    modules = proc.stdout.rsplit("IMPORTED:", 1)[1].split()
    assert "hf_xfmr.cli" in modules and _heavy(modules) == []


def test_help_through_python_m_imports_no_torch():
    """The same through `python -m hf_xfmr.cli` (as `accelerate launch -m hf_xfmr.cli` starts it); -X importtime
    lists every module the process imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hf_xfmr.cli", "pretrain", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "hf_xfmr.cli" in imported and _heavy(imported) == []


def test_a_plain_import_registers_and_training_names_stay_functions():
    """Outside the command, `import hf_xfmr` registers every architecture at once; the lazy `hf_xfmr.training`
    still gives the functions `pretrain` / `finetune` after their modules of the same name were imported."""
    code = ("import types, hf_xfmr, transformers\n"
            "assert 'xfmr-bert' in transformers.CONFIG_MAPPING\n"
            "import hf_xfmr.training.pretrain, hf_xfmr.training.finetune\n"
            "from hf_xfmr.training import PretrainArguments, finetune, pretrain\n"
            "assert callable(pretrain) and not isinstance(pretrain, types.ModuleType), pretrain\n"
            "assert callable(finetune) and not isinstance(finetune, types.ModuleType), finetune\n"
            "assert hf_xfmr.from_transformers.__module__ == 'hf_xfmr.models.conversion'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_help_catalog_equals_the_registries():
    """The names --help shows without importing the registries are the registries' own."""
    from hf_xfmr.cli import catalog
    from hf_xfmr.models import architectures, supported_tasks
    from hf_xfmr.training.objectives import available_objectives

    assert catalog.ARCHITECTURE_OBJECTIVES == tuple((a.name, tuple(a.objectives)) for a in architectures())
    assert catalog.OBJECTIVES == tuple(available_objectives())
    assert list(catalog.TASKS) == supported_tasks()


def _subparsers():
    return cli.build_parser()._subparsers._group_actions[0].choices


def test_every_option_of_every_command_has_both_spellings():
    for name, parser in _subparsers().items():
        for action in parser._actions:
            flags = [s for s in action.option_strings if s.startswith("--")]
            for flag in flags:
                body = flag[2:]
                assert f"--{body.replace('_', '-')}" in flags and f"--{body.replace('-', '_')}" in flags, (name, flag)
            assert action.option_strings == [] or "--config" in {a.option_strings[0] for a in parser._actions
                                                                  if a.option_strings}, name


@pytest.mark.parametrize("command, config, argv, expected", [
    ("bench", "list: true\n", [], {"list": True}),
    ("convert", '{"to": "transformers", "overwrite": true}', ["SRC", "OUT"],
     {"src": "SRC", "to": "transformers", "overwrite": True}),
    ("pretrain", "max-steps: 5\nlearning_rate: 1e-3\narch: roberta\n", ["--max_steps", "7"],
     {"max_steps": 7, "learning_rate": 1e-3, "arch": "roberta"}),
    ("distill", "teacher: T\noutput: O\nlayer_ids: 0,2\nlr: 1e-3\n", ["--lr", "0.1"],
     {"teacher": "T", "output_dir": "O", "student_layer_ids": [0, 2], "learning_rate": 0.1}),
    ("publish", '{"repo-id": "alice/x", "private": true, "max_retries": "5"}', ["F"],
     {"repo_id": "alice/x", "private": True, "max_retries": 5}),
    ("export", "metric: [accuracy=0.9]\nmax_shard_size: 2GB\n", ["C", "F", "--max-shard-size", "1GB"],
     {"metric": ["accuracy=0.9"], "max_shard_size": "1GB"}),
])
def test_config_works_the_same_for_every_command(command, config, argv, expected, tmp_path):
    """--config FILE (YAML, or JSON for .json) sets any option of any command, by any of its names; options
    given on the command line win."""
    from hf_xfmr.cli.command import settings_from

    path = tmp_path / ("options.json" if config.startswith("{") else "options.yaml")
    path.write_text(config)
    args = cli.build_parser().parse_args([command, *argv, "--config", str(path)])
    (declared,) = [c for c in cli.COMMANDS if getattr(c, "name", None) == command]
    options = settings_from(declared.arguments, args)
    assert {key: getattr(options, key) for key in expected} == expected


@pytest.mark.parametrize("argv, config, message", [
    (["distill"], None, "the following arguments are required: --teacher, --output_dir/--output-dir/--output"),
    (["bench"], "repeats: many\n", "repeats must be an integer"),
    (["bench"], "repeat: 2\n", "Unknown setting(s) in"),
    (["bench"], "- 1\n", "must hold a mapping"),
    (["bench"], None, "does not exist"),
])
def test_config_and_required_errors_are_command_errors(argv, config, message, tmp_path, capsys):
    path = tmp_path / "options.yaml"
    if config is not None:
        path.write_text(config)
    extra = ["--config", str(path)] if config is not None or argv == ["bench"] else []
    status, _, err = run([*argv, *extra], capsys)
    assert status == 2 and f"hf-xfmr {argv[0]}: error:" in err and message in err, err
