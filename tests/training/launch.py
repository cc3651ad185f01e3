"""Launching pretraining runs in child processes, with a timeout and whole-tree kills.

`accelerate launch` / torchrun start their workers in sessions of their own, so killing the launcher
(even with SIGKILL) leaves the workers running: every kill here walks the process tree first.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

WORKER = Path(__file__).with_name("pretrain_worker.py")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and all its descendants (collected before anything dies, so none is orphaned unseen)."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               DS_ACCELERATOR="cpu", PYTHONUNBUFFERED="1")
    for key in [k for k in env if k.startswith(("ACCELERATE_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_"))]:
        env.pop(key)  # never inherit a parent launch
    env.update(extra)
    return env


def launch_command(config: Path, processes: int, accelerate_config: Path | None = None) -> list[str]:
    """The command that runs the worker on `config` in `processes` processes (1: plain python)."""
    if processes == 1 and accelerate_config is None:
        return [sys.executable, str(WORKER), str(config)]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
    if accelerate_config is not None:
        cmd += ["--config_file", str(accelerate_config), "--num_processes", str(processes)]
    else:
        cmd += ["--multi_gpu", "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no"]
    return cmd + [str(WORKER), str(config)]


def write_config(folder: Path, name: str, args: dict, **options) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"args": args, **options}))
    return path


def run(cmd: list[str], timeout: float, log: Path, cwd: Path = REPO) -> int:
    """Run to completion (or kill the tree after `timeout` s and fail); output goes to `log`."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=cwd,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            raise AssertionError(f"{' '.join(cmd)} did not finish in {timeout} s; output:\n{log.read_text()[-4000:]}")


def run_until(cmd: list[str], marker: Path, timeout: float, log: Path) -> None:
    """Start `cmd`, wait until `marker` exists, then kill -9 the whole process tree."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO,
                                start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not marker.exists():
                if proc.poll() is not None:
                    raise AssertionError(f"the run ended (status {proc.returncode}) before {marker.name}:\n"
                                         f"{log.read_text()[-4000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{marker.name} did not appear within {timeout} s:\n{log.read_text()[-4000:]}")
                time.sleep(0.2)
        finally:
            kill_tree(proc.pid)
    proc.wait(timeout=30)  # already reaped by kill_tree; returns at once


def check(status: int, log: Path) -> None:
    assert status == 0, f"run failed with status {status}:\n{log.read_text()[-6000:]}"


def one_case_per_objective(*extra: tuple[str, str]) -> list[tuple[str, str]]:
    """(architecture, objective): every objective once, with the first architecture that trains with it, then
    `extra`."""
    from hf_xfmr.models import architectures

    cases, seen = [], set()
    for arch in architectures():
        for objective in arch.objectives:
            if objective not in seen:
                seen.add(objective)
                cases.append((arch.name, objective))
    return cases + list(extra)


def check_bert_mlm_export(folder: Path, weights: dict) -> None:
    """`folder`'s final model is fp32 and loads with `AutoModelForMaskedLM` as our BERT, every key present, its
    weights exactly `weights` (the run's exported state dict)."""
    import torch
    from transformers import AutoModelForMaskedLM

    assert all(t.dtype == torch.float32 for t in weights.values())
    model, info = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert type(model).__name__ == "XfmrBertForMaskedLM"
    for name, param in model.state_dict().items():
        if name in weights:
            torch.testing.assert_close(param, weights[name], rtol=0, atol=0)
