"""Two processes whose micro-batches differ in everything a model could branch on, for every objective.

Rank 0 trains on full-length rows; rank 1 on heavily padded rows, and on a micro-batch without any target
in step 2 (`pretrain_worker.Skew`). Under DeepSpeed ZeRO-3 the processes must still run the same modules in
the same order (it gathers parameters in module hooks): a data-dependent path made them wait on different
collectives for ever. Under DDP the ranks must end with identical parameters. One launch per setting trains
every objective (one architecture each, plus ModernBERT and the BigBirds, whose unpadding is their own code) one
after the other in the same two processes, a few steps each. The ZeRO-3 launch ends with a process that stops taking
part: the other must fail after --ddp_timeout with an error naming the step, not hang.
(test_distributed_module_order.py checks the same property in one process, for every architecture.)
"""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

import hf_xfmr  # noqa: F401  (registers every architecture)
from hf_xfmr.training import read_log

from .launch import REPO, launch_command, one_case_per_objective, run, write_config

pytestmark = pytest.mark.slow

STEPS = 2
STALL_TIMEOUT = 20  # seconds the healthy process waits on its stalled partner (--ddp_timeout)
CASES = one_case_per_objective(("modernbert", "mlm"), ("bigbird", "mlm"), ("bigbird_pegasus", "gsg"))

# BigBird's block-sparse layout starts above (5 + 2 x 2 random blocks) x 8 = 72 tokens at the tiny preset: rank 0's
# full rows take it, rank 1's padded rows (cut to their longest) may run full attention; the same modules either way.
LENGTHS = {("bigbird", "mlm"): 96, ("bigbird_pegasus", "gsg"): 96}


def _launch(folder, tokenizer, accelerate_config=None):
    runs = []
    for arch, objective in CASES:
        out = folder / f"{arch}-{objective}"
        runs.append({"args": dict(
            arch=arch, objective=objective, max_steps=STEPS, max_documents=40, vocab_size=400,
            per_device_train_batch_size=4, max_seq_length=LENGTHS.get((arch, objective), 32), logging_steps=1,
            save_steps=0, eval_fraction=0.1, max_eval_examples=8, progress_bar=False, ddp_timeout=120,
            output_dir=str(out)),
            "report": str(out / "report"), "skew": True})
    if accelerate_config is not None:  # last: rank 1 stops taking part in step 2
        runs.append({"args": dict(
            arch="bert", objective="mlm", max_steps=3, max_documents=40, tokenizer=str(tokenizer),
            per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.0,
            progress_bar=False, ddp_timeout=STALL_TIMEOUT, output_dir=str(folder / "stalled")),
            "stall": {"rank": 1, "step": 2}})
    config = write_config(folder, "runs", {}, runs=runs)
    log = folder / "launch.log"
    status = run(launch_command(config, 2, accelerate_config), 900, log)
    return status, log


@pytest.fixture(scope="module")
def zero3(tmp_path_factory, saved_tokenizer):
    folder = tmp_path_factory.mktemp("zero3_skewed")
    status, log = _launch(folder, saved_tokenizer, REPO / "examples" / "accelerate" / "deepspeed_zero3.yaml")
    return folder, status, log


@pytest.fixture(scope="module")
def ddp(tmp_path_factory, saved_tokenizer):
    folder = tmp_path_factory.mktemp("ddp_skewed")
    status, log = _launch(folder, saved_tokenizer)
    return folder, status, log


def _check_skewed_runs(folder, log, distributed_type):
    """Every run finished all its steps on both ranks, with the ranks' batches as skewed as intended."""
    reports = {}
    for arch, objective in CASES:
        out = folder / f"{arch}-{objective}"
        files = [out / "report" / f"rank{r}.json" for r in (0, 1)]
        assert all(f.is_file() for f in files), \
            f"{arch} {objective} did not finish on both ranks:\n{log.read_text()[-6000:]}"
        rank0, rank1 = (json.loads(f.read_text()) for f in files)
        for info in (rank0, rank1):
            assert info["world_size"] == 2 and info["distributed_type"] == distributed_type
            assert info["step"] == STEPS and len(info["shapes"]) == STEPS
        assert all(s["padding"] == 0 and s["targets"] > 0 for s in rank0["shapes"]), (arch, objective, rank0)
        assert all(s["padding"] > 0 for s in rank1["shapes"]), (arch, objective, rank1)
        assert rank1["shapes"][0]["targets"] > 0 and rank1["shapes"][1]["targets"] == 0, (arch, objective, rank1)
        train = [r for r in read_log(out / "log.jsonl") if "loss" in r]
        assert [r["step"] for r in train] == list(range(1, STEPS + 1)), (arch, objective)
        assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in train), (arch, objective)
        assert train[-1]["batches_without_targets"] == 1, (arch, objective)
        assert (out / "model.safetensors").is_file()
        reports[arch, objective] = out
    return reports


def test_zero3_trains_every_objective_when_ranks_differ_in_padding_and_targets(zero3):
    folder, _, log = zero3
    for out in _check_skewed_runs(folder, log, "DistributedType.DEEPSPEED").values():
        weights = load_file(str(out / "model.safetensors"))  # consolidated from the ZeRO-3 partitions
        assert weights and all(torch.isfinite(w).all() for w in weights.values())


def test_zero3_process_that_stops_taking_part_fails_the_run_naming_the_step(zero3):
    folder, status, log = zero3
    text = log.read_text()
    assert status != 0, f"the stalled run did not fail:\n{text[-4000:]}"
    # Rank 0 waited --ddp_timeout seconds in the first collective of step 2, then failed with the step.
    assert "CollectiveError: The run stopped in step 2 (of 3 steps)" in text, text[-6000:]
    assert f"--ddp_timeout seconds (now {STALL_TIMEOUT})" in text
    assert f"Timed out waiting {STALL_TIMEOUT * 1000}ms" in text  # gloo's words: this run's timeout, not the first's
    assert [r["step"] for r in read_log(folder / "stalled" / "log.jsonl") if "loss" in r] == [1]


def test_ddp_trains_every_objective_when_ranks_differ_and_ranks_stay_identical(ddp):
    folder, status, log = ddp
    assert status == 0, log.read_text()[-6000:]
    for (arch, objective), out in _check_skewed_runs(folder, log, "DistributedType.MULTI_CPU").items():
        params0, params1 = (load_file(str(out / "report" / f"rank{r}.safetensors")) for r in (0, 1))
        assert params0.keys() == params1.keys()
        for name in params0:
            torch.testing.assert_close(params0[name], params1[name], rtol=0, atol=0, msg=f"{arch} {objective} {name}")
