"""`hf-xfmr distill` in two CPU processes on the shared loop: DDP, DeepSpeed ZeRO-2 and ZeRO-3 distil the same
student, and a ZeRO-3 run resumed from a mid-run checkpoint ends with the uninterrupted run's student, bit for bit."""

import json
import random
import shutil
import sys

import pytest
import torch
from safetensors.torch import load_file

import hf_xfmr  # noqa: F401
from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

from ..conftest import WORDS
from .launch import check, free_port, run


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, wordpiece_tokenizer):
    folder = tmp_path_factory.mktemp("distributed-distill")
    torch.manual_seed(0)
    config = XfmrBertConfig.from_preset("tiny", vocab_size=len(wordpiece_tokenizer), num_hidden_layers=4,
                                        max_position_embeddings=64, initializer_range=0.3)
    XfmrBertForMaskedLM(config).save_pretrained(folder / "teacher")
    wordpiece_tokenizer.save_pretrained(folder / "teacher")
    rng = random.Random(0)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(80)) + "\n")
    return folder / "teacher", corpus


def _distill(teacher, out, log, *extra):
    """Two processes (accelerate launch) running `hf-xfmr distill`; returns the student's weights."""
    path, corpus = teacher
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port()),
           "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "-m", "hf_xfmr.cli", "distill", "--teacher", str(path), "--corpus", str(corpus),
           "--output_dir", str(out), "--max_steps", "4", "--batch_size", "4", "--max_seq_length", "24",
           "--learning_rate", "0.01", "--eval_sequences", "8", "--device", "cpu", *extra]
    check(run(cmd, 600, log), log)
    return load_file(str(out / "model.safetensors"))


def _history(out):
    return json.loads((out / "distill_log.json").read_text())["history"]


@pytest.mark.slow
def test_ddp_zero2_and_zero3_distil_the_same_student_and_zero3_resumes_exactly(teacher, tmp_path):
    ddp = _distill(teacher, tmp_path / "ddp", tmp_path / "ddp.log")
    zero2 = _distill(teacher, tmp_path / "zero2", tmp_path / "zero2.log", "--deepspeed", "zero2")
    zero3 = _distill(teacher, tmp_path / "zero3", tmp_path / "zero3.log", "--deepspeed", "zero3", "--save_steps", "2")
    assert ddp.keys() == zero2.keys() == zero3.keys()
    for name in ddp:  # the same updates; only the order of the gradient sums may differ
        if name.endswith("k_proj.bias"):
            # Its gradient is zero in exact arithmetic (softmax ignores a shift shared by all keys): what the
            # backends compute is rounding noise, which Adam scales up to learning-rate-sized steps.
            continue
        torch.testing.assert_close(zero2[name], ddp[name], rtol=1e-5, atol=1e-5, msg=name)
        torch.testing.assert_close(zero3[name], ddp[name], rtol=1e-5, atol=1e-5, msg=name)
    losses = [[h["loss"] for h in _history(tmp_path / kind)] for kind in ("ddp", "zero2", "zero3")]
    assert len(losses[0]) == 4
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.tensor(losses[2]), torch.tensor(losses[0]), rtol=1e-5, atol=1e-5)

    # ZeRO-3 resumed from its step-2 checkpoint (plain resume: test_distill_loop.py).
    resumed = tmp_path / "zero3-resumed"
    shutil.copytree(tmp_path / "zero3" / "checkpoints" / "step_2", resumed / "checkpoints" / "step_2")
    again = _distill(teacher, resumed, tmp_path / "zero3-resumed.log", "--deepspeed", "zero3", "--save_steps", "2",
                     "--resume")
    assert again.keys() == zero3.keys() and all(torch.equal(again[k], zero3[k]) for k in zero3)
    assert _history(resumed) == _history(tmp_path / "zero3")
