"""`hf-xfmr export` (in process) and the publish command's argument handling; uploads through the
CLI run against the test Hub server in test_publish.py."""

import json

import pytest
import torch
import transformers

from tests.cli_run import run_cli as run

from .conftest import model_cases, tiny_model


@pytest.mark.parametrize("command, words", [
    ("export", ["CHECKPOINT", "FOLDER", "--task", "--tokenizer", "--metric", "--training-log", "--max-shard-size",
                "--overwrite", "trust_remote_code=True"]),
    ("publish", ["FOLDER", "--repo-id", "--revision", "--private", "--create-pr", "HF_TOKEN", "ONE commit"]),
])
def test_help(command, words, capsys):
    status, out, _ = run([command, "--help"], capsys)
    assert status == 0
    for word in words:
        assert word in out, word


def test_export_an_hf_xfmr_checkpoint_with_card_options(tmp_path, capsys, wordpiece_tokenizer):
    arch, _, cls = next(c for c in model_cases() if c[0].name == "bert" and c[1] == "sequence-classification")
    ckpt = tmp_path / "ckpt"
    tiny_model(arch, cls, num_labels=2).save_pretrained(ckpt)
    wordpiece_tokenizer.save_pretrained(ckpt)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1 / s}) + "\n" for s in range(1, 6)))
    status, out, err = run(["export", str(ckpt), str(tmp_path / "out"), "--metric", "accuracy=0.75",
                            "--eval-dataset", "glue", "--eval-dataset-config", "sst2", "--dataset", "glue",
                            "--training", "learning_rate=5e-4", "--training", "optimizer=adamw",
                            "--training-log", str(log), "--repo-id", "alice/sst2"], capsys)
    assert status == 0, err
    assert "exported XfmrBertForSequenceClassification (xfmr-bert)" in out
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"loss_curve.png", "tokenizer.json", "modeling_xfmr_bert.py", "README.md"} <= files
    readme = (tmp_path / "out" / "README.md").read_text()
    assert 'from_pretrained("alice/sst2", trust_remote_code=True)' in readme
    assert "| optimizer | adamw |" in readme and "| learning_rate | 0.0005 |" in readme and "accuracy" in readme
    status, _, err = run(["export", str(ckpt), str(tmp_path / "out")], capsys)
    assert status == 2 and "pass overwrite=True (--overwrite)" in err
    status, _, err = run(["export", str(ckpt), str(tmp_path / "out"), "--overwrite"], capsys)
    assert status == 0, err


def test_export_converts_a_transformers_checkpoint(tmp_path, capsys):
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "hf")
    status, out, err = run(["export", str(tmp_path / "hf"), str(tmp_path / "out")], capsys)
    assert status == 0, err
    assert "XfmrBertForMaskedLM (xfmr-bert)" in out and "without a tokenizer" in err
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "xfmr-bert"


def test_export_and_publish_bad_input(tmp_path, capsys):
    status, _, err = run(["export", str(tmp_path / "missing"), str(tmp_path / "out")], capsys)
    assert status == 2 and "does not exist" in err
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({"model_type": "xfmr-bert"}))
    status, _, err = run(["export", str(tmp_path / "ckpt"), str(tmp_path / "out"), "--metric", "accuracy=high"],
                         capsys)
    assert status == 2 and "--metric accuracy: the value must be a number, got 'high'" in err
    status, _, err = run(["export", str(tmp_path / "ckpt"), str(tmp_path / "out")], capsys)
    assert status == 2 and "cannot load" in err
    status, _, err = run(["publish", str(tmp_path), "--repo-id", "no-slash"], capsys)
    assert status == 2 and "invalid repo id 'no-slash'" in err
    status, _, err = run(["publish", str(tmp_path)], capsys)
    assert status == 2 and "--repo-id" in err


def test_publish_passes_every_option_on(tmp_path, capsys, monkeypatch):
    """The options reach `hf_xfmr.hub.publish` (which test_publish.py runs against the test Hub server);
    a pull request is reported by its URL."""
    import hf_xfmr.hub

    calls = []

    class Commit:
        commit_url, pr_url = "http://hub/alice/x/commit/abc", "http://hub/alice/x/discussions/1"

    def fake_publish(folder, repo_id, **kwargs):
        calls.append((folder, repo_id, kwargs))
        return Commit()

    monkeypatch.setattr(hf_xfmr.hub, "publish", fake_publish)
    status, out, err = run(["publish", str(tmp_path), "--repo-id", "alice/x", "--revision", "dev", "--private",
                            "--create-pr", "--commit-message", "v2", "--keep-stale", "--max-retries", "5"], capsys)
    assert status == 0, err
    ((folder, repo_id, kwargs),) = calls
    assert (folder, repo_id) == (str(tmp_path), "alice/x")
    assert kwargs == dict(revision="dev", private=True, create_pr=True, commit_message="v2", max_retries=5,
                          delete_stale=False)
    assert "opened a pull request on alice/x@dev: http://hub/alice/x/discussions/1" in out
    calls.clear()
    status, _, err = run(["publish", str(tmp_path), "--repo-id", "alice/x"], capsys)
    assert status == 0, err
    assert calls[0][2] == dict(revision=None, private=None, create_pr=False, commit_message=None, max_retries=3,
                               delete_stale=True)
