"""Settings from files and `key=value` text: the one loader and the one parser every caller uses.

- `read_options_file`: a YAML or JSON file of `name: value` pairs (`hf-xfmr <command> --config FILE`,
  `PretrainArguments.from_yaml`, `FinetuneArguments.from_file`, a checkpoint's config.json).
- `parse_key_values`: `"a=1,b=x"` or `["a=1", "b=x"]` -> `{"a": 1, "b": "x"}` (`--config_overrides`,
  `hf-xfmr export --metric/--training`).
- `value_parser` / `values_from_mapping`: how a string becomes the value of a dataclass field, shared by the
  command line (each option's argparse `type`) and by files (a YAML 1.1 `5e-4` is a string; it becomes the
  float the same option would give), so both routes accept the same values.

Standard library (and PyYAML) only: `hf-xfmr --help` imports this module and must stay fast.
"""

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

__all__ = [
    "option",
    "option_names",
    "parse_bool",
    "parse_config_overrides",
    "parse_int_list",
    "parse_key_values",
    "read_options_file",
    "spellings",
    "value_parser",
    "values_from_mapping",
]


def option(help: str, default: Any = dataclasses.MISSING, **metadata) -> Any:
    """A dataclass field that is also a command-line option: its `help` and the metadata the command line
    reads (`aliases`, `metavar`, `nargs`/`const`, `action`, `choices`, `parse`, `required`, `positional`,
    `exclusive`; see `hf_xfmr.cli.command`)."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def shipped_or_path(value: str, folder: Path, suffix: str, *, source: str, kind: str, example: str,
                    file: str) -> Path:
    """The file `value` means: a config shipped with hf_xfmr in `folder` by its name (`folder/value.suffix`), or a
    file path (relative to the current folder). Raises a ValueError naming `source` when it is neither, e.g.
    `shipped_or_path("zero2", DEEPSPEED_CONFIGS, ".json", source="--deepspeed", kind="a DeepSpeed", ...)`;
    `example` and `file` complete the message's advice ("Name a shipped config (example) or give the path of file").
    """
    import os

    names = sorted(p.stem for p in folder.glob(f"*{suffix}"))
    path = folder / f"{value}{suffix}" if value in names else Path(value).expanduser()
    if not path.is_file():
        raise ValueError(
            f"{source} {value}: neither {kind} config shipped with hf_xfmr ({', '.join(names)}) nor an existing "
            f"file (a relative path is read from the current folder, {os.getcwd()}). Name a shipped config "
            f"({example}) or give the path of {file}.")
    return path


def read_options_file(path, *, error: type[Exception] = ValueError, what: str = "Config file") -> dict[str, Any]:
    """The mapping a YAML or JSON file holds (JSON for a `.json` suffix, YAML otherwise). Every problem is
    raised as `error` with a message naming the file: missing, not parseable (with the parser's reason),
    or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist." if not path.exists() else f"{what} {path} is not a file.")
    text = path.read_text()
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        if kind == "JSON":
            values = json.loads(text)
        else:
            import yaml

            values = yaml.safe_load(text)
    except Exception as err:  # json.JSONDecodeError, yaml.YAMLError (the user's file), no PyYAML
        raise error(f"{what} {path} is not valid {kind}: {err}") from None
    if values is None and kind == "YAML":
        values = {}  # an empty YAML file sets nothing
    if not isinstance(values, dict):
        raise error(f"{what} {path} must hold a mapping of option names to values, got {type(values).__name__}.")
    return values


def parse_key_values(items: str | Iterable[str] | dict | None, option: str, *, example: str = "name=value",
                     numbers: bool = False, error: type[Exception] = ValueError) -> dict[str, Any]:
    """`"a=1,b=x"` (comma-separated text) or `["a=1", "b=x"]` (a repeated option) -> `{"a": 1, "b": "x"}`;
    a mapping (from a YAML file) is taken as it is. Values are read as JSON when they are numbers, true,
    false or null (in any case, and None), else kept as strings; with `numbers`, each value must be a number. Errors are raised as
    `error` and name `option`."""
    if not items:
        return {}
    if isinstance(items, dict):
        return dict(items)
    if isinstance(items, str):
        items = items.split(",")
    result: dict[str, Any] = {}
    for item in items:
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise error(f"{option}: {item!r} is not of the form field=value (e.g. {option} {example}).")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            # Python's spelling of the constants too (True, False, None): "False" as text would count as true
            value = {"true": True, "false": False, "none": None, "null": None}.get(raw.lower(), raw)
        if numbers and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise error(f"{option} {key}: the value must be a number, got {raw!r}")
        result[key] = value
    return result


def parse_config_overrides(overrides: str | dict | None, error: type[Exception] = ValueError) -> dict[str, Any]:
    """`--config_overrides 'hidden_size=64,num_hidden_layers=2'` (or a mapping, from YAML) -> dict."""
    return parse_key_values(overrides, "--config_overrides", example="hidden_size=128,num_hidden_layers=4",
                            error=error)


def parse_bool(text: str) -> bool:
    """'true'/'yes'/'1'/'on' -> True, 'false'/'no'/'0'/'off' -> False (any case)."""
    value = str(text).strip().lower()
    if value in ("true", "yes", "y", "1", "on", "t"):
        return True
    if value in ("false", "no", "n", "0", "off", "f"):
        return False
    raise argparse.ArgumentTypeError(f"must be true or false, got {text!r}")


def parse_int_list(text: str) -> list[int]:
    """'0,5,11' -> [0, 5, 11]."""
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}") from None


@dataclasses.dataclass(frozen=True)
class ValueParser:
    """How the text of one option becomes a field value: `parse` each word (None: keep the text), one
    word or several (`many`, a list field), `choices` (a Literal field), whether it is a bool switch."""

    parse: Callable[[str], Any] | None
    many: bool = False
    choices: tuple | None = None
    is_bool: bool = False
    optional: bool = False  # None is a valid value (the type is `X | None`)


def _strip_none(hint) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (hint, False)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _or_none(number: type) -> Callable[[str], Any]:
    """int / float that also reads 'none' or 'null' as None (for a field typed `int | None`)."""

    def parse(text: str):
        return None if text.strip().lower() in ("none", "null") else number(text)

    parse.__name__, parse.number = number.__name__, number
    return parse


def value_parser(field: dataclasses.Field, hint) -> ValueParser:
    """The `ValueParser` of a dataclass field with resolved type `hint`. `metadata["parse"]` overrides
    the one the type implies (e.g. `parse_int_list` for a comma-separated `list[int]`)."""
    hint, optional = _strip_none(hint)
    custom = field.metadata.get("parse")
    if custom is not None:
        return ValueParser(custom, optional=optional)
    if hint is bool:
        return ValueParser(parse_bool, is_bool=True, optional=optional)
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return ValueParser(type(choices[0]) if choices and not isinstance(choices[0], str) else None,
                           choices=choices, optional=optional)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (str,)
        return ValueParser(None if item in (str, Any) else item, many=True, optional=optional)
    if hint in (int, float):
        return ValueParser(_or_none(hint) if optional else hint, optional=optional)
    return ValueParser(None, optional=optional)  # str, Any, paths: the text itself


def spellings(*names: str) -> list[str]:
    """`--name` for each name, then its dashed spelling where it differs (`--max_steps`, `--max-steps`)."""
    flags = []
    for name in names:
        flags += [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    return flags


def option_names(cls) -> dict[str, str]:
    """Every name a settings file or the command line may use for a field of dataclass `cls` -> the field:
    the field name and its `metadata["aliases"]`, each in both `spellings`. Fields without a help text are
    not options."""
    return {flag[2:]: f.name for f in dataclasses.fields(cls) if "help" in f.metadata
            for flag in spellings(f.name, *f.metadata.get("aliases", ()))}


def values_from_mapping(cls, values: dict, source: str, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """`values` (e.g. read from a YAML file) as field name -> value for dataclass `cls`: keys may use any
    option name (`max-steps`, an alias); strings become what the command line would make of them
    (`"5e-4"` -> 5e-4 for a float). Unknown keys and unreadable values are raised as `error` naming
    `source`."""
    if not isinstance(values, dict):
        raise error(f"{source} must be a mapping of setting names to values, got {type(values).__name__}.")
    names = option_names(cls) or {f.name: f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(k) for k in values if k not in names)
    if unknown:
        listed = ", ".join(unknown)
        valid = sorted({name for name in names.values()})
        raise error(f"Unknown setting(s) in {source}: {listed} (unknown option(s) {listed}; valid settings: "
                    f"{', '.join(valid)}).")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    result = {}
    for key, value in values.items():
        name = names[key]
        parser = value_parser(fields[name], hints[name])
        try:
            result[name] = _from_text(parser, value)
        except (ValueError, argparse.ArgumentTypeError) as err:
            raise error(f"{source}: {key} {err}") from None
    return result


def _number(parse: type, kind: str) -> Callable[[str], Any]:
    """int / float with the error message a settings file deserves ('must be an integer, got 'x'')."""

    def number(text: str):
        try:
            return parse(text)
        except ValueError:
            raise ValueError(f"must be {kind}, got {text!r}") from None

    return number


def _from_text(parser: ValueParser, value):
    """`value` with its strings parsed as the command line parses them; other values as they are."""
    if parser.parse is None:
        return value
    number = getattr(parser.parse, "number", parser.parse)
    if number in (int, float):
        kind = "an integer" if number is int else "a number"
        parser = dataclasses.replace(parser, parse=_number(parser.parse, kind))
    if parser.many and isinstance(value, list):
        return [parser.parse(v) if isinstance(v, str) else v for v in value]
    if isinstance(value, str):
        return parser.parse(value)
    return value
