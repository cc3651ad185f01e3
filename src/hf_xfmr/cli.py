"""The `hf-xfmr` command.

Each subcommand is one `_add_<name>(subparsers)` function that declares its arguments and sets
`func` (what runs it); `COMMANDS` lists them. Adding a command = one function + one line in `COMMANDS`.

A command reports bad input by raising `CommandError`; `main` prints it argparse-style
(`hf-xfmr <command>: error: ...`) and exits with status 2, without a traceback.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

PROG = "hf-xfmr"


class CommandError(Exception):
    """Bad input to a command: printed as `hf-xfmr <command>: error: <message>`, exit status 2."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the hand-made line breaks of descriptions and epilogs (defaults are stated in each help)."""


def _add_parser(subparsers, name: str, *, help: str, description: str, epilog: str = "", func: Callable):
    parser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog, formatter_class=_HelpFormatter
    )
    parser.set_defaults(func=func, command_parser=parser)
    return parser


# ----------------------------------------------------------------------------------------------
# hf-xfmr convert
# ----------------------------------------------------------------------------------------------

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "chat_template.jinja",
)


def _read_config(src: Path) -> dict[str, Any]:
    if not src.exists():
        raise CommandError(f"{src} does not exist")
    if not src.is_dir():
        raise CommandError(f"{src} is not a directory (expected a checkpoint folder with config.json)")
    config_file = src / "config.json"
    if not config_file.is_file():
        raise CommandError(f"{src} has no config.json: it is not a saved transformers or hf_xfmr checkpoint")
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise CommandError(f"{config_file} is not valid JSON: {err}") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise CommandError(f"{config_file} has no model_type")
    return config


def _run_convert(args: argparse.Namespace) -> int:
    from transformers import CONFIG_MAPPING

    import hf_xfmr
    from hf_xfmr.models.conversion import load_checkpoint

    src, out = Path(args.src), Path(args.out)
    config = _read_config(src)
    model_type = config["model_type"]
    if model_type not in CONFIG_MAPPING:
        known = sorted(t for t in CONFIG_MAPPING if t.startswith("xfmr-"))
        raise CommandError(
            f"unknown model type {model_type!r} in {src / 'config.json'} "
            f"(hf_xfmr model types: {', '.join(known)})"
        )
    is_ours = model_type.startswith("xfmr-")
    direction = args.to or ("transformers" if is_ours else "xfmr")
    if (direction == "xfmr") == is_ours:
        kind = "an hf_xfmr" if is_ours else "a transformers"
        raise CommandError(f"{src} is already {kind} checkpoint (model_type {model_type!r}); nothing to convert")
    if out.resolve() == src.resolve():
        raise CommandError("OUT must differ from SRC")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise CommandError(f"{out} exists and is not empty; pass --overwrite to write into it")

    try:
        if direction == "xfmr":
            model = hf_xfmr.from_transformers(src, task=args.task)
        else:
            model = hf_xfmr.to_transformers(load_checkpoint(src, task=args.task))
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        # The converters raise these with a message meant for the user (unsupported architecture/head,
        # missing weights): show it as a command error rather than a traceback.
        raise CommandError(f"cannot convert {src}: {err}") from None

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    copied = [name for name in TOKENIZER_FILES if (src / name).is_file()]
    for name in copied:
        shutil.copy2(src / name, out / name)
    print(
        f"converted {type(model).__name__} ({model_type} -> {model.config.model_type}) to {out}"
        + (f"; copied {', '.join(copied)}" if copied else "")
    )
    return 0


def _add_convert(subparsers) -> None:
    import hf_xfmr  # noqa: F401  (registers the architectures, hence their tasks)
    from hf_xfmr.models import supported_tasks

    parser = _add_parser(
        subparsers,
        "convert",
        help="convert a checkpoint between the transformers and hf_xfmr formats",
        description=(
            "Convert a local checkpoint folder between the transformers format (e.g. model_type 'bert')\n"
            "and the hf_xfmr format (model_type 'xfmr-bert'). The direction follows SRC's config.json:\n"
            "'xfmr-*' model types become transformers checkpoints, others become hf_xfmr checkpoints.\n"
            "Weights are saved as safetensors; tokenizer files found in SRC are copied to OUT."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr convert ./bert-base-uncased ./bert-base-xfmr\n"
            "  hf-xfmr convert ./bert-base-xfmr ./bert-back --to transformers\n"
            "  hf-xfmr convert ./my-bert ./my-bert-encoder --task base"
        ),
        func=_run_convert,
    )
    parser.add_argument("src", metavar="SRC", help="checkpoint folder (config.json + weights)")
    parser.add_argument("out", metavar="OUT", help="output folder (created; must be empty unless --overwrite)")
    parser.add_argument(
        "--to",
        choices=("xfmr", "transformers"),
        default=None,
        help="target format; default: the opposite of SRC's format",
    )
    parser.add_argument(
        "--task",
        choices=supported_tasks(),
        default=None,
        help="head to convert to; default: SRC's own head (from config.json 'architectures')",
    )
    parser.add_argument("--overwrite", action="store_true", help="allow writing into a non-empty OUT")


# ----------------------------------------------------------------------------------------------
# hf-xfmr bench
# ----------------------------------------------------------------------------------------------

COLLATORS = "collators"  # pseudo-case: the data collator benchmark (hf_xfmr.data.bench)


def _run_collator_benchmark(args: argparse.Namespace, threads: int, tiny: bool) -> list[dict[str, Any]]:
    from hf_xfmr.data.bench import benchmark_collators

    sizes = {"batch_size": 2, "seq_len": 64} if tiny else {}
    repeats = args.repeats if args.repeats is not None else (5 if tiny else 40)
    return benchmark_collators(**sizes, repeats=repeats, warmup=args.warmup, num_threads=threads)


def _selected_cases(args: argparse.Namespace) -> tuple[list[tuple[str, dict]], bool, bool]:
    """(cases with overrides, whether the collator benchmark runs, whether sizes are tiny)."""
    from hf_xfmr import benchmark

    if args.cases:
        names = [name for item in args.cases for name in item.split(",") if name]
        unknown = [n for n in names if n not in benchmark.CASES and n != COLLATORS]
        if unknown:
            known = ", ".join(sorted(benchmark.CASES) + [COLLATORS])
            raise CommandError(f"unknown case(s) {', '.join(unknown)}; known: {known} (see --list)")
        overrides = dict(benchmark.TINY_SIZES) if args.tiny else {}
        return [(n, overrides) for n in names if n != COLLATORS], COLLATORS in names, args.tiny
    suite = args.suite or "all"
    tiny = args.tiny or suite == "quick"
    cases = [(n, {**kw, **(benchmark.TINY_SIZES if tiny else {})}) for n, kw in benchmark.SUITES[suite]]
    return cases, True, tiny


def _run_bench(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from hf_xfmr import benchmark

    if args.list:
        width = max(map(len, [*benchmark.CASES, COLLATORS]))
        for name in sorted(benchmark.CASES):
            print(f"{name:<{width}}  {benchmark.case_summary(name)}")
        print(f"{COLLATORS:<{width}}  data collator throughput, ours vs transformers' (hf_xfmr.data.bench)")
        for suite, cases in benchmark.SUITES.items():
            print(f"suite {suite}: {', '.join(n for n, _ in cases)}, {COLLATORS}")
        return 0
    if args.repeats is not None and args.repeats < 1:
        raise CommandError("--repeats must be >= 1")
    if args.warmup < 0:
        raise CommandError("--warmup must be >= 0")
    if args.threads is not None and args.threads < 1:
        raise CommandError("--threads must be >= 1")

    cases, with_collators, tiny = _selected_cases(args)
    repeats = args.repeats or (3 if tiny else 7)
    # Tiny models gain nothing from threads, and a busy 2-core machine makes OpenMP barriers stall.
    threads = args.threads or (1 if tiny else torch.get_num_threads())
    results = []
    for name, overrides in tqdm(cases, desc="bench", unit="case", file=sys.stderr, disable=not cases):
        try:
            case = benchmark.make_case(name, **overrides)
        except ValueError as err:
            raise CommandError(f"case {name}: {err}") from None
        results.append(
            benchmark.measure_case(
                case, repeats=repeats, warmup=args.warmup, threads=threads, memory=not args.no_memory, progress=True
            )
        )
    out = Path(args.output) if args.output else None
    if results:
        table = benchmark.to_markdown(results)
        print(table)
        if out:
            benchmark.to_json(results, out / "models.json", suite=args.suite, tiny=tiny)
            (out / "models.md").write_text(table)

    if with_collators:
        from hf_xfmr.data.bench import markdown_table

        rows = _run_collator_benchmark(args, threads, tiny)
        text = markdown_table(rows)
        print(text)
        if out:
            benchmark.to_json(rows, out / "collators.json")
            (out / "collators.md").write_text(text)
    if out:
        print(f"results written to {out}/", file=sys.stderr)
    return 0


def _add_bench(subparsers) -> None:
    parser = _add_parser(
        subparsers,
        "bench",
        help="speed and memory side by side with the transformers reference models",
        description=(
            "Time each case's hf_xfmr model against its transformers reference (same weights, same batch):\n"
            "warm-up steps first, then the two sides alternate step by step; the table shows median step\n"
            "times and speed ratio = ref / ours (> 1: ours faster). Peak memory is the growth during one\n"
            "step, measured for each side in its own process (RSS high-water mark on CPU,\n"
            "max_memory_allocated on CUDA); memory ratio = ref / ours (> 1: ours uses less)."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr bench --suite quick              # tiny sizes, a few seconds\n"
            "  hf-xfmr bench --cases bert-mlm-train bert-mlm-infer --repeats 7 --output benchmarks/results\n"
            "  hf-xfmr bench --list"
        ),
        func=_run_bench,
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--cases", nargs="+", metavar="NAME", help="cases to run (space or comma separated; see --list)"
    )
    which.add_argument(
        "--suite",
        choices=("all", "quick"),
        default=None,
        help="named set of cases: 'all' at full size, 'quick' at tiny sizes (default: all)",
    )
    which.add_argument("--list", action="store_true", help="list the cases and suites, then exit")
    parser.add_argument("--tiny", action="store_true", help="run the chosen cases at the tiny sizes of --suite quick")
    parser.add_argument(
        "--repeats", type=int, default=None, metavar="N", help="timed steps per side (default: 7, or 3 with tiny sizes)"
    )
    parser.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed steps per side before timing (default: 1)")
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch threads (default: torch.get_num_threads(); 1 with tiny sizes)",
    )  # fmt: skip
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument(
        "--output", metavar="DIR", default=None, help="write models.json and models.md (and collators.*) into DIR"
    )


# ----------------------------------------------------------------------------------------------
# hf-xfmr export / publish
# ----------------------------------------------------------------------------------------------


def _key_values(items: list[str] | None, option: str, number: bool) -> dict[str, Any]:
    """["a=1", "b=x"] -> {"a": 1, "b": "x"} (numbers required when `number`)."""
    result: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise CommandError(f"{option} takes NAME=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if number and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise CommandError(f"{option} {key}: the value must be a number, got {raw!r}")
        result[key] = value
    return result


def _run_export(args: argparse.Namespace) -> int:
    import hf_xfmr
    from hf_xfmr.hub import ExportError, export
    from hf_xfmr.models.conversion import load_checkpoint

    src, out = Path(args.checkpoint), Path(args.folder)
    metrics = _key_values(args.metric, "--metric", number=True) or None
    training = _key_values(args.training, "--training", number=False) or None
    config = _read_config(src)
    try:
        model = load_checkpoint(src, task=args.task)
        if not config["model_type"].startswith("xfmr-"):
            model = hf_xfmr.from_transformers(model)
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        raise CommandError(f"cannot load {src}: {err}") from None
    model.eval()

    tokenizer_path = Path(args.tokenizer) if args.tokenizer else src
    tokenizer = None
    if args.tokenizer or any((src / name).is_file() for name in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        except (OSError, ValueError) as err:
            raise CommandError(f"cannot load the tokenizer from {tokenizer_path}: {err}") from None
    else:
        print(f"warning: no tokenizer files in {src} and no --tokenizer: exporting without a tokenizer",
              file=sys.stderr)

    import warnings

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="exporting without a tokenizer")  # said above already
            folder = export(
                model, tokenizer, out, repo_id=args.repo_id,
                title=args.title, description=args.description, license=args.license, language=args.language,
                datasets=args.dataset or (), base_model=args.base_model, tags=args.tag or (),
                metrics=metrics, eval_dataset=args.eval_dataset, eval_dataset_config=args.eval_dataset_config,
                eval_split=args.eval_split, training=training,
                training_logs=args.training_log, max_shard_size=args.max_shard_size, overwrite=args.overwrite,
            )
    except ExportError as err:
        raise CommandError(str(err)) from None
    files = sorted(p.name for p in folder.iterdir())
    print(f"exported {type(model).__name__} ({model.config.model_type}) to {folder}: {', '.join(files)}")
    return 0


def _add_export(subparsers) -> None:
    import hf_xfmr  # noqa: F401  (registers the architectures, hence their tasks)
    from hf_xfmr.models import supported_tasks

    parser = _add_parser(
        subparsers,
        "export",
        help="write a self-contained, Hub-ready folder (weights, generated code, tokenizer, model card)",
        description=(
            "Export a checkpoint folder as a flat folder that loads with\n"
            "  AutoModel...from_pretrained(FOLDER_OR_REPO, trust_remote_code=True)\n"
            "even where hf_xfmr is not installed: config.json with an auto_map for every Auto class,\n"
            "model.safetensors (sharded with an index when large), generated configuration_<type>.py and\n"
            "modeling_<type>.py, the tokenizer files, generation_config.json for generative models, and a\n"
            "README.md model card (with the loss curves of --training-log files as loss_curve.png).\n"
            "CHECKPOINT may be an hf_xfmr checkpoint or a transformers one (converted on the way)."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr export ./runs/bert-mlm ./export/bert-mlm --training-log ./runs/bert-mlm/log.jsonl\n"
            "  hf-xfmr export ./runs/sst2 ./export/sst2 --dataset glue --metric accuracy=0.91 \\\n"
            "      --eval-dataset glue --eval-dataset-config sst2 --eval-split validation\n"
            "  hf-xfmr export ./bert-base-uncased ./export/bert-base --task masked-lm"
        ),
        func=_run_export,
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint folder (config.json + safetensors)")
    parser.add_argument("folder", metavar="FOLDER", help="output folder (new or empty, or a previous export with --overwrite)")
    parser.add_argument("--task", choices=supported_tasks(), default=None,
                        help="head to export; default: CHECKPOINT's own (config.json 'architectures')")
    parser.add_argument("--tokenizer", metavar="PATH", default=None,
                        help="tokenizer folder; default: CHECKPOINT when it holds tokenizer files")
    parser.add_argument("--repo-id", metavar="OWNER/NAME", default=None,
                        help="the Hub repo it will be published to (used in the card's code; publish fills it in otherwise)")
    parser.add_argument("--title", default=None, help="model card title (default: FOLDER's name)")
    parser.add_argument("--description", default=None, help="model card opening paragraph")
    parser.add_argument("--license", default="apache-2.0", help="license id for the card metadata (default: apache-2.0)")
    parser.add_argument("--language", nargs="+", default=None, metavar="LANG", help="language codes, e.g. en")
    parser.add_argument("--dataset", action="append", metavar="ID", help="training dataset Hub id (repeatable)")
    parser.add_argument("--base-model", metavar="ID", default=None, help="Hub id of the model this one was finetuned from")
    parser.add_argument("--tag", action="append", metavar="TAG", help="extra card tag (repeatable)")
    parser.add_argument("--metric", action="append", metavar="NAME=VALUE",
                        help="evaluation result for the card's model-index (repeatable; needs --eval-dataset)")
    parser.add_argument("--eval-dataset", metavar="ID", default=None, help="Hub id of the dataset the metrics come from")
    parser.add_argument("--eval-dataset-config", metavar="NAME", default=None, help="its configuration, e.g. sst2")
    parser.add_argument("--eval-split", metavar="SPLIT", default=None, help="its split, e.g. validation")
    parser.add_argument("--training", action="append", metavar="KEY=VALUE",
                        help="training setting shown in the card, e.g. learning_rate=5e-4 (repeatable)")
    parser.add_argument("--training-log", nargs="+", metavar="FILE", default=None,
                        help="JSON-lines training logs (Trainer log_history records) to plot into loss_curve.png")
    parser.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                        help="largest weights file before sharding, e.g. 2GB (default: 5GB)")
    parser.add_argument("--overwrite", action="store_true", help="replace FOLDER if it holds a previous export")


def _run_publish(args: argparse.Namespace) -> int:
    from hf_xfmr.hub import PublishError, publish

    try:
        commit = publish(
            args.folder, args.repo_id, revision=args.revision, private=True if args.private else None,
            create_pr=args.create_pr, commit_message=args.commit_message, max_retries=args.max_retries,
            delete_stale=not args.keep_stale,
        )
    except PublishError as err:
        raise CommandError(str(err)) from None
    where = f"{args.repo_id}@{args.revision or 'main'}"
    if commit.pr_url:
        print(f"opened a pull request on {where}: {commit.pr_url}")
    else:
        print(f"published {args.folder} to {where}: {commit.commit_url}")
    return 0


def _add_publish(subparsers) -> None:
    parser = _add_parser(
        subparsers,
        "publish",
        help="upload an exported folder to the Hugging Face Hub in one commit",
        description=(
            "Upload FOLDER (written by `hf-xfmr export`) to the Hub repository --repo-id, creating it if needed,\n"
            "in ONE commit: large files go up first (Xet, or LFS with HF_HUB_DISABLE_XET=1), and the commit is\n"
            "made only when all of them arrived. Unchanged files are not uploaded again; files of an earlier\n"
            "publish that FOLDER no longer has are deleted in the same commit. Transient failures are retried.\n"
            "The token comes from HF_TOKEN or `hf auth login` (never printed); HF_ENDPOINT picks the Hub."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr publish ./export/bert-mlm --repo-id alice/tiny-bert\n"
            "  hf-xfmr publish ./export/sst2 --repo-id my-org/bert-sst2 --private\n"
            "  hf-xfmr publish ./export/sst2 --repo-id my-org/bert-sst2 --revision v2 --create-pr"
        ),
        func=_run_publish,
    )
    parser.add_argument("folder", metavar="FOLDER", help="exported folder (hf-xfmr export)")
    parser.add_argument("--repo-id", required=True, metavar="OWNER/NAME", help="Hub repository, e.g. alice/tiny-bert")
    parser.add_argument("--revision", default=None, metavar="BRANCH",
                        help="branch to commit to, created from main if missing (default: main)")
    parser.add_argument("--private", action="store_true", help="create the repository as private (if it is new)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing directly")
    parser.add_argument("--commit-message", default=None, help="commit message (default: 'Upload <class> with hf_xfmr')")
    parser.add_argument("--keep-stale", action="store_true",
                        help="keep repository files that FOLDER does not have (default: delete them in the commit)")
    parser.add_argument("--max-retries", type=int, default=3, metavar="N",
                        help="retries of transient failures: timeouts, connection errors, HTTP 408/429/5xx (default: 3)")


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------

COMMANDS: tuple[Callable[[Any], None], ...] = (
    _add_convert,
    _add_bench,
    _add_export,
    _add_publish,
)


def build_parser() -> argparse.ArgumentParser:
    from hf_xfmr import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="hf_xfmr: classic and modern transformer architectures as a Hugging Face plugin.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `hf-xfmr`; returns the exit status (argparse errors raise SystemExit(2))."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CommandError as err:
        args.command_parser.error(str(err))  # prints usage + "hf-xfmr <command>: error: ..." and exits 2


if __name__ == "__main__":
    sys.exit(main())
