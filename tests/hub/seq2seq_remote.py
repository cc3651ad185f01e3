"""Helpers of the seq2seq tests (tests/training/test_finetune_seq2seq.py, tests/hub/test_seq2seq_by_id.py): generate
text with our model, and check that an export (a folder or a published repo) loaded where hf_xfmr is not importable
gives our outputs and generates our text."""

import json
from pathlib import Path

import torch

from ._childlib import run_model
from .conftest import child_env, run_child


def generate_texts(model, tokenizer, sources: list[str], **settings) -> list[str]:
    """`model.generate` on the right-padded batch of `sources` (its generation config, updated by `settings`),
    decoded without special tokens; single-threaded, as the child processes run."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            ids = model.eval().generate(**batch, **settings)
    finally:
        torch.set_num_threads(threads)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def generations_without_hf_xfmr(cases: dict[str, str], sources: list[str], work: Path, env: dict) -> dict:
    """{case: report} of tests/hub/generate_remote.py: each case (a folder or a repo id) loaded with transformers'
    Auto classes and `trust_remote_code=True` in a process where hf_xfmr cannot be imported, generating for
    `sources` with its own generation config (`texts`, `ids`, `class`, `module`, and `readme` for a repo id)."""
    work.mkdir(parents=True, exist_ok=True)
    manifest = {"cases": cases, "sources": sources, "report": str(work / "generations.json")}
    run_child("generate_remote.py", manifest, work / "generate_manifest.json", env)
    report = json.loads((work / "generations.json").read_text())
    assert report["hf_xfmr_importable"] is False
    for name, entry in report["cases"].items():
        assert "error" not in entry, f"{name}: {entry['error']}"
        assert entry["module"].startswith("transformers_modules."), entry["module"]  # the exported code
    return report["cases"]


def check_export_without_hf_xfmr(model, tokenizer, card: dict, sources: list[str], tmp_path: Path) -> None:
    """The Hub export of a finetuned encoder-decoder, loaded in a process where hf_xfmr cannot be imported
    (tests/hub/load_remote.py), gives our outputs and generates our tokens; its card shows the scores."""
    from safetensors.torch import load_file, save_file

    from hf_xfmr import hub

    folder = tmp_path / "export"
    model.generation_config.num_beams = 1  # greedy: the child saves the generated ids, and beam search's are strided
    hub.export(model.eval(), tokenizer, folder, **card)
    assert "rougeL" in (folder / "README.md").read_text()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
              "labels": tokenizer(text_target=sources, return_tensors="pt", padding=True)["input_ids"]}
    save_file(inputs, tmp_path / "inputs.safetensors")
    manifest = {"report": str(tmp_path / "report.json"), "cases": [dict(
        name="seq2seq", source=str(folder), auto_class="AutoModelForSeq2SeqLM", generate=True,
        inputs=str(tmp_path / "inputs.safetensors"), output=str(tmp_path / "outputs.safetensors"))]}
    run_child("load_remote.py", manifest, tmp_path / "manifest.json",
              child_env(tmp_path / "hf_home", HF_HUB_OFFLINE="1"))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["hf_xfmr_importable"] is False
    assert "error" not in report["cases"]["seq2seq"], report["cases"]["seq2seq"]["error"]
    assert report["cases"]["seq2seq"]["module"].startswith("transformers_modules.")
    theirs, ours = load_file(tmp_path / "outputs.safetensors"), run_model(model, inputs, generate=True)
    assert torch.equal(theirs["generated"], ours["generated"])
    torch.testing.assert_close(theirs["logits"], ours["logits"], atol=1e-5, rtol=1e-5)
