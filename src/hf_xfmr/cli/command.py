"""How an `hf-xfmr` command is declared: one arguments dataclass, one `run` function, one `Command`.

    @dataclass
    class GreetArguments:
        name: str = option("who to greet", "world")

    def run(options: GreetArguments, args) -> int:
        print(f"hello {options.name}")
        return 0

    COMMAND = Command("greet", help="say hello", description="Say hello.", arguments=GreetArguments, run=run)

`Command` builds the subparser from the dataclass (`add_options`) the same way for every command:

- each field with a help text is an option, spelled with underscores and with dashes (`--max_steps`,
  `--max-steps`), plus the older names in `metadata["aliases"]`; help shows them once, together;
- `metadata["positional"]` fields are positional arguments (SRC, OUT);
- a `bool` field is a switch: `--lora` (or `--lora false`: it takes an optional true/false, `[BOOL]`, as
  transformers' HfArgumentParser made it, except in commands with positional arguments, where a value after
  the switch would be taken for one); a switch that defaults to on also has `--no_<name>`;
- `Literal[...]` fields offer their choices; `list[...]` fields take several values (or, with
  `metadata["action"] = "append"`, one value per repeated option);
- `--config FILE` reads options from a YAML or JSON file; options given on the command line win;
- only the options actually given reach the dataclass (argparse default SUPPRESS), so its defaults and
  the file's values are not masked; the help states each default.

The dataclass is built before `run` is called; a ValueError it raises (the dataclasses' checks name the
option) is reported as a `CommandError`.

A command reports an expected failure (bad arguments, a missing or broken input file, ...) by raising
`CommandError`; `hf_xfmr.cli.main` prints it as one line, `hf-xfmr <command>: error: ...`, exit status 2.
"""

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable

from ..options import read_options_file, spellings, value_parser, values_from_mapping

PROG = "hf-xfmr"
DEBUG_HELP = "show the full traceback when the command fails"
CONFIG_HELP = ("read options from a YAML or JSON file of `name: value` pairs (the option names, with _ or -); "
               "options given on the command line win")


class CommandError(Exception):
    """Bad input to a command: printed as `hf-xfmr <command>: error: <message>`, exit status 2."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the hand-made line breaks of descriptions and epilogs, and lists an option's spellings once:
    `--max_steps MAX_STEPS, --max-steps` (the value's name after the first spelling only)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        first, *others = action.option_strings
        return ", ".join([f"{first} {value}", *others])


def add_parser(subparsers, name: str, *, help: str, description: str, epilog: str = "",
               func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """A subcommand parser with `--debug`; `func(args)` runs it. The lowest-level way to add a command
    (`Command` uses it); a test or plugin may use it directly."""
    parser = subparsers.add_parser(name, help=help, description=description, epilog=epilog,
                                   formatter_class=HelpFormatter)
    parser.set_defaults(func=func, command_parser=parser)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def _ordered_fields(cls) -> list[dataclasses.Field]:
    """The fields of `cls` in the order its own class body declares them, then the inherited ones: a
    subclass's options come first in the help, grouped as it groups them."""
    own = list(cls.__dict__.get("__annotations__", {}))
    fields = dataclasses.fields(cls)
    return sorted(fields, key=lambda f: own.index(f.name) if f.name in own else len(own))


def _help_text(field: dataclasses.Field) -> str:
    """The field's help, with its default appended unless the help already speaks of it."""
    text = field.metadata["help"]
    default = field.default
    if default not in (None, False, dataclasses.MISSING) and "default" not in text:
        text = f"{text} (default: {default})"
    return text.replace("%", "%%")


def _naming_errors(parse: Callable[[str], Any], flag: str) -> Callable[[str], Any]:
    """`parse` with its ArgumentTypeError prefixed by `flag` ('--student_layer_ids must be ...')."""

    def parse_option(text: str):
        try:
            return parse(text)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{flag} {err}") from None

    parse_option.__name__ = getattr(parse, "__name__", "value")
    return parse_option


def _option_settings(field: dataclasses.Field, hint, switches_take_values: bool) -> dict[str, Any]:
    """argparse settings of one field (but its names, help and default)."""
    meta, parser = field.metadata, value_parser(field, hint)
    settings: dict[str, Any] = {key: meta[key] for key in ("metavar", "nargs", "const", "choices", "action")
                                if key in meta}
    if parser.is_bool and not parser.optional:
        if not switches_take_values:
            return {**settings, "action": "store_true"}
        return {"nargs": "?", "const": True, "type": parser.parse, "metavar": "BOOL", **settings}
    if parser.parse is not None:
        builtin = getattr(parser.parse, "number", parser.parse) in (int, float)
        settings["type"] = parser.parse if builtin else _naming_errors(parser.parse, f"--{field.name}")
    if parser.choices is not None:
        settings.setdefault("choices", parser.choices)
    if parser.many and "action" not in settings:
        settings.setdefault("nargs", "+")
    return settings


def add_options(parser: argparse.ArgumentParser, cls) -> None:
    """One option (or positional argument) per field of dataclass `cls` that has a help text; see the
    module docstring for the rules."""
    hints = typing.get_type_hints(cls)
    fields = [f for f in _ordered_fields(cls) if "help" in f.metadata]
    switches_take_values = not any(f.metadata.get("positional") for f in fields)
    groups: dict[str, Any] = {}
    for field in fields:
        settings = _option_settings(field, hints[field.name], switches_take_values)
        if field.metadata.get("positional"):
            parser.add_argument(field.name, help=_help_text(field), **settings)
            continue
        exclusive = field.metadata.get("exclusive")
        if exclusive and exclusive not in groups:
            groups[exclusive] = parser.add_mutually_exclusive_group()
        group = groups[exclusive] if exclusive else parser
        group.add_argument(*spellings(field.name, *field.metadata.get("aliases", ())), dest=field.name,
                           default=argparse.SUPPRESS, help=_help_text(field), **settings)
        if field.default is True and hints[field.name] is bool:
            parser.add_argument(f"--no_{field.name}", f"--no-{field.name.replace('_', '-')}", dest=field.name,
                                action="store_false", default=argparse.SUPPRESS, help=f"turn --{field.name} off")


def _required(cls) -> list[dataclasses.Field]:
    """Options that must be given (on the command line or in --config): no default, or metadata `required`."""
    return [f for f in _ordered_fields(cls) if "help" in f.metadata and not f.metadata.get("positional")
            and (f.metadata.get("required") or (f.default is dataclasses.MISSING
                                                 and f.default_factory is dataclasses.MISSING))]


def settings_from(cls, args: argparse.Namespace):
    """The `cls` instance a parsed command line describes: the --config file's values, then the options
    given (which win). Errors of the file and of the dataclass's checks (ValueError) are raised as
    `CommandError`."""
    values = {}
    config = getattr(args, "config", None)
    if config:
        values = values_from_mapping(cls, read_options_file(config, error=CommandError), str(config),
                                     error=CommandError)
    values.update({f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
    missing = [f for f in _required(cls) if f.name not in values]
    if missing:
        listed = ", ".join("/".join(spellings(f.name, *f.metadata.get("aliases", ()))) for f in missing)
        raise CommandError(f"the following arguments are required: {listed}")
    try:
        return cls(**values)
    except ValueError as err:
        raise CommandError(str(err)) from None


@dataclass(frozen=True)
class Command:
    """One `hf-xfmr` command: its name and texts, its arguments dataclass, and `run(options, args)`, which
    gets the filled dataclass and the parsed namespace (for `args.debug`, `args.argv`) and returns the exit
    status. Calling it with the subparsers adds it (it is an entry of `hf_xfmr.cli.COMMANDS`)."""

    name: str
    help: str
    description: str
    arguments: type
    run: Callable[[Any, argparse.Namespace], int]
    epilog: str = ""

    def __call__(self, subparsers) -> argparse.ArgumentParser:
        parser = add_parser(subparsers, self.name, help=self.help, description=self.description,
                            epilog=self.epilog, func=self.execute)
        add_options(parser, self.arguments)
        parser.add_argument("--config", metavar="FILE", default=None, help=CONFIG_HELP)
        return parser

    def execute(self, args: argparse.Namespace) -> int:
        return self.run(settings_from(self.arguments, args), args)
