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
