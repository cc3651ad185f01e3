"""Model card templates: one per task family, found from the checkout and shipped in wheels."""

import configparser
from pathlib import Path

import pytest
import yaml

import hf_xfmr
from hf_xfmr.hub.cards import REPO_ID_PLACEHOLDER, TASK_FAMILIES, CardInfo, render_card, template_for, templates_dir
from hf_xfmr.models.registry import TASK_AUTO_CLASSES

REPO_ROOT = Path(__file__).resolve().parents[2]


def _info(task, **overrides):
    from hf_xfmr.models.bert import XfmrBertConfig

    values = dict(title="tiny", task=task, auto_class=TASK_AUTO_CLASSES.get(task) or "AutoModel", arch_name="bert",
                  model_type="xfmr-bert", model_class="XfmrBertModel", config=XfmrBertConfig.from_preset("tiny"),
                  num_parameters=123_456, dtype="float32", code_files=["configuration_x.py", "modeling_x.py"])
    values.update(overrides)
    return CardInfo(**values)


def test_every_task_has_a_template_family():
    assert set(TASK_FAMILIES) == set(TASK_AUTO_CLASSES)
    folder = templates_dir()
    for family, _ in TASK_FAMILIES.values():
        assert (folder / f"{family}.md").is_file(), family
    assert template_for("pretraining", can_generate=True) == TASK_FAMILIES["causal-lm"]
    with pytest.raises(ValueError, match="no model card template for task 'poetry'"):
        template_for("poetry")


@pytest.mark.parametrize("task", sorted(TASK_FAMILIES))
def test_every_template_renders_with_valid_metadata(task):
    text = render_card(_info(task, metrics={"f1": 0.5}, eval_dataset="conll2003", datasets=["conll2003"],
                             training={"epochs": 3}))
    assert text.startswith("---\n")
    metadata = yaml.safe_load(text.split("---\n")[1])
    assert metadata["library_name"] == "transformers" and "hf_xfmr" in metadata["tags"]
    assert metadata.get("pipeline_tag") == TASK_FAMILIES[task][1]
    assert metadata["model-index"][0]["results"][0]["metrics"] == [{"type": "f1", "value": 0.5}]
    assert "${" not in text and REPO_ID_PLACEHOLDER in text
    assert f"{TASK_AUTO_CLASSES.get(task) or 'AutoModel'}.from_pretrained(" in text
    assert "| epochs | 3 |" in text and "123.5K (123,456)" in text


def test_templates_are_found_in_the_checkout_and_shipped_as_package_data():
    package_link = Path(hf_xfmr.__file__).parent / "hub" / "model_cards"
    assert templates_dir().resolve() == (REPO_ROOT / "model_cards").resolve() == package_link.resolve()
    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    assert setup["options.package_data"]["hf_xfmr.hub"].strip() == "model_cards/*.md"
    assert "matplotlib" in setup["options"]["install_requires"]


def test_a_runs_metrics_go_into_the_model_index_only_when_measured_on_a_hub_dataset():
    from hf_xfmr.hub.cards import evaluation_fields

    assert evaluation_fields({}, hub_dataset="glue", split="test", source="x") == {}
    assert evaluation_fields({"accuracy": 0.9}, hub_dataset="glue", split="validation", dataset_config="sst2",
                             source="x") == dict(metrics={"accuracy": 0.9}, eval_dataset="glue",
                                                 eval_dataset_config="sst2", eval_split="validation")
    assert evaluation_fields({"accuracy": 0.9}, hub_dataset=None, split="test", source="our dev.csv") == dict(
        metrics={"accuracy": 0.9}, eval_source="our dev.csv")


def test_a_finetune_runs_card_fills_only_what_the_user_left_unset(tmp_path):
    import json

    from hf_xfmr.hub.cards import finetune_run_card, finetune_run_folder

    run = tmp_path / "run"
    (run / "merged").mkdir(parents=True)
    assert finetune_run_folder(run / "merged") is None  # no finetune_args.json / metrics.json next to it
    (run / "finetune_args.json").write_text(json.dumps(dict(task="classification", lora=True, lora_r=4, lora_alpha=8,
                                                            max_steps=10, arch="bert")))
    metrics = dict(eval={"eval_accuracy": 0.75, "eval_runtime": 1.0},
                   provenance=dict(base_model=None, dataset="glue", dataset_config="sst2", data="glue"))
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "log_history.jsonl").write_text("")
    assert finetune_run_folder(run / "merged") == run and finetune_run_folder(run) is None
    given = dict(description="mine", tags=["tiny"], metrics=None, eval_dataset=None, eval_source=None,
                 training_logs=None, base_model=None, datasets=(), training=None)
    filled = finetune_run_card(run, given)
    assert "description" not in filled and filled["tags"] == ["lora", "tiny"]
    assert filled["metrics"] == {"accuracy": 0.75} and filled["eval_dataset"] == "glue"
    assert filled["eval_split"] == "validation" and filled["datasets"] == ["glue"]
    assert filled["training"]["lora_r"] == 4 and filled["training_logs"] == str(run / "log_history.jsonl")
    assert "metrics" not in finetune_run_card(run, {**given, "eval_source": "our dev.csv"})
    (run / "metrics.json").write_text("[]")
    with pytest.raises(ValueError):
        finetune_run_card(run, given)
