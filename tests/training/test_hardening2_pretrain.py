"""Pretraining usability: Ctrl-C names the last checkpoint and the command that resumes it, `--resume` of a
finished run says so, the TensorBoard event files hold the logged scalars (read back with TensorBoard's own
reader), and DeepSpeed ZeRO-2/3 configs ship with the package (`--deepspeed zero2`, from any folder)."""

import configparser
import contextlib
import hashlib
import io
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

import hf_xfmr.training
from hf_xfmr.cli import main
from hf_xfmr.training import PretrainCallback, read_log
from hf_xfmr.training.pretrain import DEEPSPEED_CONFIGS, resolve_deepspeed_config

from .launch import REPO, check, free_port, run


class Interrupt(PretrainCallback):
    """Raises KeyboardInterrupt (what Ctrl-C does) in the step after `after_step` (logged by then)."""

    def __init__(self, after_step: int):
        self.after_step = after_step

    def on_micro_batch(self, run, batch):
        if run.step == self.after_step:
            raise KeyboardInterrupt


def _cli(argv: list[str], interrupt_after: int | None = None) -> tuple[int, str]:
    """`hf-xfmr` in this process -> (exit status, stderr); optionally with a Ctrl-C after a step."""
    real = hf_xfmr.training.pretrain
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        if interrupt_after is not None:
            mp.setattr(hf_xfmr.training, "pretrain", lambda args: real(args, callbacks=[Interrupt(interrupt_after)]))
        status = main(argv)
    return status, err.getvalue()


def _options(tokenizer, out: Path, **extra) -> list[str]:
    values = dict(arch="bert", objective="mlm", max_steps=6, max_documents=40, tokenizer=tokenizer,
                  per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=2, eval_steps=2,
                  eval_fraction=0.1, max_eval_examples=8, output_dir=out)
    values.update(extra)
    return [token for key, value in values.items() for token in (f"--{key}", str(value))] + ["--no_progress_bar"]


def _fingerprint(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def interrupted_and_resumed(saved_tokenizer, tmp_path_factory):
    """A run stopped by Ctrl-C after step 5 (checkpoints at 2 and 4), then resumed with the command it printed."""
    out = tmp_path_factory.mktemp("ctrl_c") / "out"
    status, interrupted = _cli(["pretrain", *_options(saved_tokenizer, out)], interrupt_after=5)
    assert status == 130, interrupted
    steps_before = [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r]
    command = shlex.split(interrupted.strip().splitlines()[-1])
    assert command[:2] == ["hf-xfmr", "pretrain"], interrupted
    status, resumed = _cli(command[1:])
    assert status == 0, resumed
    return dict(out=out, interrupted=interrupted, steps_before=steps_before, command=command)


def test_ctrl_c_names_the_last_checkpoint_and_the_command_that_resumes_it(interrupted_and_resumed):
    run = interrupted_and_resumed
    out = run["out"]
    assert run["steps_before"] == [1, 2, 3, 4, 5]  # the interrupted run logged step 5 after its last checkpoint
    first, how, _ = run["interrupted"].strip().splitlines()[-3:]
    assert first == f"hf-xfmr pretrain: interrupted after step 5; the last complete checkpoint is {out}/checkpoints/step_4."
    assert how == "To continue from it, run:"
    assert run["command"][-1] == "--resume" and run["command"].count("--resume") == 1
    assert "error: interrupted" not in run["interrupted"]
    # The printed command continued the run from step 4 to the end, as one log.
    assert [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_4", "step_6"]  # --save_total_limit 2
    assert (out / "model.safetensors").is_file()


def test_resume_of_a_finished_run_says_it_is_finished(interrupted_and_resumed):
    out, command = interrupted_and_resumed["out"], interrupted_and_resumed["command"]
    before = _fingerprint(out)
    status, err = _cli(command[1:])
    assert status == 2
    assert err.startswith("hf-xfmr pretrain: error: cannot resume: the run is finished: ")
    assert f"{out}/checkpoints/step_6 is at step 6, which reached --max_steps 6" in err
    assert "larger --max_steps" in err and "new --output_dir" in err
    assert _fingerprint(out) == before, "resuming a finished run changed its folder"


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(saved_tokenizer, tmp_path):
    out = tmp_path / "out"
    status, err = _cli(["pretrain", *_options(saved_tokenizer, out, save_steps=4)], interrupt_after=1)
    assert status == 130
    first, how, command = err.strip().splitlines()[-3:]
    assert first == ("hf-xfmr pretrain: interrupted after step 1, before the first checkpoint (--save_steps 4): "
                     "there is nothing to resume.")
    assert how == "To start again, run:"
    # log.jsonl holds step 1, so starting again in the same folder needs --overwrite_output_dir.
    assert shlex.split(command)[-1] == "--overwrite_output_dir" and "--resume" not in command
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())


def test_tensorboard_event_files_hold_the_logged_scalars(interrupted_and_resumed):
    """Read with TensorBoard's own reader: every scalar equals the JSON log's, step by step, including after
    a resume (the interrupted run's step-5 records are purged, as in log.jsonl)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    out = interrupted_and_resumed["out"]
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2  # the interrupted and resumed runs
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={SCALARS: 0})
    events.Reload()
    logged = read_log(out / "log.jsonl")
    checked = {}
    for key, tag in [("loss", "train/loss"), ("learning_rate", "train/learning_rate"), ("grad_norm", "train/grad_norm"),
                     ("eval_loss", "eval/loss"), ("eval_accuracy", "eval/accuracy")]:
        expected = [(r["step"], float(np.float32(r[key]))) for r in logged if r.get(key) is not None]
        assert [(e.step, e.value) for e in events.Scalars(tag)] == expected, tag
        checked[tag] = [step for step, _ in expected]
    assert checked["train/loss"] == [1, 2, 3, 4, 5, 6] and checked["eval/loss"] == [2, 4, 6]


def test_shipped_deepspeed_configs_by_name_or_path(tmp_path, monkeypatch):
    for stage in (2, 3):
        path = resolve_deepspeed_config(f"zero{stage}")
        assert path == DEEPSPEED_CONFIGS / f"zero{stage}.json"
        assert json.loads(path.read_text())["zero_optimization"]["stage"] == stage
    # They are package data, so a pip-installed hf_xfmr has them.
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    patterns = [p.strip() for p in setup["options.package_data"]["hf_xfmr.training"].split(",")]
    shipped = sorted(p.name for pattern in patterns for p in DEEPSPEED_CONFIGS.parent.glob(pattern))
    assert shipped == ["full_shard.yaml", "shard_grad_op.yaml", "zero2.json", "zero3.json"]  # and --fsdp's
    # A path is read from the current folder.
    monkeypatch.chdir(tmp_path)
    Path("mine.json").write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    assert resolve_deepspeed_config("mine.json") == tmp_path / "mine.json"
    with pytest.raises(ValueError, match=r"--deepspeed zero4: neither a DeepSpeed config shipped with hf_xfmr "
                                         r"\(zero2, zero3\) nor an existing file"):
        resolve_deepspeed_config("zero4")
    Path("bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        resolve_deepspeed_config("bad.json")
    Path("nozero.json").write_text("{}")
    with pytest.raises(ValueError, match='no "zero_optimization" section'):
        resolve_deepspeed_config("nozero.json")


def test_accelerate_config_naming_a_missing_relative_file_is_a_clear_error(tmp_path, monkeypatch):
    # What `accelerate launch --config_file` passes on from a YAML naming examples/deepspeed/zero2.json,
    # launched outside the repository root: one error line, before anything is written.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", "examples/deepspeed/zero2.json")
    status, err = _cli(["pretrain", "--max_steps", "2", "--output_dir", "out"])
    assert status == 2 and not (tmp_path / "out").exists()
    assert ("error: The Accelerate config's deepspeed_config_file examples/deepspeed/zero2.json: neither a DeepSpeed "
            f"config shipped with hf_xfmr (zero2, zero3) nor an existing file (a relative path is read from the "
            f"current folder, {tmp_path})") in err


@pytest.mark.parametrize("stage", [2, 3])
def test_accelerate_deepspeed_yamls_name_the_shipped_configs_and_work_from_any_folder(stage, tmp_path, monkeypatch):
    import yaml

    from hf_xfmr.training import PretrainArguments
    from hf_xfmr.training.pretrain import deepspeed_config_file

    launch = yaml.safe_load((REPO / "examples" / "accelerate" / f"deepspeed_zero{stage}.yaml").read_text())
    assert launch["deepspeed_config"]["deepspeed_config_file"] == f"zero{stage}"
    # What `accelerate launch --config_file deepspeed_zeroN.yaml` hands the processes, outside the repository.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", launch["deepspeed_config"]["deepspeed_config_file"])
    assert deepspeed_config_file(PretrainArguments()) == DEEPSPEED_CONFIGS / f"zero{stage}.json"
    # --deepspeed wins over the Accelerate config's file.
    assert deepspeed_config_file(PretrainArguments(deepspeed="zero2")) == DEEPSPEED_CONFIGS / "zero2.json"


def test_deepspeed_without_a_launcher_says_how_to_launch(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    status, err = _cli(["pretrain", "--deepspeed", "zero2", "--max_steps", "2", "--output_dir", str(tmp_path / "out")])
    assert status == 2 and not (tmp_path / "out").exists()
    assert "error: DeepSpeed runs in processes started by a launcher" in err
    assert "torchrun --standalone --nproc_per_node N -m hf_xfmr.cli pretrain --deepspeed" in err


@pytest.mark.slow
def test_zero2_two_processes_from_another_folder_with_the_deepspeed_option(saved_tokenizer, tmp_path):
    elsewhere = tmp_path / "elsewhere"  # not the repository root: nothing relative to it is needed
    elsewhere.mkdir()
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port()),
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "-m", "hf_xfmr.cli", "pretrain", "--deepspeed", "zero2",
        *_options(saved_tokenizer, "out", max_steps=2, save_steps=0, eval_fraction=0.0)]
    log = tmp_path / "zero2.log"
    check(run(cmd, 600, log, cwd=elsewhere), log)
    out = elsewhere / "out"
    assert "for 2 steps on 2 process(es)" in log.read_text()
    state = json.loads((out / "checkpoints" / "step_2" / "trainer_state.json").read_text())
    assert state["settings"]["deepspeed"] is True and state["settings"]["world_size"] == 2
    # The DeepSpeed engine's own checkpoint: ZeRO-2 keeps one model file and partitions the optimizer per process.
    assert sorted(p.name for p in (out / "checkpoints" / "step_2" / "deepspeed").iterdir()) == [
        "mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert "zero stage ZeroStageEnum.gradients, world_size: 2" in log.read_text()  # found when consolidating
    assert [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r] == [1, 2]
    from transformers import AutoModelForMaskedLM

    model, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == "XfmrBertForMaskedLM" and not info["missing_keys"]
