"""The `hf-xfmr` command.

Each subcommand is one `_add_<name>(subparsers)` function that declares its arguments and sets
`func` (what runs it); `COMMANDS` lists them. Adding a command = one function + one line in `COMMANDS`.

A command reports an expected failure (bad arguments, a missing or broken input file, ...) by raising
`CommandError`; `main` prints it as one line, `hf-xfmr <command>: error: ...`, and exits with status 2.
An `OSError` about a path (a file where a folder is needed, no permission, a full disk, ...) is also
the user's to fix: one line naming the path, status 2. Any other exception is a bug: one line naming
it, exit status 1. `--debug` (before or after the command name) shows the traceback in every case.
"""

import argparse
import json
import os
import shutil
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

PROG = "hf-xfmr"
DEBUG_HELP = "show the full traceback when the command fails"


class CommandError(Exception):
    """Bad input to a command: printed as `hf-xfmr <command>: error: <message>`, exit status 2."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the hand-made line breaks of descriptions and epilogs (defaults are stated in each help)."""


def _add_parser(subparsers, name: str, *, help: str, description: str, epilog: str = "", func: Callable):
    parser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog, formatter_class=_HelpFormatter
    )
    parser.set_defaults(func=func, command_parser=parser)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


# ----------------------------------------------------------------------------------------------
# hf-xfmr convert
# ----------------------------------------------------------------------------------------------


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
        raise CommandError(f"{config_file} is not valid JSON: {err}") from err
    if not isinstance(config, dict) or not config.get("model_type"):
        raise CommandError(f"{config_file} has no model_type")
    return config


def _checkpoint_folder(option: str, value: str, revision: str | None) -> Path:
    """The local folder of a checkpoint option: `value` itself, or the cached snapshot of the Hub repo it names
    (downloaded if needed, at `revision`; the token comes from HF_TOKEN or `hf auth login`)."""
    from hf_xfmr.models.hub_loading import CheckpointSourceError, resolve_checkpoint

    try:
        return resolve_checkpoint(value, revision=revision)
    except CheckpointSourceError as err:
        raise CommandError(f"{option} {value}: {err}") from None


def _check_out(src: Path, out: Path, overwrite: bool) -> None:
    if out.resolve() == src.resolve():
        raise CommandError("OUT must differ from SRC")
    if out.exists() and not out.is_dir():
        raise CommandError(f"OUT {out} is an existing file, not a folder; pass the path of a new or empty folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise CommandError(f"{out} exists and is not empty; pass --overwrite to write into it")
    parent = next((p for p in out.resolve().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise CommandError(f"cannot create OUT {out}: {parent} is a file, not a folder")


def _convert_quietly(convert: Callable[[], Any], debug: bool) -> tuple[Any, list[str]]:
    """Run `convert` with transformers' own load reports muted (unless --debug); return its result and
    the messages of the `ConversionWarning`s it raised (other warnings are shown as usual)."""
    import transformers

    from hf_xfmr.models.conversion import ConversionWarning

    verbosity = transformers.logging.get_verbosity()
    if not debug:
        transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = convert()
    finally:
        transformers.logging.set_verbosity(verbosity)
    notes = []
    for w in caught:
        if issubclass(w.category, ConversionWarning):
            notes.append(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return result, notes


def _run_convert(args: argparse.Namespace) -> int:
    from transformers import CONFIG_MAPPING

    import hf_xfmr
    from hf_xfmr.models.conversion import load_checkpoint

    src, out = _checkpoint_folder("SRC", args.src, args.revision), Path(args.out)
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
    _check_out(src, out, args.overwrite)

    def convert():
        if direction == "xfmr":
            return hf_xfmr.from_transformers(src, task=args.task)
        return hf_xfmr.to_transformers(load_checkpoint(src, task=args.task))

    try:
        model, notes = _convert_quietly(convert, getattr(args, "debug", False))
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        # The converters raise these with a message meant for the user (unsupported architecture/head,
        # missing, truncated or mis-sized weights): show it as a command error rather than a traceback.
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise CommandError(f"cannot convert {src}: {message}") from err
    for note in notes:
        print(f"{PROG} convert: warning: {note}", file=sys.stderr)

    try:
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        from hf_xfmr.models.hub_loading import TOKENIZER_FILES

        copied = [name for name in TOKENIZER_FILES if (src / name).is_file()]
        for name in copied:
            shutil.copy2(src / name, out / name)
    except OSError as err:
        raise CommandError(f"cannot write {out}: {err}") from err
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
            "Convert a checkpoint (a local folder or a Hub repo id) between the transformers format (e.g.\n"
            "model_type 'bert') and the hf_xfmr format ('xfmr-bert'). The direction follows SRC's config.json:\n"
            "'xfmr-*' model types become transformers checkpoints, others become hf_xfmr checkpoints.\n"
            "Weights are saved as safetensors; tokenizer files found in SRC are copied to OUT."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr convert ./bert-base-uncased ./bert-base-xfmr\n"
            "  hf-xfmr convert google-bert/bert-base-uncased ./bert-base-xfmr      # from the Hub (cached)\n"
            "  hf-xfmr convert ./bert-base-xfmr ./bert-back --to transformers\n"
            "  hf-xfmr convert ./my-bert ./my-bert-encoder --task base"
        ),
        func=_run_convert,
    )
    parser.add_argument("src", metavar="SRC", help="checkpoint folder (config.json + weights) or Hub repo id")
    parser.add_argument("--revision", default=None, metavar="REV",
                        help="branch, tag or commit of a Hub repo SRC (token: HF_TOKEN or `hf auth login`)")
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

COLLATORS = "collators"  # pseudo-case: the data collator benchmark (hf_xfmr.bench.collators)
TRAINER = "trainer-vader"  # pseudo-case: one Trainer epoch on VADER, end to end (hf_xfmr.bench.trainer)


def _run_collator_benchmark(args: argparse.Namespace, threads: int, tiny: bool) -> list[dict[str, Any]]:
    from hf_xfmr.bench.collators import benchmark_collators

    sizes = {"batch_size": 2, "seq_len": 64} if tiny else {}
    repeats = args.repeats if args.repeats is not None else (5 if tiny else 40)
    return benchmark_collators(**sizes, repeats=repeats, warmup=args.warmup, num_threads=threads)


def _run_trainer_benchmark(args: argparse.Namespace, threads: int, tiny: bool) -> list[dict[str, Any]]:
    from hf_xfmr.bench import trainer

    sizes = trainer.TINY_SIZES if tiny else trainer.SIZES
    return [trainer.trainer_epoch(**sizes, rounds=args.repeats or 1, num_threads=threads)]


def _selected_cases(args: argparse.Namespace) -> tuple[list[tuple[str, dict]], set[str], bool]:
    """(cases with overrides, the pseudo-cases to run (COLLATORS, TRAINER), whether sizes are tiny)."""
    from hf_xfmr import bench

    pseudo = (COLLATORS, TRAINER)
    if args.cases:
        names = [name for item in args.cases for name in item.split(",") if name]
        public = bench.public_cases()
        unknown = [n for n in names if n not in public and n not in pseudo]
        if unknown:
            known = ", ".join(public + list(pseudo))
            raise CommandError(f"unknown case(s) {', '.join(unknown)}; known: {known} (see --list)")
        overrides = {"tiny": True} if args.tiny else {}
        return [(n, overrides) for n in names if n not in pseudo], set(names) & set(pseudo), args.tiny
    suite = args.suite or "all"
    tiny = args.tiny or suite == "quick"
    cases = [(n, {"tiny": True} if tiny else {}) for n, _ in bench.suites()["all"]]
    return cases, {COLLATORS}, tiny


def _run_bench(args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from hf_xfmr import bench

    if args.list:
        public = bench.public_cases()
        width = max(map(len, [*public, COLLATORS]))
        for name in public:
            print(f"{name:<{width}}  {bench.case_summary(name)}")
        print(f"{COLLATORS:<{width}}  data collator throughput, ours vs transformers' (hf_xfmr.bench.collators)")
        print(f"{TRAINER:<{width}}  one Trainer epoch on the VADER sentences, wall-clock and test accuracy "
              f"(hf_xfmr.bench.trainer)")
        for suite, cases in bench.suites().items():
            print(f"suite {suite}: {', '.join(n for n, _ in cases)}, {COLLATORS}")
        return 0
    if args.repeats is not None and args.repeats < 1:
        raise CommandError("--repeats must be >= 1")
    if args.warmup < 0:
        raise CommandError("--warmup must be >= 0")
    if args.threads is not None and args.threads < 1:
        raise CommandError("--threads must be >= 1")

    out = Path(args.output) if args.output else None
    if out is not None and out.exists() and not out.is_dir():
        raise CommandError(f"--output {out} is a file; pass a folder (created if missing)")
    cases, pseudo, tiny = _selected_cases(args)
    repeats = args.repeats or (3 if tiny else 7)
    # Tiny models gain nothing from threads, and a busy 2-core machine makes OpenMP barriers stall.
    threads = args.threads or (1 if tiny else torch.get_num_threads())
    results = []
    for name, overrides in tqdm(cases, desc="bench", unit="case", file=sys.stderr, disable=not cases):
        try:
            case = bench.make_case(name, **overrides)
        except ValueError as err:
            raise CommandError(f"case {name}: {err}") from None
        results.append(
            bench.measure_case(
                case, repeats=repeats, warmup=args.warmup, threads=threads, memory=not args.no_memory, progress=True
            )
        )
    if results:
        table = bench.to_markdown(results)
        print(table)
        if out:
            bench.to_json(results, out / "models.json", suite=args.suite, tiny=tiny)
            (out / "models.md").write_text(table)

    if TRAINER in pseudo:
        from hf_xfmr.bench.trainer import markdown_table as trainer_table

        rows = _run_trainer_benchmark(args, threads, tiny)
        text = trainer_table(rows)
        print(text)
        if out:
            bench.to_json(rows, out / "trainer.json")
            (out / "trainer.md").write_text(text)

    if COLLATORS in pseudo:
        from hf_xfmr.bench.collators import markdown_table

        rows = _run_collator_benchmark(args, threads, tiny)
        text = markdown_table(rows)
        print(text)
        if out:
            bench.to_json(rows, out / "collators.json")
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
        "--repeats", type=int, default=None, metavar="N",
        help="timed steps per side (default: 7, or 3 with tiny sizes); trainer-vader: epochs per side (default: 1)"
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
# hf-xfmr pretrain
# ----------------------------------------------------------------------------------------------


def _run_pretrain(args: argparse.Namespace) -> int:
    import dataclasses

    from hf_xfmr.training import CheckpointError, CollectiveError, NonFiniteLossError, PretrainArguments, pretrain

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(PretrainArguments) if hasattr(args, f.name)}
    try:
        settings = PretrainArguments.from_yaml(args.config, **given) if args.config else PretrainArguments(**given)
    except ValueError as err:
        raise CommandError(str(err)) from None
    try:
        result = pretrain(settings)
    except KeyboardInterrupt as err:  # Ctrl-C: say where the run stands and how to continue it
        if os.environ.get("RANK", "0") == "0":
            print(_interrupted_message(args, settings, err), file=sys.stderr)
        return 130
    except CheckpointError as err:
        raise CommandError(f"cannot resume: {err}") from None
    except (NonFiniteLossError, CollectiveError) as err:
        print(f"{PROG} pretrain: error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        raise CommandError(str(err)) from None
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if result.model is not None:  # the main process
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in result.eval_metrics.items())
        loss = f"{result.final_loss:.4f}" if result.final_loss is not None else "n/a"
        print(f"pretrained {type(result.model).__name__} for {result.step} steps on {result.world_size} process(es): "
              f"final loss {loss}" + (f"; {metrics}" if metrics else "") +
              f"\nmodel and tokenizer: {result.model_dir}/  log: {result.log_path}")
    return 0


def _options_without(options: list[str], names: set[str]) -> list[str]:
    """`options` without the options `names` (either spelling, `--name=value` or `--name [value]`)."""
    kept, drop_value = [], False
    for token in options:
        if drop_value and not token.startswith("-"):
            drop_value = False
            continue
        drop_value = False
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag[2:].replace("-", "_") in names:
            drop_value = "=" not in token
            continue
        kept.append(token)
    return kept


def _interrupted_message(args: argparse.Namespace, settings, err: KeyboardInterrupt) -> str:
    """What `hf-xfmr pretrain` prints after Ctrl-C: the last complete checkpoint and the command that
    resumes from it (or, before the first checkpoint, the command that starts over)."""
    import shlex

    from hf_xfmr.training import latest_checkpoint
    from hf_xfmr.training.logs import LOG_FILE

    output_dir = Path(settings.output_dir)
    step = getattr(err, "step", None)
    when = f"after step {step}" if step is not None else "before training started"
    argv = list(getattr(args, "argv", None) or [])
    options = argv[argv.index("pretrain") + 1:] if "pretrain" in argv else argv
    options = _options_without(options, {"resume", "overwrite_output_dir"})
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is not None:
        head = f"interrupted {when}; the last complete checkpoint is {checkpoint}."
        todo, extra = "To continue from it, run", ["--resume"]
    else:
        save = f"--save_steps {settings.save_steps}" if settings.save_steps else "--save_steps 0: only at the end"
        head = f"interrupted {when}, before the first checkpoint ({save}): there is nothing to resume."
        # a log without checkpoints is still an earlier run that pretrain will not overwrite silently
        todo, extra = "To start again, run", ["--overwrite_output_dir"] if (output_dir / LOG_FILE).exists() else []
    launcher = [PROG]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # a resumed run needs the same number of processes
        todo += f" with the same launcher and {world} processes, e.g."
        launcher = ["accelerate", "launch", "--multi_gpu", "--num_processes", str(world), "-m", "hf_xfmr.cli"]
    return f"{PROG} pretrain: {head}\n{todo}:\n  {shlex.join([*launcher, 'pretrain', *options, *extra])}"


def _add_pretrain(subparsers) -> None:
    import dataclasses

    from transformers import HfArgumentParser

    import hf_xfmr  # noqa: F401  (registers the architectures)
    from hf_xfmr.models import architectures
    from hf_xfmr.training import PretrainArguments
    from hf_xfmr.training.objectives import available_objectives

    # The options are generated from the PretrainArguments dataclass by HfArgumentParser.
    fields = HfArgumentParser(PretrainArguments, add_help=False)
    arch_lines = "\n".join(f"  {a.name:<12} objectives: {', '.join(a.objectives)}" for a in architectures())
    recipes = ", ".join(available_objectives())
    parser = subparsers.add_parser(
        "pretrain",
        parents=[fields],
        help="pretrain an architecture with its objective (Accelerate; DeepSpeed ZeRO-2/3 with --deepspeed)",
        description=(
            "Pretrain an hf_xfmr architecture from scratch with its objective, in one process or under\n"
            "`accelerate launch` / `torchrun` (DDP, DeepSpeed ZeRO-2/3). Writes the model (safetensors) and\n"
            "tokenizer to --output_dir, a JSON-lines log (log.jsonl), and checkpoints that --resume\n"
            "continues exactly. Settings come from the options below and/or a YAML file (--config).\n\n"
            f"architectures:\n{arch_lines}\nobjectives with a training recipe: {recipes}"
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr pretrain --arch bert --objective wwm --max_steps 200 --output_dir out/bert\n"
            "  hf-xfmr pretrain --config run.yaml --resume\n"
            "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli pretrain --arch roberta --output_dir out/r\n"
            "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli pretrain --deepspeed zero3 ..."
        ),
        formatter_class=_HelpFormatter,
    )
    parser.set_defaults(func=_run_pretrain, command_parser=parser)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    parser.add_argument("--config", metavar="YAML", default=None,
                        help="read settings from a YAML file of `name: value` pairs; options given here win")
    # Only options actually given reach PretrainArguments, so the YAML file's values are not masked by defaults.
    defaults = {f.name: f.default for f in dataclasses.fields(PretrainArguments)}
    for action in parser._actions:
        if action.dest in defaults:
            if action.option_strings and action.option_strings[0].startswith("--no_"):
                action.help = f"turn --{action.dest} off"
            elif action.help:
                action.help = f"{action.help} (default: {defaults[action.dest]})".replace("%", "%%")
            action.default = argparse.SUPPRESS
            action.required = False


# ----------------------------------------------------------------------------------------------
# hf-xfmr finetune
# ----------------------------------------------------------------------------------------------


class _FinetuneHelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Hand-made description/epilog line breaks, and each option's default appended to its help."""


def _finetune_options_file_action(fields: set[str]):
    class OptionsFile(argparse.Action):
        """--config FILE: set options from a YAML/JSON file at this point of the command line, so options
        given after it override the file."""

        def __call__(self, parser, namespace, path, option_string=None):
            from hf_xfmr.training.finetune_tasks import FinetuneError
            from hf_xfmr.training.finetune import read_config_file

            try:
                values = read_config_file(path)
            except FinetuneError as err:
                parser.error(str(err))
            unknown = sorted(set(values) - fields)
            if unknown:
                parser.error(f"{path}: unknown option(s) {', '.join(unknown)} (see --help for the option names)")
            actions = {a.dest: a for a in parser._actions}
            for key, value in values.items():
                convert = actions[key].type
                if convert is not None and isinstance(value, str):
                    value = convert(value)
                elif convert is not None and isinstance(value, list):
                    value = [convert(v) if isinstance(v, str) else v for v in value]
                setattr(namespace, key, value)

    return OptionsFile


def _run_finetune(args: argparse.Namespace) -> int:
    import dataclasses

    from hf_xfmr.training import NonFiniteLossError
    from hf_xfmr.training.finetune import FinetuneArguments, finetune
    from hf_xfmr.training.finetune_tasks import FinetuneError

    try:
        options = FinetuneArguments(**{f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneArguments)})
        result = finetune(options)
    except FinetuneError as err:
        raise CommandError(str(err)) from None
    except NonFiniteLossError as err:  # as pretrain: the run failed (status 1), the input was not wrong as such
        print(f"{PROG} finetune: error: {err}", file=sys.stderr)
        return 1
    metrics = result.metrics
    shown = {**metrics.get("eval", {}), **metrics.get("test", {}), **metrics.get("baseline", {})}
    keys = [k for k in shown if not k.endswith(("_runtime", "_per_second", "epoch"))]
    print("\n".join(f"{k}: {shown[k]:.4f}" for k in keys))
    print(f"best checkpoint: {result.best_checkpoint}")
    for label, path in (("model", result.model_dir), ("adapter", result.adapter_dir), ("merged model", result.merged_dir),
                        ("metrics", result.metrics_file), ("log history", result.log_file)):
        if path is not None:
            print(f"{label}: {path}")
    return 0


def _add_finetune(subparsers) -> None:
    import dataclasses

    from transformers import HfArgumentParser

    from hf_xfmr.training.finetune import FinetuneArguments

    fields = HfArgumentParser(FinetuneArguments, add_help=False)
    parser = subparsers.add_parser(
        "finetune",
        parents=[fields],
        help="finetune (fully or with LoRA) for classification, tagging or extractive QA",
        description=(
            "Finetune a model with transformers' Trainer (and PEFT for --lora) on a datasets source: local\n"
            "csv/tsv/json/jsonl/parquet files or folders (offline), a Hub dataset, or the built-in 'vader'\n"
            "sentiment sentences. Start from an hf_xfmr or transformers checkpoint folder, or from --arch +\n"
            "--preset for a from-scratch run. The best checkpoint on the validation split (by\n"
            "--metric_for_best_model) is kept; metrics.json, log_history.jsonl and model/ (or adapter/ and,\n"
            "with --merge, merged/) are written to --output_dir. Options can also come from a YAML/JSON file\n"
            "(--config FILE; options given after it override it). Each option also has a dashed spelling\n"
            "(--learning-rate)."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr finetune --model_name_or_path ckpt/ --dataset vader --lora --merge --output_dir out/\n"
            "  hf-xfmr finetune --arch bert --preset tiny --train_file train.csv --validation_file dev.csv\n"
            "  hf-xfmr finetune --model_name_or_path ckpt/ --task token-classification --dataset ner/ \\\n"
            "      --tokens_column words --tags_column tags\n"
            "  hf-xfmr finetune --model_name_or_path ckpt/ --task question-answering --train_file squad.json\n"
            "  hf-xfmr finetune --config finetune.yaml --learning_rate 1e-4"
        ),
        formatter_class=_FinetuneHelpFormatter,
    )
    parser.set_defaults(func=_run_finetune, command_parser=parser)
    names = {f.name for f in dataclasses.fields(FinetuneArguments)}
    parser.add_argument("--config", metavar="FILE", action=_finetune_options_file_action(names), default=None,
                        help="YAML or JSON file of options (keys are the option names without dashes)")


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

    from hf_xfmr.models.weights import check_weight_files

    src, out = Path(args.checkpoint), Path(args.folder)
    metrics = _key_values(args.metric, "--metric", number=True) or None
    training = _key_values(args.training, "--training", number=False) or None
    config = _read_config(src)
    try:
        check_weight_files(src)  # the message every command gives (a PEFT adapter folder, a truncated file, ...)
    except ValueError as err:
        raise CommandError(f"cannot load {src}: {err}") from None
    card = dict(title=args.title, description=args.description, license=args.license, language=args.language,
                datasets=args.dataset or (), base_model=args.base_model, tags=args.tag or (), metrics=metrics,
                eval_dataset=args.eval_dataset, eval_dataset_config=args.eval_dataset_config,
                eval_split=args.eval_split, eval_source=args.eval_source, training=training,
                training_logs=args.training_log)
    card.update(_finetune_run_card(src, card))
    try:
        model = load_checkpoint(src, task=args.task)
        if not config["model_type"].startswith("xfmr-"):
            model = hf_xfmr.from_transformers(model)
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        raise CommandError(f"cannot load {src}: {err}") from None
    model.eval()

    tokenizer_path = Path(args.tokenizer) if args.tokenizer else src
    tokenizer = None
    from hf_xfmr.models.hub_loading import TOKENIZER_FILES

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
            folder = export(model, tokenizer, out, repo_id=args.repo_id, **card, max_shard_size=args.max_shard_size,
                            overwrite=args.overwrite)
    except ExportError as err:
        raise CommandError(str(err)) from None
    files = sorted(p.name for p in folder.iterdir())
    print(f"exported {type(model).__name__} ({model.config.model_type}) to {folder}: {', '.join(files)}")
    return 0


def _finetune_run_card(src: Path, given: dict[str, Any]) -> dict[str, Any]:
    """When SRC is the model/ or merged/ folder of a `hf-xfmr finetune` run (its finetune_args.json and
    metrics.json sit next to it): the card fields of that run (base model, LoRA, metrics, settings, loss
    log) that the options in `given` left unset."""
    run = src.parent
    if src.name not in ("model", "merged") or not (run / "finetune_args.json").is_file() \
            or not (run / "metrics.json").is_file():
        return {}
    from hf_xfmr.training.finetune import card_fields

    try:
        fields = card_fields(json.loads((run / "finetune_args.json").read_text()),
                             json.loads((run / "metrics.json").read_text()))
    except (OSError, ValueError, AttributeError) as err:
        print(f"warning: cannot read the finetune run in {run} ({err}); the card leaves it out", file=sys.stderr)
        return {}
    filled = {key: fields[key] for key in ("description", "base_model", "datasets", "training")
              if fields.get(key) and not given[key]}
    if not (given["metrics"] or given["eval_dataset"] or given["eval_source"]):
        filled.update({key: fields[key] for key in ("metrics", "eval_dataset", "eval_dataset_config", "eval_split",
                                                    "eval_source") if fields.get(key)})
    if not given["training_logs"] and (run / "log_history.jsonl").is_file():
        filled["training_logs"] = str(run / "log_history.jsonl")
    if fields["tags"]:
        filled["tags"] = list(dict.fromkeys([*fields["tags"], *given["tags"]]))
    if filled:
        print(f"model card: {', '.join(sorted(filled))} from the finetune run in {run}", file=sys.stderr)
    return filled


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
    parser.add_argument("folder", metavar="FOLDER",
                        help="output folder (new or empty, or a previous export with --overwrite)")
    parser.add_argument("--task", choices=supported_tasks(), default=None,
                        help="head to export; default: CHECKPOINT's own (config.json 'architectures')")
    parser.add_argument("--tokenizer", metavar="PATH", default=None,
                        help="tokenizer folder; default: CHECKPOINT when it holds tokenizer files")
    parser.add_argument("--repo-id", metavar="OWNER/NAME", default=None,
                        help="the Hub repo it will be published to (used in the card's code samples; "
                             "publish fills it in otherwise)")
    parser.add_argument("--title", default=None, help="model card title (default: FOLDER's name)")
    parser.add_argument("--description", default=None, help="model card opening paragraph")
    parser.add_argument("--license", default=None,
                        help="license id for the card metadata, e.g. apache-2.0 (default: none stated)")
    parser.add_argument("--language", nargs="+", default=None, metavar="LANG", help="language codes, e.g. en")
    parser.add_argument("--dataset", action="append", metavar="ID", help="training dataset Hub id (repeatable)")
    parser.add_argument("--base-model", metavar="ID", default=None,
                        help="Hub id of the model this one was finetuned from")
    parser.add_argument("--tag", action="append", metavar="TAG", help="extra card tag (repeatable)")
    parser.add_argument("--metric", action="append", metavar="NAME=VALUE",
                        help="evaluation result for the card's model-index (repeatable; needs --eval-dataset)")
    parser.add_argument("--eval-dataset", metavar="ID", default=None,
                        help="Hub id of the dataset the metrics come from")
    parser.add_argument("--eval-dataset-config", metavar="NAME", default=None, help="its configuration, e.g. sst2")
    parser.add_argument("--eval-split", metavar="SPLIT", default=None, help="its split, e.g. validation")
    parser.add_argument("--eval-source", metavar="TEXT", default=None,
                        help="where the metrics come from when it is not a Hub dataset, e.g. 'our dev.csv': "
                             "they are then shown in the card's text, not in its model-index")
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
    parser.add_argument("--commit-message", default=None,
                        help="commit message (default: 'Upload <class> with hf_xfmr')")
    parser.add_argument("--keep-stale", action="store_true",
                        help="keep repository files that FOLDER does not have (default: delete them in the commit)")
    parser.add_argument("--max-retries", type=int, default=3, metavar="N",
                        help="retries of transient failures: timeouts, connection errors, HTTP 408/429/5xx "
                             "(default: 3)")


# ----------------------------------------------------------------------------------------------
# hf-xfmr distill
# ----------------------------------------------------------------------------------------------


def _run_distill(args: argparse.Namespace) -> int:
    import dataclasses

    from hf_xfmr.training.distill import DistillArguments, distill

    teacher = _checkpoint_folder("--teacher", args.teacher, getattr(args, "revision", None))
    if not (teacher / "config.json").is_file():
        raise CommandError(f"--teacher {teacher} is not a checkpoint folder (it has no config.json)")
    # Options left out are not in `args` (default SUPPRESS), so DistillArguments' own defaults apply.
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(DistillArguments) if hasattr(args, f.name)}
    given["teacher"] = str(teacher)
    if given.get("student") == "auto":
        given["student"] = None
    if "student_layer_ids" in given:
        try:
            given["student_layer_ids"] = [int(x) for x in given["student_layer_ids"].split(",") if x.strip()]
        except ValueError:
            raise CommandError(f"--student_layer_ids must be comma-separated integers, got "
                               f"{given['student_layer_ids']!r}") from None
    try:
        settings = DistillArguments(**given)
        result = distill(settings)
    except (ValueError, FileNotFoundError, FileExistsError, KeyError) as err:
        # distill raises these with a message meant for the user (bad sizes, incompatible student, ...).
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise CommandError(str(message)) from None
    student_model = result.student
    print(f"distilled {student_model.config.model_type} student ({student_model.config.num_hidden_layers} layers) "
          f"from {teacher} in {settings.max_steps} steps; saved to {settings.output_dir}")
    if result.history:
        first, last = result.history[0], result.history[-1]
        print(f"loss {first['loss']:.4f} -> {last['loss']:.4f} (ce {last['ce']:.4f}, mlm {last['mlm']:.4f}, "
              f"cos {last['cos']:.4f})")
    if result.agreement_before is not None:
        print(f"top-1 agreement with the teacher (held-out): {result.agreement_before:.3f} -> "
              f"{result.agreement_after:.3f}")
    return 0


# `hf-xfmr distill` options: (DistillArguments field, shorter names kept from earlier releases, argparse
# settings, help). Each name is accepted with underscores and with dashes, as pretrain/finetune options are.
_DISTILL_OPTIONS = (
    ("teacher", (), dict(required=True, metavar="DIR"), "teacher checkpoint folder or Hub repo id (loaded as an MLM)"),
    ("revision", (), dict(metavar="REV"), "branch, tag or commit of a Hub repo --teacher (token: HF_TOKEN or "
                                          "`hf auth login`)"),
    ("output_dir", ("output",), dict(required=True, metavar="DIR"), "where the student is written"),
    ("corpus", (), dict(metavar="SRC"), "text: a .txt/.jsonl/.parquet/.csv file, a folder, or a datasets name "
                                        "(default: the embedded offline corpus)"),
    ("text_column", (), dict(metavar="NAME"), "the corpus column holding the text"),
    ("max_documents", (), dict(type=int, metavar="N"), "use at most N documents"),
    ("tokenizer", (), dict(metavar="DIR"), "tokenizer folder (default: --teacher)"),
    ("student", (), dict(metavar="KIND"), "'auto' (DistilBERT for a BERT teacher, else the teacher's architecture), "
                                          "'same', 'distilbert', or a student checkpoint folder to keep training"),
    ("student_layers", (), dict(type=int, metavar="N"), "student depth (default: half the teacher's, rounded up)"),
    ("student_layer_ids", ("layer_ids",), dict(metavar="I,J,..."),
     "teacher layers to copy (default: evenly spaced, first and last included)"),
    ("max_steps", (), dict(type=int, metavar="N"), "optimizer steps"),
    ("batch_size", (), dict(type=int, metavar="N"), "sequences per step"),
    ("gradient_accumulation_steps", ("grad_accum",), dict(type=int, metavar="N"), "micro-batches per optimizer step"),
    ("max_seq_length", ("seq_len",), dict(type=int, metavar="N"), "tokens per sequence"),
    ("learning_rate", ("lr",), dict(type=float, metavar="X"), "peak AdamW learning rate"),
    ("warmup_ratio", (), dict(type=float, metavar="X"), "share of steps warming up"),
    ("weight_decay", (), dict(type=float, metavar="X"), "AdamW weight decay"),
    ("adam_epsilon", (), dict(type=float, metavar="X"), "AdamW epsilon"),
    ("max_grad_norm", (), dict(type=float, metavar="X"), "gradient clipping, 0 = off"),
    ("temperature", (), dict(type=float, metavar="X"), "softmax temperature T"),
    ("alpha_ce", (), dict(type=float, metavar="X"), "weight of the soft-target KL"),
    ("alpha_mlm", (), dict(type=float, metavar="X"), "weight of the MLM loss"),
    ("alpha_cos", (), dict(type=float, metavar="X"), "weight of the hidden-state cosine"),
    ("mlm_probability", (), dict(type=float, metavar="X"), "masking rate"),
    ("eval_sequences", (), dict(type=int, metavar="N"), "held-out sequences for the top-1 agreement report, 0 = none"),
    ("bf16", (), dict(action="store_true"), "bf16 autocast"),
    ("device", (), dict(choices=("cpu", "cuda")), "default: cuda when available"),
    ("logging_steps", (), dict(type=int, metavar="N"), "progress update interval"),
    ("seed", (), dict(type=int, metavar="N"), "data order, masking and anything random"),
    ("overwrite_output_dir", ("overwrite",), dict(action="store_true"), "write into a non-empty --output_dir"),
)


def _spellings(*names: str) -> list[str]:
    """`--name` for each name, then its dashed spelling where it differs (`--max_steps`, `--max-steps`)."""
    flags = []
    for name in names:
        flags += [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    return flags


def _add_distill(subparsers) -> None:
    import dataclasses

    from hf_xfmr.training.distill import DistillArguments

    parser = _add_parser(
        subparsers,
        "distill",
        help="distil a teacher MLM into a smaller student (DistilBERT recipe)",
        description=(
            "Distil a masked-language-model teacher (hf_xfmr or transformers checkpoint: BERT, RoBERTa, ...)\n"
            "into a shallower student of the same width, as DistilBERT was made from BERT. The student starts\n"
            "from the teacher's embeddings, MLM head and one layer out of two, and is trained on masked text with\n"
            "  loss = alpha_ce * T^2 * KL(teacher soft targets || student) + alpha_mlm * MLM\n"
            "       + alpha_cos * (1 - cosine(student, teacher last hidden states)),\n"
            "KL and cosine over non-pad tokens. The student, its tokenizer and distill_log.json go to --output_dir.\n"
            "Each option also has a dashed spelling (--max-steps)."
        ),
        epilog=(
            "examples:\n"
            "  hf-xfmr distill --teacher ./my-bert --output_dir ./my-distilbert          # embedded corpus\n"
            "  hf-xfmr distill --teacher ./my-roberta --output_dir ./distilroberta --corpus ./texts/ --max_steps 5000\n"
            "  hf-xfmr distill --teacher ./my-bert --output_dir ./small --student_layers 3 --student_layer_ids 0,5,11"
        ),
        func=_run_distill,
    )
    defaults = {f.name: f.default for f in dataclasses.fields(DistillArguments)}
    defaults["student"] = "auto"
    for name, old_names, settings, help in _DISTILL_OPTIONS:
        default = defaults.get(name)
        if default not in (None, dataclasses.MISSING) and settings.get("action") is None:
            help = f"{help} (default: {default})"
        parser.add_argument(*_spellings(name, *old_names), dest=name, default=argparse.SUPPRESS, help=help,
                            **settings)


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------

COMMANDS: tuple[Callable[[Any], None], ...] = (
    _add_pretrain,
    _add_finetune,
    _add_convert,
    _add_bench,
    _add_export,
    _add_publish,
    _add_distill,
)


def build_parser() -> argparse.ArgumentParser:
    from hf_xfmr import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="hf_xfmr: classic and modern transformer architectures as a Hugging Face plugin.",
        epilog=(
            f"A failing command prints one line, '{PROG} <command>: error: <what is wrong>', and exits with\n"
            "status 2 (1 for an internal error); --debug shows the traceback."
        ),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    print(f"{args.command_parser.prog}: error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Run `hf-xfmr`; returns the exit status: 0 on success, 2 for bad input (a `CommandError`, or
    argparse's own errors, which raise SystemExit(2)), 1 for an unexpected exception (a bug)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed (pretrain prints a resume command)
    debug = getattr(args, "debug", False)
    try:
        return args.func(args)
    except CommandError as err:
        if debug:
            traceback.print_exc()
        return _fail(args, str(err), 2)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", 130)
    except OSError as err:
        if debug:
            raise
        if err.filename is None:  # not about a path the user gave: treat as any other exception
            return _fail(args, _unexpected(err), 1)
        paths = " -> ".join(str(p) for p in (err.filename, err.filename2) if p is not None)
        return _fail(args, f"cannot use {paths}: {err.strerror or err}", 2)
    except Exception as err:
        if debug:
            raise
        return _fail(args, _unexpected(err), 1)


def _unexpected(err: BaseException) -> str:
    return (f"unexpected {type(err).__name__}: {err} (this is a bug in hf-xfmr; rerun with --debug for the "
            "traceback and report it)")


if __name__ == "__main__":
    sys.exit(main())
