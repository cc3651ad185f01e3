"""Child process of test_load_by_id.py: load transformers checkpoints by Hub repo id from the test Hub server.

    python load_by_id_scenarios.py CONFIG.json

HF_ENDPOINT, HF_HOME, HF_TOKEN, HF_HUB_OFFLINE and HF_HUB_DISABLE_XET are set by the parent before this
process imports huggingface_hub. CONFIG gives the mode ("online": upload the checkpoints, then load them
by id; "offline": load them again from the cache only), the checkpoint folders, the inputs and where to
write the report. Each scenario's result or error, its warnings and its output tensors go into the report
and an outputs file; the test asserts on them.
"""

import contextlib
import io
import json
import os
import sys
import traceback
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import hf_xfmr
from hf_xfmr import cli
from hf_xfmr.models import bart, bert, gpt, modernbert, roberta, t5

config = json.loads(Path(sys.argv[1]).read_text())
mode = config["mode"]
families = config["families"]
inputs = load_file(config["inputs"])
report = {"mode": mode, "steps": {}}
outputs = {}
CLASSES = {  # the hf_xfmr class of each uploaded checkpoint's own head
    "bert": bert.XfmrBertForMaskedLM, "roberta": roberta.XfmrRobertaForMaskedLM, "gpt2": gpt.XfmrGPTForCausalLM,
    "t5": t5.XfmrT5ForConditionalGeneration, "bart": bart.XfmrBartForConditionalGeneration,
    "modernbert": modernbert.XfmrModernBertForMaskedLM,
}


def model_inputs(family: str) -> dict:
    batch = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    if family in ("t5", "bart"):
        batch["decoder_input_ids"] = inputs["decoder_input_ids"]
    return batch


def run(model, family: str) -> torch.Tensor:
    torch.set_num_threads(1)
    with torch.no_grad():
        return model.eval()(**model_inputs(family)).logits.contiguous()


def step(name: str, call):
    """Run one scenario; record its result (a model's type, config and logits) or its error, and warnings."""
    entry = report["steps"][name] = {}
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = call()
        entry["ok"] = True
        if isinstance(value, tuple):  # (model, family)
            model, family = value
            outputs[name] = run(model, family)
            entry.update(type=type(model).__name__, model_type=model.config.model_type,
                         num_labels=model.config.num_labels, bos_token_id=getattr(model.config, "bos_token_id", None))
        else:
            entry["value"] = value if isinstance(value, (int, str, type(None))) else type(value).__name__
        entry["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    except BaseException as error:  # noqa: BLE001  (SystemExit from the CLI included)
        entry["ok"] = False
        entry["error_type"] = type(error).__name__
        entry["error"] = str(error)
        entry["traceback"] = traceback.format_exc()
    entry["stdout"], entry["stderr"] = out.getvalue(), err.getvalue()


def cli_main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


def repo(family: str) -> str:
    return families[family]["repo"]


def upload():
    from huggingface_hub import HfApi

    api = HfApi()
    for entry in config["uploads"]:
        api.create_repo(entry["repo"], private=entry.get("private", False), exist_ok=True)
        if entry.get("branch"):
            api.create_branch(entry["repo"], branch=entry["branch"], exist_ok=True)
        api.upload_folder(repo_id=entry["repo"], folder_path=entry["folder"], revision=entry.get("branch"))
    return len(config["uploads"])


if mode == "online":
    step("upload", upload)

# Every family, by id: `hf_xfmr.from_transformers` and the hf_xfmr class's own `from_pretrained`.
for family, cls in CLASSES.items():
    step(f"from_transformers/{family}", lambda f=family: (hf_xfmr.from_transformers(repo(f)), f))
    step(f"from_pretrained/{family}", lambda f=family, c=cls: (c.from_pretrained(repo(f)), f))
step("revision", lambda: (hf_xfmr.from_transformers(repo("gpt2"), revision=config["branch"]), "gpt2"))

if mode == "online":
    # The drop-in use: a new head on a pretrained body, initialised as transformers does and named in a warning.
    step("new_head", lambda: (bert.XfmrBertForSequenceClassification.from_pretrained(repo("bert"), num_labels=2),
                              "bert"))
    # Without a token first: once cached, huggingface_hub serves the cached copy to anyone on this machine.
    step("private_without_token", lambda: hf_xfmr.from_transformers(config["private"], token=False))
    step("private_with_token", lambda: (hf_xfmr.from_transformers(config["private"]), "bert"))
    step("missing_repo", lambda: hf_xfmr.from_transformers("alice/no-such-model"))
    step("missing_revision", lambda: hf_xfmr.from_transformers(repo("bert"), revision="no-such-branch"))
    step("pickles_only", lambda: hf_xfmr.from_transformers(config["pickles"]))
    step("pickles_only_from_pretrained", lambda: bert.XfmrBertForMaskedLM.from_pretrained(config["pickles"]))
    step("unsupported_type", lambda: hf_xfmr.from_transformers(config["unsupported"]))
    step("wrong_family", lambda: gpt.XfmrGPTForCausalLM.from_pretrained(repo("bert")))

    work = Path(config["work"])
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    step("cli_finetune", lambda: cli_main([
        "finetune", "--model_name_or_path", repo("bert"), "--train_file", config["csv"], "--validation_file",
        config["csv"], "--max_steps", "2", "--eval_steps", "2", "--per_device_train_batch_size", "8",
        "--max_seq_length", "16", "--disable_tqdm", "--use_cpu", "--output_dir", str(work / "finetune")]))
    step("cli_finetune_missing", lambda: cli_main([
        "finetune", "--model_name_or_path", "alice/no-such-model", "--train_file", config["csv"],
        "--output_dir", str(work / "finetune-missing")]))
    step("cli_convert", lambda: cli_main(["convert", repo("gpt2"), str(work / "converted-gpt2")]))
    step("cli_convert_revision", lambda: cli_main(["convert", repo("gpt2"), str(work / "converted-gpt2-v2"),
                                                   "--revision", config["branch"]]))
    step("cli_distill", lambda: cli_main([
        "distill", "--teacher", repo("roberta"), "--output_dir", str(work / "distill"), "--corpus", config["text"],
        "--max_steps", "1", "--batch_size", "2", "--max_seq_length", "16", "--eval_sequences", "0",
        "--device", "cpu"]))
    step("cli_pretrain", lambda: cli_main([
        "pretrain", "--arch", "bert", "--model_path", repo("bert"), "--dataset", config["text"], "--max_steps", "1",
        "--per_device_train_batch_size", "2", "--max_seq_length", "16", "--eval_fraction", "0", "--save_steps", "0",
        "--no_progress_bar", "--no_report_to_tensorboard", "--output_dir", str(work / "pretrain")]))
else:
    step("not_cached_offline", lambda: hf_xfmr.from_transformers("alice/never-downloaded"))

    def network_down():
        """HF_HUB_OFFLINE unset, but the Hub unreachable (HF_ENDPOINT is a closed port)."""
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = False  # read at import; is_offline_mode() reads this module attribute
        try:
            return hf_xfmr.from_transformers("alice/never-downloaded")
        finally:
            constants.HF_HUB_OFFLINE = True

    step("not_cached_network_down", network_down)

save_file(outputs, config["outputs"])
Path(config["report"]).write_text(json.dumps(report, indent=2))
