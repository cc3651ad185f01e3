"""Faults around checkpoints: a kill during a checkpoint write, corrupted and mismatched checkpoints."""

import hashlib

import pytest

from hf_xfmr.training import CheckpointError, PretrainArguments, latest_checkpoint, pretrain, read_log

from .launch import check, launch_command, run, run_until, write_config


def _args(tokenizer, output_dir, **overrides):
    return {**dict(arch="bert", objective="mlm", max_steps=6, max_documents=40, tokenizer=str(tokenizer),
                   per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=2, eval_fraction=0.0,
                   save_total_limit=None, progress_bar=False, report_to_tensorboard=False,
                   output_dir=str(output_dir)), **overrides}


def _fingerprint(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_kill_during_checkpoint_write_resumes_from_previous(saved_tokenizer, tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path, "killed", _args(saved_tokenizer, out), marker=str(tmp_path / "reached"),
                          block_in_checkpoint=4)
    run_until(launch_command(config, 1), tmp_path / "reached", 600, tmp_path / "killed.log")
    # The half-written checkpoint is a .tmp folder; the previous one is complete and is the one resumed.
    assert (out / "checkpoints" / "step_4.tmp" / "half-written").is_file()
    assert latest_checkpoint(out).name == "step_2"
    config = write_config(tmp_path, "resumed", _args(saved_tokenizer, out, resume="latest"))
    check(run(launch_command(config, 1), 600, tmp_path / "resumed.log"), tmp_path / "resumed.log")
    steps = [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step_2", "step_4", "step_6"]  # the stale .tmp folder was cleared


@pytest.fixture(scope="module")
def finished_run(saved_tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "out"
    pretrain(PretrainArguments(**_args(saved_tokenizer, out, max_steps=4)))
    return out


def _resume_fails(args, out, match):
    before = _fingerprint(out)
    with pytest.raises(CheckpointError, match=match):
        pretrain(PretrainArguments(**args))
    assert _fingerprint(out) == before, "a failed resume changed the output folder"


def test_corrupted_checkpoint_is_a_clear_error_and_nothing_is_overwritten(finished_run, saved_tokenizer, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(finished_run, out)
    weights = out / "checkpoints" / "step_4" / "model" / "model.safetensors"
    weights.write_bytes(b"\x00garbage" + weights.read_bytes()[100:])
    _resume_fails(_args(saved_tokenizer, out, max_steps=6, resume="latest"), out, "step_4.*corrupted")
    (out / "checkpoints" / "step_4" / "trainer_state.json").write_text("{not json")
    _resume_fails(_args(saved_tokenizer, out, max_steps=6, resume="latest"), out, "trainer_state.json is corrupted")


def test_mismatched_checkpoint_is_a_clear_error(finished_run, saved_tokenizer):
    step = str(finished_run / "checkpoints" / "step_4")
    _resume_fails(_args(saved_tokenizer, finished_run, max_steps=6, resume=step,
                        config_overrides="hidden_size=64,intermediate_size=64"),
                  finished_run, "different config.*hidden_size: 32 in the checkpoint, 64 now")
    _resume_fails(_args(saved_tokenizer, finished_run, max_steps=6, resume=step, arch="roberta"),
                  finished_run, "holds a 'xfmr-bert' model but this run trains 'xfmr-roberta'")
    _resume_fails(_args(saved_tokenizer, finished_run, max_steps=6, resume=step, per_device_train_batch_size=2),
                  finished_run, "per_device_train_batch_size: 4 in the checkpoint, 2 now")
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        pretrain(PretrainArguments(**_args(saved_tokenizer, finished_run, resume=str(finished_run / "nope"))))


def test_an_earlier_run_is_not_overwritten_silently(finished_run, saved_tokenizer):
    with pytest.raises(ValueError, match="holds an earlier run. Pass --resume"):
        pretrain(PretrainArguments(**_args(saved_tokenizer, finished_run)))
