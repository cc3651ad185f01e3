"""`hf_xfmr.hub.export`: every architecture and head, exported and loaded back in a fresh process where
hf_xfmr is not importable, gives outputs identical to the exporting model; folder contents; bad input.

All loads of this module run in ONE child process (`load_remote.py`): importing transformers costs
seconds, so the module-scoped fixture exports everything first and loads it all at once.
"""

import ast
import json
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file
from transformers.dynamic_module_utils import get_imports, get_relative_imports

import hf_xfmr
from hf_xfmr.hub import ExportError, check_export_folder, export
from hf_xfmr.hub.cards import TASK_FAMILIES
from hf_xfmr.hub.remote_code import GENERATED_MARKER
from hf_xfmr.models.registry import TASK_AUTO_CLASSES

from ._childlib import run_model
from .conftest import (
    auto_class_name,
    case_id,
    child_env,
    export_quietly,
    fitting_tokenizer,
    model_cases,
    model_inputs,
    run_child,
    tiny_model,
)

# One worker runs this module: its fixture exports and loads everything once.
pytestmark = pytest.mark.xdist_group("hub_export")

CASES = model_cases()
EXTRA = ("bert-bf16", "roberta-sharded")


def _log(path: Path) -> Path:
    with path.open("w") as f:
        for step in range(1, 41):
            record = {"step": step, "loss": 4.0 / step**0.5, "learning_rate": 1e-3, "epoch": step / 40}
            f.write(json.dumps(record) + "\n")
            if step % 10 == 0:
                f.write(json.dumps({"step": step, "eval_loss": 4.2 / step**0.5}) + "\n")
        f.write(json.dumps({"train_runtime": 12.5, "step": 40}) + "\n")
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory, wordpiece_tokenizer):
    """{name: case} for every architecture/head plus a bf16 and a sharded export, loaded back in a child."""
    root = tmp_path_factory.mktemp("exports")
    io = root / "io"
    io.mkdir()
    cases = {}
    refused_archs = set()
    for arch, task, cls in CASES:
        name = f"{arch.name}-{task}"
        model = tiny_model(arch, cls)
        kwargs = {}
        if task == "masked-lm":  # a full card: logs, metrics, metadata
            kwargs = dict(training_logs=_log(io / f"{name}.jsonl"), metrics={"accuracy": 0.25, "perplexity": 31.5},
                          eval_dataset="wikitext", eval_dataset_config="wikitext-2-raw-v1", eval_split="test",
                          datasets=["wikitext"], base_model="bert-base-uncased", language="en", tags=["tiny"],
                          license="apache-2.0",
                          training={"steps": 40, "learning_rate": 1e-3, "objective": "mlm"},
                          description="A tiny test model.")
        cases[name] = dict(arch=arch, task=task, cls=cls, model=model, refusal=arch.name not in refused_archs,
                           readme=task == "masked-lm", **kwargs)
        refused_archs.add(arch.name)
    arch, _, cls = next(c for c in CASES if c[0].name == "bert" and c[1] == "masked-lm")
    cases["bert-bf16"] = dict(arch=arch, task="masked-lm", cls=cls, model=tiny_model(arch, cls).to(torch.bfloat16))
    arch, _, cls = next(c for c in CASES if c[0].name == "roberta" and c[1] == "sequence-classification")
    cases["roberta-sharded"] = dict(arch=arch, task="sequence-classification", cls=cls,
                                    model=tiny_model(arch, cls, num_labels=3), max_shard_size="40KB")

    manifest = {"cases": [], "report": str(root / "report.json")}
    for name, case in cases.items():
        model, task = case["model"], case["task"]
        export_kwargs = {k: case[k] for k in ("training_logs", "metrics", "eval_dataset", "eval_dataset_config",
                                              "eval_split", "datasets", "base_model", "language", "tags", "training",
                                              "description", "max_shard_size", "license") if k in case}
        case["folder"] = export_quietly(model, fitting_tokenizer(wordpiece_tokenizer, model), root / name,
                                        **export_kwargs)
        inputs = model_inputs(model, task)
        case["generate"] = model.can_generate()
        case["reference"] = run_model(model, inputs, case["generate"])
        save_file(inputs, io / f"{name}-inputs.safetensors")
        manifest["cases"].append(dict(
            name=name, source=str(case["folder"]), auto_class=auto_class_name(task),
            inputs=str(io / f"{name}-inputs.safetensors"), output=str(io / f"{name}-outputs.safetensors"),
            generate=case["generate"], refusal=case.get("refusal", False), readme=case.get("readme", False),
            tokenizer=(case["folder"] / "tokenizer.json").is_file(),
        ))
        case["output"] = io / f"{name}-outputs.safetensors"
    env = child_env(root / "hf_home", HF_HUB_OFFLINE="1")
    run_child("load_remote.py", manifest, root / "manifest.json", env)
    report = json.loads(Path(manifest["report"]).read_text())
    for name, case in cases.items():
        case["report"] = report["cases"][name]
    return {"cases": cases, "report": report}


def _case(exported, name):
    case = exported["cases"][name]
    assert "error" not in case["report"], f"loading {name} failed in the child process:\n{case['report']['error']}"
    return case


@pytest.mark.parametrize("name", [case_id(c) for c in CASES] + list(EXTRA))
def test_loads_without_hf_xfmr_with_identical_outputs(exported, name):
    case = _case(exported, name)
    report = case["report"]
    assert report["module"].startswith("transformers_modules."), report["module"]  # the generated code ran
    assert report["config_module"].startswith("transformers_modules.")
    assert report["class"] == case["cls"].__name__
    assert report["dtype"] == str(case["model"].dtype)
    outputs = load_file(case["output"])
    reference = case["reference"]
    assert sorted(outputs) == sorted(reference)
    assert reference, "the model produced no tensor output"
    for key, expected in reference.items():
        assert outputs[key].dtype == expected.dtype, key
        difference = (outputs[key].double() - expected.double()).abs().max()
        assert torch.equal(outputs[key], expected), f"{name}: {key} differs (max {difference})"
    if case["generate"]:
        assert "generated" in outputs


def test_child_process_had_no_hf_xfmr(exported):
    assert exported["report"]["hf_xfmr_importable"] is False
    assert exported["report"]["hf_xfmr_in_sys_modules"] is False


@pytest.mark.parametrize("arch_name", sorted({c[0].name for c in CASES}))
def test_without_trust_remote_code_transformers_refuses(exported, arch_name):
    refused = [c for c in exported["cases"].values() if c["arch"].name == arch_name and c.get("refusal")]
    assert len(refused) == 1
    refusal = _case(exported, f"{arch_name}-{refused[0]['task']}")["report"]["refusal"]
    for auto_class, message in refusal.items():
        assert message is not None, f"{auto_class} loaded the model without trust_remote_code"
        assert message.startswith("ValueError") and "contains custom code" in message, message
        assert "trust_remote_code=True" in message


def test_readme_sample_runs_where_hf_xfmr_is_missing(exported):
    case = _case(exported, "bert-masked-lm")
    printed = case["report"]["readme_output"]
    tokens = ast.literal_eval(printed.strip())  # the sample prints the top-5 tokens for [MASK]
    assert isinstance(tokens, list) and len(tokens) == 5
    assert case["report"]["tokenizer_vocab"] > 0


@pytest.mark.parametrize("name", [case_id(c) for c in CASES])
def test_folder_contents(exported, name):
    case = exported["cases"][name]
    folder, arch, task, model = case["folder"], case["arch"], case["task"], case["model"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == arch.model_type
    assert config["architectures"] == [case["cls"].__name__]
    stem = arch.model_type.replace("-", "_")
    expected = {"AutoConfig": f"configuration_{stem}.{arch.config_class.__name__}"}
    for other_task, cls in arch.classes.items():  # every Auto class of the architecture, from the registry
        if TASK_AUTO_CLASSES[other_task] is not None:
            expected.setdefault(TASK_AUTO_CLASSES[other_task], f"modeling_{stem}.{cls.__name__}")
    expected[auto_class_name(task)] = f"modeling_{stem}.{case['cls'].__name__}"
    assert config["auto_map"] == expected
    files = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", f"configuration_{stem}.py", f"modeling_{stem}.py"} <= files
    assert ("generation_config.json" in files) == model.can_generate()
    assert not any(name.startswith(".") for name in files)
    assert [p.name for p in folder.parent.iterdir() if ".export-" in p.name] == []  # no temporary folders left
    check_export_folder(folder)


@pytest.mark.parametrize("arch_name", sorted({c[0].name for c in CASES}))
def test_generated_code_is_flat_stamped_and_free_of_hf_xfmr(exported, arch_name):
    case = next(c for c in exported["cases"].values() if c["arch"].name == arch_name)
    stem = case["arch"].model_type.replace("-", "_")
    for kind in ("configuration", "modeling"):
        path = case["folder"] / f"{kind}_{stem}.py"
        text = path.read_text()
        assert text.startswith(f"# {GENERATED_MARKER} {hf_xfmr.__version__} (hf_xfmr.hub.export) from hf_xfmr/")
        assert "# Do not edit: every export regenerates it." in text[:1500]
        assert all(not m.startswith("hf_xfmr") for m in get_imports(path))  # transformers' own import check
        expected_relative = [f"configuration_{stem}"] if kind == "modeling" else []
        assert get_relative_imports(path) == expected_relative
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                relative_ok = node.level == 1 and node.module == f"configuration_{stem}"
                assert node.level == 0 or relative_ok, ast.unparse(node)
                assert not (node.module or "").startswith("hf_xfmr"), ast.unparse(node)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("hf_xfmr") for a in node.names), ast.unparse(node)


def test_sharded_export_has_an_index(exported):
    folder = exported["cases"]["roberta-sharded"]["folder"]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and all((folder / s).is_file() for s in shards)
    assert not (folder / "model.safetensors").exists()


def test_model_card_metadata_and_loss_curve(exported):
    case = exported["cases"]["bert-masked-lm"]
    folder = case["folder"]
    card = ModelCard.load(folder / "README.md")
    data = card.data.to_dict()
    assert data["library_name"] == "transformers"
    assert data["license"] == "apache-2.0"
    assert data["pipeline_tag"] == "fill-mask"
    assert data["datasets"] == ["wikitext"] and data["base_model"] == "bert-base-uncased" and data["language"] == "en"
    assert {"hf_xfmr", "custom_code", "xfmr-bert", "tiny"} <= set(data["tags"])
    results = data["model-index"][0]["results"][0]
    assert results["dataset"] == {"name": "wikitext", "type": "wikitext", "config": "wikitext-2-raw-v1",
                                  "split": "test"}
    assert {m["type"]: m["value"] for m in results["metrics"]} == {"accuracy": 0.25, "perplexity": 31.5}
    text = card.text
    for heading in ("## How to use", "## Model details", "## Training", "## Evaluation"):
        assert heading in text
    assert "A tiny test model." in text and "AutoModelForMaskedLM" in text and "trust_remote_code=True" in text
    assert "| learning_rate | 0.001 |" in text
    assert "40 steps, final training loss 0.6325, final evaluation loss 0.6641" in text
    assert "![Training and evaluation loss](loss_curve.png)" in text
    png = (folder / "loss_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


@pytest.mark.parametrize("name", [case_id(c) for c in CASES])
def test_card_of_every_head_names_its_task(exported, name):
    case = exported["cases"][name]
    data = ModelCard.load(case["folder"] / "README.md").data.to_dict()
    family, pipeline_tag = TASK_FAMILIES[case["task"]]
    if case["task"] == "pretraining" and case["model"].can_generate():
        pipeline_tag = TASK_FAMILIES["causal-lm"][1]
    assert data.get("pipeline_tag") == pipeline_tag
    assert auto_class_name(case["task"]) in (case["folder"] / "README.md").read_text()


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------

@pytest.fixture
def bert(wordpiece_tokenizer):
    arch, _, cls = next(c for c in CASES if c[0].name == "bert" and c[1] == "masked-lm")
    return tiny_model(arch, cls), wordpiece_tokenizer


def _no_leftovers(parent: Path):
    return [p.name for p in parent.iterdir() if ".export-" in p.name] == []


def test_transformers_model_is_refused_with_a_pointer_to_the_converter(tmp_path, wordpiece_tokenizer):
    config = transformers.BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37)
    with pytest.raises(ExportError, match=r"BertModel \(model_type 'bert'\).*hf_xfmr.from_transformers"):
        export(transformers.BertModel(config), wordpiece_tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_non_models_subclasses_and_peft_models_are_refused(tmp_path, bert):
    model, tokenizer = bert
    with pytest.raises(ExportError, match="must be an hf_xfmr model.*got dict"):
        export({"weights": 1}, tokenizer, tmp_path / "a")

    class MyBert(type(model)):
        pass

    with pytest.raises(ExportError, match="MyBert is not one of hf_xfmr's bert classes.*subclasses"):
        export(MyBert(model.config), tokenizer, tmp_path / "b")

    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(ExportError, match=r"merge_and_unload"):
        export(peft_model, tokenizer, tmp_path / "c")
    assert _no_leftovers(tmp_path) and not any((tmp_path / n).exists() for n in "abc")


def test_folder_rules(tmp_path, bert):
    model, tokenizer = bert
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(ExportError, match="exists and is not empty; pass overwrite=True"):
        export(model, tokenizer, other)
    with pytest.raises(ExportError, match="does not hold an hf_xfmr export; refusing to replace"):
        export(model, tokenizer, other, overwrite=True)
    assert (other / "todo.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="is a file"):
        export(model, tokenizer, tmp_path / "file")

    # A previous export is replaced as a whole: its shards do not survive an unsharded re-export.
    out = tmp_path / "out"
    export(model, tokenizer, out, max_shard_size="60KB")
    assert (out / "model.safetensors.index.json").is_file()
    export(model, tokenizer, out, overwrite=True)
    assert (out / "model.safetensors").is_file()
    assert not list(out.glob("model-*")) and not (out / "model.safetensors.index.json").exists()
    assert _no_leftovers(tmp_path)


def test_bad_arguments_leave_no_folder(tmp_path, bert):
    model, tokenizer = bert
    with pytest.raises(ExportError, match="metrics need the dataset they were measured on: pass eval_dataset"):
        export(model, tokenizer, tmp_path / "a", metrics={"accuracy": 0.5})
    with pytest.raises(ExportError, match="metric 'accuracy' must be a number"):
        export(model, tokenizer, tmp_path / "b", metrics={"accuracy": "high"}, eval_dataset="glue")
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\nnot json\n')
    with pytest.raises(ExportError, match=r"log.jsonl:2 is not valid JSON"):
        export(model, tokenizer, tmp_path / "c", training_logs=log)
    with pytest.raises(ExportError, match="does not exist"):
        export(model, tokenizer, tmp_path / "d", training_logs=tmp_path / "missing.jsonl")
    with pytest.raises(ExportError, match="invalid repo id 'no-slash'"):
        export(model, tokenizer, tmp_path / "e", repo_id="no-slash")
    with pytest.raises(ExportError, match="cannot save the weights"):
        export(model, tokenizer, tmp_path / "f", max_shard_size="lots")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]


def test_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path, wordpiece_tokenizer):
    arch, _, cls = next(c for c in CASES if c[0].name == "bert" and c[1] == "masked-lm")
    model = tiny_model(arch, cls, vocab_size=50)
    with pytest.raises(ExportError, match=rf"tokenizer has {len(wordpiece_tokenizer)} tokens but the model's "
                                          rf"vocabulary has 50.*resize_token_embeddings"):
        export(model, wordpiece_tokenizer, tmp_path / "out")
    with pytest.warns(UserWarning, match="exporting without a tokenizer"):
        export(model, None, tmp_path / "out")


def test_check_export_folder_names_what_is_missing(tmp_path, bert):
    model, tokenizer = bert
    good = export(model, tokenizer, tmp_path / "good", max_shard_size="60KB")
    assert Path("config.json") in check_export_folder(good)

    def broken(name, change):
        import shutil

        folder = tmp_path / name
        shutil.copytree(good, folder)
        change(folder)
        return folder

    cases = [
        (lambda f: (f / "config.json").unlink(), "has no config.json: it is not an exported model"),
        (lambda f: (f / "config.json").write_text("{"), "is not valid JSON"),
        (lambda f: next(f.glob("model-00001-*")).unlink(), "missing weight shards listed in model.safetensors.index"),
        (lambda f: [p.unlink() for p in f.glob("model*")], r"has no model weights \(model.safetensors"),
        (lambda f: next(f.glob("modeling_*.py")).unlink(), r"missing the model code modeling_xfmr_bert.py"),
        (lambda f: (f / "pytorch_model.bin").write_bytes(b"x"), "contains pickle files"),
        (lambda f: (f / "config.json").write_text(json.dumps({"model_type": "xfmr-bert"})), "has no auto_map"),
    ]
    for i, (change, message) in enumerate(cases):
        with pytest.raises(ExportError, match=message):
            check_export_folder(broken(f"broken{i}", change))
    with pytest.raises(ExportError, match="is not a folder"):
        check_export_folder(tmp_path / "nowhere")


def test_generation_config_is_written_for_models_that_generate(tmp_path):
    """Generative architectures get generation_config.json (the all-architecture test checks each one that
    exists; this pins the rule on a transformers decoder)."""
    from hf_xfmr.hub.export import _write_generation_config

    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                     bos_token_id=1, eos_token_id=2)
    decoder = transformers.GPT2LMHeadModel(config)
    _write_generation_config(tmp_path, decoder)
    written = json.loads((tmp_path / "generation_config.json").read_text())
    assert written["bos_token_id"] == 1 and written["eos_token_id"] == 2
    encoder = tiny_model(*next((a, c) for a, t, c in CASES if t == "base"))
    _write_generation_config(tmp_path / "encoder", encoder)
    assert not (tmp_path / "encoder").exists()
