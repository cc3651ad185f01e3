"""`make demo` end to end in its quick mode: every step runs and leaves what it promises, the finetuning from
random weights beside the pretrained one included (the full run's quality checks — losses fall, accuracies beat
their baselines — are the demo's own, not repeated here)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from hf_xfmr.data.labelled import load_vader_sentiment, vader_unlabelled_text

ROOT = Path(__file__).resolve().parents[1]


def _load_demo():
    spec = importlib.util.spec_from_file_location("demo", ROOT / "examples" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


@pytest.mark.slow
def test_quick_demo_pretrains_finetunes_and_exports(tmp_path, capsys):
    demo = _load_demo()
    out = tmp_path / "demo"
    demo.main(["--quick", "--output", str(out)])  # the default runs: what `make demo` pretrains
    printed = capsys.readouterr().out
    assert "[5/5]" in printed and "Done in" in printed

    archs = [run.split(":")[0] for run in demo.DEFAULT_RUNS]
    assert "xlnet" in archs  # the permutation LM is part of the demo
    for arch in archs:
        assert (out / "pretrain" / arch / "model.safetensors").is_file()
        rows = [json.loads(line) for line in (out / "pretrain" / arch / "log.jsonl").read_text().splitlines()]
        assert any("loss" in row for row in rows) and any("eval_loss" in row for row in rows)
    assert (out / "finetune" / "adapter" / "adapter_config.json").is_file()
    assert (out / "finetune" / "merged" / "model.safetensors").is_file()
    # The floor: the first run's architecture and config with random weights, finetuned the same way.
    first = archs[0]
    assert (json.loads((out / "random_init" / first / "config.json").read_text())
            == json.loads((out / "pretrain" / first / "config.json").read_text()))
    assert (out / "finetune_scratch" / "adapter" / "adapter_config.json").is_file()
    floor = re.search(r"test accuracy from random weights (\S+)%: pretraining adds (\S+) points \(pretrained (\S+)%\)",
                      printed)
    assert floor and float(floor.group(2)) == pytest.approx(float(floor.group(3)) - float(floor.group(1)), abs=0.11)
    # The pretraining text holds VADER's training sentences, never a validation or test one.
    held_out = {text for split in ("validation", "test") for text in load_vader_sentiment(num_classes=3)[split]["text"]}
    pretraining = {line for row in (out / "data" / "pretraining.jsonl").read_text().splitlines()
                   for line in json.loads(row)["text"].split("\n")}
    assert not held_out & pretraining and len(set(vader_unlabelled_text()) & pretraining) > 15000
    export = out / "export"
    assert {"config.json", "model.safetensors", "README.md", "loss_curve.png"} <= {p.name for p in export.iterdir()}
    assert (export / "README.md").read_text().startswith("---\n")  # the card's YAML front matter
    listing = printed.split("What is where:")[1]
    for path in (export, out / "finetune" / "adapter", out / "finetune" / "merged", *(out / "pretrain" / a for a in archs)):
        assert str(path) in listing, path
    config = json.loads((export / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSequenceClassification"].startswith("modeling_")
    difference = re.search(r"max \|logit difference\| (\S+)", printed)
    assert difference and float(difference.group(1)) <= 1e-5


def test_runs_are_validated():
    demo = _load_demo()
    assert demo.parse_runs("bert:mlm, gpt:clm") == [("bert", "mlm"), ("gpt", "clm")]
    assert demo.parse_args([]).runs == ",".join(demo.DEFAULT_RUNS)
    assert [objective for _, objective in demo.parse_runs(demo.parse_args([]).runs)][:2] == ["mlm", "plm"]
    with pytest.raises(SystemExit, match="does not train with 'clm'"):
        demo.parse_runs("bert:clm")
    with pytest.raises(SystemExit, match="architecture:objective"):
        demo.parse_runs("bert")
