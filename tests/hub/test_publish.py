"""`hf_xfmr.hub.publish` and `hf-xfmr publish` over real HTTP, against the test Hub server.

Uploads run in child processes (HF_ENDPOINT / HF_HOME / HF_HUB_DISABLE_XET are read when
huggingface_hub is imported): one with Xet (hf_xet writes to a `local://` storage folder the server
reads), one with LFS (HF_HUB_DISABLE_XET=1). A third child, where hf_xfmr is not importable, loads
the published repos with `AutoModel...from_pretrained(repo_id, trust_remote_code=True)` through the
same server and the outputs are compared with the exporting models.
"""

import ast
import hashlib
import json
import shutil
import socket
import urllib.request
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ._childlib import run_model
from .conftest import (
    TOKEN,
    auto_class_name,
    child_env,
    export_quietly,
    model_cases,
    model_inputs,
    run_child,
    tiny_model,
)
from .hub_server import HubServer, parse_shard

# One worker runs this module: one test server, one set of child processes.
pytestmark = pytest.mark.xdist_group("hub_publish")

BAD_TOKEN = "hf_wrong_secret_9d1c"


def _case(arch_name: str, task: str):
    return next(c for c in model_cases() if c[0].name == arch_name and c[1] == task)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubServer(tmp_path_factory.mktemp("hub-storage"), tokens={TOKEN: "alice"}) as server:
        yield server


@pytest.fixture(scope="module")
def models(tmp_path_factory, wordpiece_tokenizer):
    """Exported folders (and the models) the scenarios publish."""
    root = tmp_path_factory.mktemp("publish-exports")
    arch, task, cls = _case("bert", "masked-lm")
    bert = tiny_model(arch, cls)
    arch_r, task_r, cls_r = _case("roberta", "sequence-classification")
    roberta = tiny_model(arch_r, cls_r, num_labels=2)
    folders = {
        "bert": export_quietly(bert, wordpiece_tokenizer, root / "bert", datasets=["wikitext"]),
        "sharded": export_quietly(roberta, wordpiece_tokenizer, root / "sharded", max_shard_size="40KB"),
        "fresh1": export_quietly(tiny_model(arch, cls, seed=1), wordpiece_tokenizer, root / "fresh1"),
        "fresh2": export_quietly(tiny_model(arch, cls, seed=2), wordpiece_tokenizer, root / "fresh2"),
    }
    folders["no_weights"] = root / "no_weights"
    shutil.copytree(folders["bert"], folders["no_weights"])
    (folders["no_weights"] / "model.safetensors").unlink()
    folders["no_config"] = root / "no_config"
    shutil.copytree(folders["bert"], folders["no_config"])
    (folders["no_config"] / "config.json").unlink()
    return {"root": root, "folders": {k: str(v) for k, v in folders.items()},
            "bert": (bert, task), "roberta": (roberta, task_r)}


def _publish_child(hub, models, mode: str, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp(f"publish-{mode}")
    extra = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    if mode == "lfs":
        extra["HF_HUB_DISABLE_XET"] = "1"
    else:  # hf_xet's own retries of a failing storage token would take minutes: one attempt
        extra.update(HF_XET_CLIENT_RETRY_MAX_ATTEMPTS="1", HF_XET_CLIENT_RETRY_BASE_DELAY="10ms")
    config = {"mode": mode, "folders": models["folders"], "report": str(work / "report.json"),
              "bad_token": BAD_TOKEN, "dead_endpoint": f"http://127.0.0.1:{_closed_port()}"}
    proc = run_child("publish_scenarios.py", config, work / "config.json", child_env(work / "hf_home", **extra))
    report = json.loads((work / "report.json").read_text())
    report["process_output"] = proc.stdout + proc.stderr
    return report


@pytest.fixture(scope="module")
def xet(hub, models, tmp_path_factory):
    return _publish_child(hub, models, "xet", tmp_path_factory)


@pytest.fixture(scope="module")
def lfs(hub, models, tmp_path_factory):
    return _publish_child(hub, models, "lfs", tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(hub, models, xet, lfs, tmp_path_factory):
    """Load the published repos in a child where hf_xfmr is not importable (no token: public repos)."""
    work = tmp_path_factory.mktemp("load")
    bert, bert_task = models["bert"]
    roberta, roberta_task = models["roberta"]
    cases, references = [], {}
    for name, repo, model, task, extra in [
        ("xet-bert", "alice/xet-bert", bert, bert_task, dict(refusal=True, readme=True, tokenizer=True)),
        ("lfs-bert", "alice/lfs-bert", bert, bert_task, dict(tokenizer=True)),
        ("lfs-branch", "alice/lfs-branch", bert, bert_task, dict(revision="dev")),
        ("xet-pr", "alice/xet-pr", bert, bert_task, dict(revision="refs/pr/1")),
    ]:
        inputs = model_inputs(model, task)
        save_file(inputs, work / f"{name}-inputs.safetensors")
        references[name] = run_model(model, inputs, generate=False)
        cases.append(dict(name=name, source=repo, auto_class=auto_class_name(task), output=str(work / f"{name}.out"),
                          inputs=str(work / f"{name}-inputs.safetensors"), **extra))
    manifest = {"cases": cases, "report": str(work / "report.json")}
    run_child("load_remote.py", manifest, work / "manifest.json",
              child_env(work / "hf_home", HF_ENDPOINT=hub.url))
    report = json.loads((work / "report.json").read_text())
    return {"report": report, "references": references, "cases": {c["name"]: c for c in cases}}


def _ok(report, step):
    entry = report["steps"][step]
    assert entry["ok"], f"{report['mode']} {step} failed: {entry.get('traceback')}"
    return entry


def _failed(report, step, error_type="PublishError"):
    entry = report["steps"][step]
    assert not entry["ok"], f"{report['mode']} {step} should have failed"
    assert entry["error_type"] == error_type, entry["traceback"]
    return entry


# ----------------------------------------------------------------------------------------------
# Upload, in one commit, through Xet and LFS
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_publish_uploads_the_folder_in_one_commit(mode, request, models):
    report = request.getfixturevalue(mode)
    entry = _ok(report, "publish")
    repo = f"alice/{mode}-bert"
    before, after = entry["before"], entry["after"]
    assert repo not in before["repos"]
    assert after["commits"][repo] == 2  # the repo's initial commit + ONE commit with the whole folder
    local = sorted(p.name for p in Path(models["folders"]["bert"]).iterdir())
    assert after["files"][repo]["main"] == sorted([".gitattributes", *local])
    assert after["refs"][repo]["main"] == entry["oid"]
    assert entry["commit_url"].endswith(f"/{repo}/commit/{entry['oid']}")
    if mode == "xet":
        assert after["xorbs"] > before["xorbs"] and after["lfs_objects"] == before["lfs_objects"]
    else:
        assert after["lfs_objects"] > before["lfs_objects"] and after["xorbs"] == before["xorbs"]


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_republishing_unchanged_files_adds_no_blobs_and_no_commit(mode, request):
    report = request.getfixturevalue(mode)
    first, again = _ok(report, "publish"), _ok(report, "republish")
    assert again["oid"] == first["oid"]
    for key in ("blobs", "lfs_objects", "xorbs", "regular_blobs", "commits"):
        assert again["after"][key] == again["before"][key], key


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_sharded_private_branch_and_pull_request(mode, request, models):
    report = request.getfixturevalue(mode)
    sharded = _ok(report, "sharded")["after"]
    repo = f"alice/{mode}-sharded"
    assert sharded["private"][repo] is True
    shards = [f for f in sharded["files"][repo]["main"] if f.startswith("model-")]
    assert len(shards) > 1 and "model.safetensors.index.json" in sharded["files"][repo]["main"]

    replaced = _ok(report, "replace_sharded")["after"]["files"][repo]["main"]
    local = sorted(p.name for p in Path(models["folders"]["bert"]).iterdir())
    assert replaced == sorted([".gitattributes", *local])  # the old shards and their index are gone

    branch = _ok(report, "branch")
    repo = f"alice/{mode}-branch"
    assert branch["after"]["refs"][repo]["dev"] == branch["oid"]
    assert branch["after"]["files"][repo]["main"] == [".gitattributes"]  # main untouched
    assert "config.json" in branch["after"]["files"][repo]["dev"]

    pr = _ok(report, "pull_request")
    repo = f"alice/{mode}-pr"
    assert pr["pr_url"].endswith(f"/{repo}/discussions/1")
    assert pr["after"]["files"][repo]["main"] == [".gitattributes"]
    assert pr["after"]["refs"][repo]["refs/pr/1"] == pr["oid"]


# ----------------------------------------------------------------------------------------------
# Failures: clear errors, never a commit claiming to be complete
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_upload_without_a_token_fails_cleanly(mode, request):
    report = request.getfixturevalue(mode)
    entry = _failed(report, "no_token")
    assert "no Hugging Face token found" in entry["error"] and "HF_TOKEN" in entry["error"]
    assert entry["after"] == entry["before"]  # nothing reached the server's state

    entry = _failed(report, "bad_token")
    assert "rejected the token (401 Unauthorized)" in entry["error"]
    assert f"alice/{mode}-bad-token" not in entry["after"]["repos"]


def test_the_token_of_hf_auth_login_is_used_when_hf_token_is_unset(lfs):
    entry = _ok(lfs, "login_token")
    assert entry["after"]["commits"]["alice/lfs-login"] == 2
    assert "config.json" in entry["after"]["files"]["alice/lfs-login"]["main"]


def test_the_token_is_never_printed(xet, lfs):
    for report in (xet, lfs):
        assert TOKEN not in json.dumps(report) and BAD_TOKEN not in json.dumps(report)
        assert TOKEN not in report["process_output"] and BAD_TOKEN not in report["process_output"]


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_bad_input_and_unreachable_endpoint(mode, request):
    report = request.getfixturevalue(mode)
    entry = _failed(report, "unreachable")
    assert "could not reach the Hub at http://127.0.0.1:" in entry["error"] and "HF_ENDPOINT" in entry["error"]
    entry = _failed(report, "invalid_repo_id")
    assert "invalid repo id 'not a valid repo id'" in entry["error"]
    entry = _failed(report, "missing_weights")
    assert "has no model weights (model.safetensors" in entry["error"]
    entry = _failed(report, "missing_config")
    assert "has no config.json" in entry["error"]
    for step in ("invalid_repo_id", "missing_weights", "missing_config"):
        assert report["steps"][step]["after"] == report["steps"][step]["before"]


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_server_error_mid_upload_leaves_no_commit_and_publishing_again_completes(mode, request):
    report = request.getfixturevalue(mode)
    repo = f"alice/{mode}-partial"
    entry = _failed(report, "mid_upload_failure")
    assert "507" in entry["error"] and "Nothing was committed; publish again" in entry["error"], entry["error"]
    assert entry["after"]["commits"][repo] == 1  # only the repo's initial commit
    assert entry["after"]["files"][repo]["main"] == [".gitattributes"]
    resumed = _ok(report, "resume")
    assert resumed["after"]["commits"][repo] == 2
    assert "model.safetensors" in resumed["after"]["files"][repo]["main"]


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_transient_commit_error_is_retried_into_exactly_one_commit(mode, request, hub):
    report = request.getfixturevalue(mode)
    entry = _ok(report, "transient")
    repo = f"alice/{mode}-transient"
    assert entry["after"]["commits"][repo] == 2
    statuses = [status for method, path, status in hub.state.requests
                if method == "POST" and path.startswith(f"/api/models/{repo}/commit/")]
    assert statuses == [503, 200]


def test_cli_publish(lfs):
    entry = _ok(lfs, "cli_publish")
    assert entry["value"] == 0
    assert "published" in entry["stdout"] and "alice/lfs-cli@main" in entry["stdout"]
    assert entry["after"]["private"]["alice/lfs-cli"] is True
    bad = _ok(lfs, "cli_bad_repo_id")
    assert bad["value"] == 2 and "hf-xfmr publish: error: invalid repo id 'alice/'" in bad["stderr"]
    missing = _ok(lfs, "cli_missing_folder")
    assert missing["value"] == 2 and "is not a folder" in missing["stderr"]


@pytest.mark.parametrize("command, repo, model_class", [
    ("pretrain", "alice/lfs-pretrained", "XfmrBertForMaskedLM"),
    ("finetune", "alice/lfs-finetuned", "XfmrBertForSequenceClassification"),
])
def test_training_commands_publish_at_the_end(lfs, hub, command, repo, model_class):
    entry = _ok(lfs, f"cli_{command}_push")
    assert entry["value"] == 0, entry["stderr"][-3000:]
    assert entry["after"]["commits"][repo] == 2
    files = set(entry["after"]["files"][repo]["main"])
    assert {"config.json", "model.safetensors", "README.md", "loss_curve.png", "tokenizer.json",
            "modeling_xfmr_bert.py"} <= files
    published = hub.state.repos[repo]
    commit = published.commits[published.refs["main"]]
    assert json.loads(commit.files["config.json"].data)["architectures"] == [model_class]
    readme = commit.files["README.md"].data.decode()
    assert f'from_pretrained("{repo}", trust_remote_code=True)' in readme and "accuracy" in readme


# ----------------------------------------------------------------------------------------------
# Download: the published repos load where hf_xfmr is not installed
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["xet-bert", "lfs-bert", "lfs-branch", "xet-pr"])
def test_published_model_loads_without_hf_xfmr_with_identical_outputs(loaded, name):
    result = loaded["report"]["cases"][name]
    assert "error" not in result, result["error"]
    assert result["module"].startswith("transformers_modules.alice.")
    outputs = load_file(loaded["cases"][name]["output"])
    reference = loaded["references"][name]
    assert sorted(outputs) == sorted(reference)
    for key in reference:
        assert torch.equal(outputs[key], reference[key]), key
    assert loaded["report"]["hf_xfmr_importable"] is False


def test_published_card_sample_runs_and_names_the_repo(loaded):
    result = loaded["report"]["cases"]["xet-bert"]
    assert "error" not in result, result["error"]
    assert len(ast.literal_eval(result["readme_output"].strip())) == 5
    assert result["tokenizer_vocab"] > 0
    refusal = result["refusal"]
    assert all(m is not None and "trust_remote_code=True" in m for m in refusal.values()), refusal


def test_server_serves_xet_files_over_plain_http_and_records_their_sha256(hub, xet, models):
    """A client without hf_xet downloads Xet-stored files with a plain GET: the server rebuilds them."""
    expected = Path(models["folders"]["bert"], "model.safetensors").read_bytes()
    with urllib.request.urlopen(f"{hub.url}/alice/xet-bert/resolve/main/model.safetensors") as response:
        assert response.headers["X-Xet-Hash"]
        assert response.read() == expected
    shards = list(hub.state.xet_dir.rglob("*.mdb"))
    recorded = {}
    for shard in shards:
        recorded.update(parse_shard(shard.read_bytes()))
    assert hashlib.sha256(expected).hexdigest() in recorded


@pytest.mark.parametrize("mode", ["xet", "lfs"])
def test_publishing_a_model_exports_it_with_the_repo_id_in_the_card(mode, request, hub, models):
    report = request.getfixturevalue(mode)
    entry = _ok(report, "publish_model")
    repo = f"alice/{mode}-from-model"
    files = entry["after"]["files"][repo]["main"]
    assert {"config.json", "model.safetensors", "modeling_xfmr_bert.py", "tokenizer.json", "README.md"} <= set(files)
    readme = hub.state.repos[repo].commits[entry["oid"]].files["README.md"].data.decode()
    assert f'AutoModelForMaskedLM.from_pretrained("{repo}", trust_remote_code=True)' in readme
    # A folder exported without a repo id gets it filled in on the Hub; the local folder keeps the placeholder.
    published = hub.state.repos[f"alice/{mode}-bert"]
    remote = published.commits[published.refs["main"]].files["README.md"].data.decode()
    assert f'from_pretrained("alice/{mode}-bert", trust_remote_code=True)' in remote
    assert "<your-username>/<model-name>" in Path(models["folders"]["bert"], "README.md").read_text()
