"""examples/compare_objectives.py: its pretraining text never holds a held-out VADER sentence; on a budget of a
few steps, every run pretrains, finetunes from its checkpoint and from random weights of the same config once per
seed, and the table and JSON it writes carry the figures it printed."""

import json
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from hf_xfmr.data.labelled import load_vader_sentiment, vader_unlabelled_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def compare_objectives(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    sys.modules.pop("compare_objectives", None)
    import compare_objectives

    return compare_objectives


@pytest.mark.slow
@pytest.mark.parametrize("arch, objective", [("gpt", "clm"), ("electra", "rtd")])
def test_compare_objectives_writes_its_table(tmp_path, compare_objectives, arch, objective):
    out = tmp_path / "compare"
    report = compare_objectives.main(["--runs", f"{arch}:{objective}", "--pretrain-steps", "3", "--batch-size", "8",
                                      "--finetune-epochs", "1", "--labelled", "64", "--seeds", "2", "--vocab-size",
                                      "600", "--jobs", "1", "--output", str(out)])
    (row,) = report["runs"]
    assert (row["arch"], row["objective"]) == (arch, objective)
    assert row["parameters"] > 0 and row["pretrain_seconds"] > 0 and row["pretrain_cpu_seconds"] > 0
    assert 0 <= row["eval_accuracy"] <= 1
    for name in ("finetuned", "scratch"):  # one finetuning per seed, pretrained and from random weights
        accuracies = row[f"{name}_accuracies"]
        assert len(accuracies) == 2 and all(0 <= a <= 1 for a in accuracies)
        assert row[f"{name}_accuracy"] == pytest.approx(sum(accuracies) / 2)
        assert row[f"{name}_spread"] == pytest.approx(abs(accuracies[0] - accuracies[1]) / 2 ** 0.5)
    assert row["gain"] == pytest.approx(row["finetuned_accuracy"] - row["scratch_accuracy"])
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(report))
    assert report["settings"]["labelled"] == 64 and report["cpu_seconds"] > 0
    table = (out / "results.md").read_text()
    assert f"| {objective.upper()} ({arch}) |" in table and "3 steps x 8 x 64" in table and "(2 seeds)" in table
    assert f"{100 * row['gain']:+.1f} points" in table

    # The floor is the pretrained model's own config with random weights: the same architecture and tokenizer
    # (for RTD: the discriminator's, which is the model finetuned).
    pretrained = out / "pretrain" / arch
    for seed in (0, 1):
        scratch = out / "random_init" / arch / f"seed{seed}"
        assert json.loads((scratch / "config.json").read_text()) == json.loads((pretrained / "config.json").read_text())
        assert (scratch / "tokenizer.json").read_text() == (pretrained / "tokenizer.json").read_text()
        weights, trained = load_file(scratch / "model.safetensors"), load_file(pretrained / "model.safetensors")
        assert weights.keys() == trained.keys() and any(not (weights[k] == trained[k]).all() for k in weights)


def test_default_runs_are_one_per_objective_and_all_installed(compare_objectives):
    runs = compare_objectives.parse_runs(compare_objectives.parse_args([]).runs)  # raises for an unknown one
    assert [objective for _, objective in runs] == ["mlm", "plm", "clm", "rtd"]


def test_pretraining_text_never_holds_a_held_out_sentence(compare_objectives):
    vader = load_vader_sentiment(num_classes=3)  # every rated sentence, neutral ones included
    held_out = set(vader["validation"]["text"]) | set(vader["test"]["text"])
    pretraining = {line for document in compare_objectives.pretraining_documents("vader")
                   for line in document.split("\n")}
    assert held_out and not held_out & pretraining
    assert not held_out & set(vader_unlabelled_text())
    # ... and it is the whole train split otherwise, labels dropped: more text than the 2-class train split.
    train = set(vader["train"]["text"])
    assert train - held_out <= pretraining and len(train & held_out) < 0.01 * len(train)
    assert len(pretraining) > len(set(load_vader_sentiment(num_classes=2)["train"]["text"]))


def test_labelled_subset_is_fixed_and_spans_every_source(compare_objectives):
    first, again = compare_objectives.labelled_data(500), compare_objectives.labelled_data(500)
    assert len(first["train"]) == 500 and list(first["train"]["id"]) == list(again["train"]["id"])
    assert set(first["train"]["source"]) == {"tweets", "movies", "amazon", "nyt"}
    whole = compare_objectives.labelled_data(None)
    assert len(first["test"]) == len(whole["test"]) and len(first["validation"]) == len(whole["validation"])
    assert set(first["train"]["id"]) <= set(whole["train"]["id"])


def test_the_discriminator_mlm_weight_reaches_the_rtd_run_only(compare_objectives):
    args = compare_objectives.parse_args(["--discriminator-mlm-weight", "2.5"])
    assert compare_objectives.config_overrides("electra", "rtd", args)["discriminator_mlm_weight"] == 2.5
    assert "discriminator_mlm_weight" not in compare_objectives.config_overrides("modernbert", "mlm", args)
    default = compare_objectives.parse_args([])
    assert "discriminator_mlm_weight" not in compare_objectives.config_overrides("electra", "rtd", default)
    with pytest.raises(SystemExit):
        compare_objectives.parse_args(["--discriminator-mlm-weight", "-1"])
