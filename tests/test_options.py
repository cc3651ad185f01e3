"""hf_xfmr.options: the one settings-file loader and the one key=value parser every caller uses."""

from dataclasses import dataclass

import pytest

from hf_xfmr.options import option, parse_key_values, read_options_file, values_from_mapping


def test_parse_key_values_reads_json_values_and_names_the_option():
    assert parse_key_values("hidden_size=64, act=gelu,flag=true", "--config_overrides") == \
        {"hidden_size": 64, "act": "gelu", "flag": True}
    assert parse_key_values(["accuracy=0.9", "f1=1"], "--metric", numbers=True) == {"accuracy": 0.9, "f1": 1}
    assert parse_key_values({"a": 1}, "--x") == {"a": 1} and parse_key_values(None, "--x") == {}
    # Python's spelling of the constants too: "False" kept as text would count as true in a config
    assert parse_key_values("a=False,b=TRUE,c=None,d=Falsey", "--config_overrides") == \
        {"a": False, "b": True, "c": None, "d": "Falsey"}
    with pytest.raises(ValueError, match=r"--config_overrides: 'hidden_size' is not of the form field=value"):
        parse_key_values("hidden_size", "--config_overrides")
    with pytest.raises(KeyError, match="--metric accuracy: the value must be a number, got 'high'"):
        parse_key_values(["accuracy=high"], "--metric", numbers=True, error=KeyError)


def test_read_options_file_yaml_json_and_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("lr: 1e-4\nname: x\n")
    (tmp_path / "a.json").write_text('{"lr": 0.1}')
    assert read_options_file(tmp_path / "a.yaml") == {"lr": "1e-4", "name": "x"}  # YAML 1.1: 1e-4 is text
    assert read_options_file(tmp_path / "a.json") == {"lr": 0.1}
    (tmp_path / "empty.yaml").write_text("")
    assert read_options_file(tmp_path / "empty.yaml") == {}
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "list.yaml").write_text("- 1\n")
    for name, message in (("missing.yaml", "does not exist"), ("bad.json", "is not valid JSON"),
                          ("list.yaml", "must hold a mapping")):
        with pytest.raises(ValueError, match=message):
            read_options_file(tmp_path / name)


@dataclass
class _Settings:
    learning_rate: float = option("peak learning rate", 5e-4, aliases=("lr",))
    max_grad_norm: float | None = option("clipping", 1.0)
    layers: list[int] | None = option("layers", None)
    internal: int = 0  # no help: not an option


def test_values_from_mapping_parses_text_as_the_command_line_does():
    assert values_from_mapping(_Settings, {"lr": "1e-3", "max-grad-norm": "none", "layers": ["1", 2]}, "f") == \
        {"learning_rate": 1e-3, "max_grad_norm": None, "layers": [1, 2]}
    with pytest.raises(ValueError, match="f: learning_rate must be a number, got 'fast'"):
        values_from_mapping(_Settings, {"learning_rate": "fast"}, "f")
    with pytest.raises(ValueError, match=r"Unknown setting\(s\) in f: internal"):
        values_from_mapping(_Settings, {"internal": 1}, "f")
