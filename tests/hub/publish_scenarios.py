"""Child process of the hub tests: publish to the test Hub server, scenario after scenario.

    python publish_scenarios.py CONFIG.json

HF_ENDPOINT, HF_HOME, HF_TOKEN and (for LFS) HF_HUB_DISABLE_XET are set by the parent before this
process imports huggingface_hub. CONFIG gives the mode ("xet" or "lfs"), the exported folders and
where to write the JSON report; every scenario's result (or error) and the server's counters around
it go into the report, and the test asserts on them.
"""

import contextlib
import io
import json
import os
import sys
import traceback
import urllib.request
from pathlib import Path

import hf_xfmr.hub as hub
from hf_xfmr import cli

config = json.loads(Path(sys.argv[1]).read_text())
endpoint = os.environ["HF_ENDPOINT"]
mode = config["mode"]
folders = config["folders"]
report = {"mode": mode, "steps": {}}


def server(path: str, payload: dict | None = None) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(endpoint + path, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def fail(method: str, path: str, status: int, times: int = 1) -> None:
    server("/_test/fail", {"method": method, "path": path, "status": status, "times": times})


def step(name: str, call):
    """Run one scenario; record its result or error and the server counters before and after."""
    entry = report["steps"][name] = {"before": server("/_test/stats")}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            value = call()
        entry["ok"] = True
        if hasattr(value, "oid"):
            entry["oid"], entry["commit_url"], entry["pr_url"] = value.oid, value.commit_url, value.pr_url
        else:
            entry["value"] = value
    except BaseException as error:  # noqa: BLE001  (SystemExit from the CLI included)
        entry["ok"] = False
        entry["error_type"] = type(error).__name__
        entry["error"] = str(error)
        entry["traceback"] = traceback.format_exc()
    entry["stdout"], entry["stderr"] = out.getvalue(), err.getvalue()
    entry["after"] = server("/_test/stats")


def repo(name: str) -> str:
    return f"alice/{mode}-{name}"


def without_token(call):
    token = os.environ.pop("HF_TOKEN")
    try:
        return call()
    finally:
        os.environ["HF_TOKEN"] = token


def cli_main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


step("publish", lambda: hub.publish(folders["bert"], repo("bert")))
step("republish", lambda: hub.publish(folders["bert"], repo("bert")))
step("sharded", lambda: hub.publish(folders["sharded"], repo("sharded"), private=True))
step("replace_sharded", lambda: hub.publish(folders["bert"], repo("sharded")))  # old shards are deleted
step("branch", lambda: hub.publish(folders["bert"], repo("branch"), revision="dev"))
step("pull_request", lambda: hub.publish(folders["bert"], repo("pr"), create_pr=True))
step("no_token", lambda: without_token(lambda: hub.publish(folders["bert"], repo("no-token"))))
step("bad_token", lambda: hub.publish(folders["bert"], repo("bad-token"), token=config["bad_token"]))
step("unreachable", lambda: hub.publish(folders["bert"], repo("unreachable"), endpoint=config["dead_endpoint"],
                                        max_retries=1, retry_wait=0.01))
step("invalid_repo_id", lambda: hub.publish(folders["bert"], "not a valid repo id"))
step("missing_weights", lambda: hub.publish(folders["no_weights"], repo("broken")))
step("missing_config", lambda: hub.publish(folders["no_config"], repo("broken")))

# A server error in the middle of the upload (LFS: the object PUT; Xet: the storage token), once:
# the publish fails without a commit, and publishing again completes it.
if mode == "lfs":
    fail("PUT", r"^/_lfs/objects/", 507)
else:
    fail("GET", r"/xet-write-token/", 507, times=5)  # hf_xet asks twice; the parent allows it 1 attempt
step("mid_upload_failure", lambda: hub.publish(folders["fresh1"], repo("partial"), max_retries=0))
server("/_test/clear", {})
step("resume", lambda: hub.publish(folders["fresh1"], repo("partial")))

# A transient error on the commit itself is retried: exactly one commit lands.
fail("POST", r"/commit/", 503)
step("transient", lambda: hub.publish(folders["fresh2"], repo("transient"), retry_wait=0.01))



def publish_a_model():
    """publish(model, ...) exports on the fly (with the repo id in the card) and uploads."""
    import torch
    from transformers import AutoTokenizer

    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    torch.manual_seed(3)
    model = XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny")).eval()
    tokenizer = AutoTokenizer.from_pretrained(folders["bert"])
    return hub.publish(model, repo("from-model"), tokenizer=tokenizer, datasets=["wikitext"])


step("publish_model", publish_a_model)


def with_login_token(call):
    """No HF_TOKEN, but the token file `hf auth login` writes (HF_HOME/token): publish finds it there."""
    from huggingface_hub import constants

    token = os.environ.pop("HF_TOKEN")
    path = Path(constants.HF_TOKEN_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token)
    try:
        return call()
    finally:
        path.unlink()
        os.environ["HF_TOKEN"] = token


if mode == "lfs":
    step("login_token", lambda: with_login_token(lambda: hub.publish(folders["bert"], repo("login"))))

if mode == "lfs":
    step("cli_publish", lambda: cli_main(["publish", folders["bert"], "--repo-id", repo("cli"), "--private",
                                          "--commit-message", "first upload"]))
    step("cli_bad_repo_id", lambda: cli_main(["publish", folders["bert"], "--repo-id", "alice/"]))
    step("cli_missing_folder", lambda: cli_main(["publish", folders["bert"] + "-missing", "--repo-id", repo("x")]))

    # The training commands publish at the end: a 2-step pretraining, then a 2-step finetuning of its model.
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    work = Path(config["report"]).parent
    step("cli_pretrain_push", lambda: cli_main([
        "pretrain", "--arch", "bert", "--max_steps", "2", "--max_documents", "30", "--vocab_size", "300",
        "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--save_steps", "0", "--no_progress_bar",
        "--no_report_to_tensorboard", "--output_dir", str(work / "pretrain"), "--push_to_hub", repo("pretrained")]))
    rows = [("a good happy day", 1), ("a bad sad day", 0)] * 8
    (work / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    step("cli_finetune_push", lambda: cli_main([
        "finetune", "--model_name_or_path", str(work / "pretrain"), "--train_file", str(work / "train.csv"),
        "--validation_file", str(work / "train.csv"), "--max_steps", "2", "--eval_steps", "2", "--disable_tqdm",
        "--max_seq_length", "32", "--output_dir", str(work / "finetune"), "--push_to_hub", repo("finetuned")]))

Path(config["report"]).write_text(json.dumps(report, indent=2))
