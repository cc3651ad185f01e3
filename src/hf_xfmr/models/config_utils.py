"""Validation and preset helpers shared by every hf_xfmr config.

Errors name the field, the offending value and what would be valid, so a typo in a config
fails at construction time rather than as a shape error deep inside a forward pass.
"""

from typing import Any


def check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


def check_non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}.")


def check_probability(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        hint = " (or None to fall back to the default)" if allow_none else ""
        raise ValueError(f"`{name}` must be a probability in [0, 1){hint}, got {value!r}.")


def check_positive_float(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")


def check_choice(name: str, value: Any, choices) -> None:
    if value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}`={value!r} is not supported; valid values are: {valid}.")


def check_divisible(name: str, value: int, by_name: str, by: int) -> None:
    if value % by != 0:
        raise ValueError(
            f"`{name}`={value} must be divisible by `{by_name}`={by} (each head gets {name} / {by_name} "
            f"dimensions); pick e.g. {name}={by * max(1, round(value / by))}."
        )


def check_token_id(name: str, value: Any, vocab_size: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or not 0 <= value < vocab_size:
        raise ValueError(f"`{name}`={value!r} must be None or an id in [0, vocab_size={vocab_size}).")


def preset_kwargs(presets: dict, name: str, overrides: dict) -> dict:
    """The keyword arguments of a named size preset, with `overrides` applied on top."""
    if name not in presets:
        raise ValueError(f"Unknown preset {name!r}; available presets: {', '.join(sorted(presets))}.")
    return {**presets[name], **overrides}
