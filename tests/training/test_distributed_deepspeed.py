"""DeepSpeed ZeRO-3 with two CPU processes through the shipped Accelerate config: checkpoint, exact resume,
and the consolidated fp32 safetensors export that `AutoModelForMaskedLM.from_pretrained` loads."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

import hf_xfmr  # noqa: F401
from hf_xfmr.training import read_log

from .launch import REPO, check, check_bert_mlm_export, launch_command, run, write_config


ZERO3 = REPO / "examples" / "accelerate" / "deepspeed_zero3.yaml"


@pytest.mark.slow
def test_zero3_checkpoint_resume_and_consolidated_export(saved_tokenizer, tmp_path):
    args = dict(arch="bert", objective="mlm", max_steps=6, max_documents=60, tokenizer=str(saved_tokenizer),
                per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=3, eval_fraction=0.1,
                save_total_limit=None, progress_bar=False)
    full = tmp_path / "full"
    config = write_config(tmp_path, "full", {**args, "output_dir": str(full)}, report=str(tmp_path / "report"))
    check(run(launch_command(config, 2, ZERO3), 600, tmp_path / "full.log"), tmp_path / "full.log")
    for rank in (0, 1):
        info = json.loads((tmp_path / "report" / f"rank{rank}.json").read_text())
        assert info["world_size"] == 2 and info["distributed_type"] == "DistributedType.DEEPSPEED"
    step3 = full / "checkpoints" / "step_3"
    assert (step3 / "deepspeed").is_dir() and (step3 / "rng_1.safetensors").is_file()

    # Resume a copy of the step-3 checkpoint: steps 4-6 and the exported weights equal the full run's.
    resumed = tmp_path / "resumed"
    shutil.copytree(step3, resumed / "checkpoints" / "step_3")
    config = write_config(tmp_path, "resumed", {**args, "output_dir": str(resumed), "resume": "latest"})
    check(run(launch_command(config, 2, ZERO3), 600, tmp_path / "resumed.log"), tmp_path / "resumed.log")

    def losses(folder, first):
        return [(r["step"], r["loss"]) for r in read_log(folder / "log.jsonl") if "loss" in r and r["step"] >= first]
    assert losses(resumed, 4) == losses(full, 4) and len(losses(full, 4)) == 3
    a, b = load_file(str(full / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    check_bert_mlm_export(full, a)


@pytest.mark.parametrize("stage", [2, 3])
def test_shipped_deepspeed_configs_leave_batch_and_optimizer_to_the_loop(stage):
    import yaml

    from hf_xfmr.training.pretrain import resolve_deepspeed_config

    launch = yaml.safe_load((REPO / "examples" / "accelerate" / f"deepspeed_zero{stage}.yaml").read_text())
    assert launch["distributed_type"] == "DEEPSPEED"
    config = json.loads(resolve_deepspeed_config(launch["deepspeed_config"]["deepspeed_config_file"]).read_text())
    assert config["zero_optimization"]["stage"] == stage
    assert "optimizer" not in config and "scheduler" not in config  # no fused_adam / cpu_adam compile
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping"):
        assert config[key] == "auto", key
