"""The `hf-xfmr` command.

One module per command (`convert`, `bench`, `pretrain`, `finetune`, `export`, `publish`, `distill`), each
an arguments dataclass, a `run(options, args)` function and a `COMMAND` (`hf_xfmr.cli.command.Command`)
that builds its options from the dataclass; `COMMANDS` lists them. Adding a command = one module + one
line in `COMMANDS` (an entry may also be any `add(subparsers)` function, e.g. one using `add_parser`).

A command reports an expected failure (bad arguments, a missing or broken input file, ...) by raising
`CommandError`; `main` prints it as one line, `hf-xfmr <command>: error: ...`, and exits with status 2.
An `OSError` about a path (a file where a folder is needed, no permission, a full disk, ...) is also
the user's to fix: one line naming the path, status 2. Any other exception is a bug: one line naming
it, exit status 1. `--debug` (before or after the command name) shows the traceback in every case.

`--help` imports no torch, transformers or model code: the architectures are registered with the
transformers Auto classes (`hf_xfmr.register_architectures`) only once a command runs.
"""

import argparse
import sys
import traceback
from typing import Any, Callable

from . import bench, convert, distill, export, finetune, pretrain, publish
from .command import DEBUG_HELP, PROG, CommandError, HelpFormatter, add_parser

__all__ = ["COMMANDS", "CommandError", "add_parser", "build_parser", "main"]

COMMANDS: tuple[Callable[[Any], Any], ...] = (
    pretrain.COMMAND,
    finetune.COMMAND,
    convert.COMMAND,
    bench.COMMAND,
    export.COMMAND,
    publish.COMMAND,
    distill.COMMAND,
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
        formatter_class=HelpFormatter,
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


def _unexpected(err: BaseException) -> str:
    return (f"unexpected {type(err).__name__}: {err} (this is a bug in hf-xfmr; rerun with --debug for the "
            "traceback and report it)")


def main(argv: list[str] | None = None) -> int:
    """Run `hf-xfmr`; returns the exit status: 0 on success, 2 for bad input (a `CommandError`, or
    argparse's own errors, which raise SystemExit(2)), 1 for an unexpected exception (a bug)."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed (pretrain prints a resume command)
    debug = getattr(args, "debug", False)
    try:
        import hf_xfmr

        hf_xfmr.register_architectures()  # deferred past --help (see hf_xfmr/__init__.py); a no-op if done
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
