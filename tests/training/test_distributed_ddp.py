"""Two CPU processes (gloo) under `accelerate launch`: gradients synchronised, identical parameters on both
ranks, and a kill -9 of the whole run after a checkpoint resumed to the uninterrupted result."""

import json

import pytest
import torch
from safetensors.torch import load_file

from hf_xfmr.training import read_log

from .launch import check, launch_command, run, run_until, write_config

pytestmark = pytest.mark.slow

STEPS = 6


def _args(tokenizer_dir, output_dir, **overrides):
    return {**dict(arch="bert", objective="mlm", max_steps=STEPS, max_documents=60, tokenizer=str(tokenizer_dir),
                   per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=3, eval_fraction=0.1,
                   progress_bar=False, output_dir=str(output_dir)), **overrides}


def _reports(folder):
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in (0, 1)], \
        [load_file(str(folder / f"rank{r}.safetensors")) for r in (0, 1)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, saved_tokenizer):
    folder = tmp_path_factory.mktemp("ddp")
    config = write_config(folder, "full", _args(saved_tokenizer, folder / "out"), report=str(folder / "report"))
    check(run(launch_command(config, 2), 600, folder / "full.log"), folder / "full.log")
    return folder


def test_two_processes_train_one_model(uninterrupted, saved_tokenizer, tmp_path):
    (rank0, rank1), (params0, params1) = _reports(uninterrupted / "report")
    for info in (rank0, rank1):
        assert info["world_size"] == 2 and info["backend"] == "gloo"
        assert info["distributed_type"] == "DistributedType.MULTI_CPU"
        assert info["step"] == STEPS and len(info["batches"]) == STEPS
    assert not set(rank0["batches"]) & set(rank1["batches"]), "both ranks saw the same batches"
    assert params0.keys() == params1.keys()
    for name in params0:
        torch.testing.assert_close(params0[name], params1[name], rtol=0, atol=0, msg=name)
    # The log holds the loss averaged over both ranks, every step.
    losses = [r["loss"] for r in read_log(uninterrupted / "out" / "log.jsonl") if "loss" in r]
    assert len(losses) == STEPS and all(torch.isfinite(torch.tensor(losses)))

    # Control: the same run with DDP's gradient all-reduce switched off ends with different parameters,
    # so the equality above is a real check.
    config = write_config(tmp_path, "control", _args(saved_tokenizer, tmp_path / "out", max_steps=2, save_steps=0),
                          report=str(tmp_path / "report"), unsynced=True)
    check(run(launch_command(config, 2), 600, tmp_path / "control.log"), tmp_path / "control.log")
    _, (c0, c1) = _reports(tmp_path / "report")
    assert any(not torch.equal(c0[n], c1[n]) for n in c0)


def test_kill_9_after_checkpoint_then_resume_matches_uninterrupted(uninterrupted, saved_tokenizer, tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path, "killed", _args(saved_tokenizer, out), marker=str(tmp_path / "reached"),
                          block_after_step=4)
    run_until(launch_command(config, 2), tmp_path / "reached", 600, tmp_path / "killed.log")
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_3"]

    config = write_config(tmp_path, "resumed", _args(saved_tokenizer, out, resume="latest"),
                          report=str(tmp_path / "report"))
    check(run(launch_command(config, 2), 600, tmp_path / "resumed.log"), tmp_path / "resumed.log")
    (full0, _), (full_params, _) = _reports(uninterrupted / "report")
    (resumed0, _), (resumed_params, _) = _reports(tmp_path / "report")
    assert resumed0["final_loss"] == full0["final_loss"]
    assert resumed0["batches"] == full0["batches"][3:]  # steps 4-6 read the same data, none re-read
    for name in full_params:
        torch.testing.assert_close(resumed_params[name], full_params[name], rtol=0, atol=0, msg=name)

    def losses(path):
        return [(r["step"], r["loss"]) for r in read_log(path) if "loss" in r]
    assert losses(out / "log.jsonl") == losses(uninterrupted / "out" / "log.jsonl")
