"""Runs `hf_xfmr.training.pretrain` in a (possibly distributed) child process for the tests.

Usage: python pretrain_worker.py CONFIG.json (or under `accelerate launch`). CONFIG holds:
    args: PretrainArguments fields;
    report: folder for rank<r>.json (world size, backend, fingerprints of the batches seen) and
            rank<r>.safetensors (the parameters, when every process holds all of them);
    block_after_step: write `marker` after this optimizer step, then wait to be killed;
    block_in_checkpoint: write `marker` while the checkpoint of this step is half written, then wait;
    unsynced: control run: turn off DDP's gradient all-reduce (ranks must then diverge).
"""

import hashlib
import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from hf_xfmr.training import PretrainArguments, PretrainCallback, pretrain


class Report(PretrainCallback):
    def __init__(self, folder: Path, unsynced: bool):
        self.folder, self.unsynced, self.batches, self.info = folder, unsynced, [], {}

    def on_train_begin(self, run):
        state = run.accelerator.state
        self.info = {"world_size": run.accelerator.num_processes, "rank": run.accelerator.process_index,
                     "distributed_type": str(state.distributed_type), "backend": state.backend}

    def on_micro_batch(self, run, batch):
        self.batches.append(hashlib.sha1(batch["input_ids"].cpu().numpy().tobytes()).hexdigest())
        if self.unsynced:
            run.model.require_backward_grad_sync = False  # what DDP's no_sync() does

    def on_train_end(self, run, result):
        self.folder.mkdir(parents=True, exist_ok=True)
        rank = self.info["rank"]
        info = {**self.info, "batches": self.batches, "final_loss": result.final_loss, "step": result.step}
        (self.folder / f"rank{rank}.json").write_text(json.dumps(info))
        if not getattr(run.accelerator.state, "deepspeed_plugin", None):
            params = {n: p.detach().cpu().contiguous() for n, p in run.unwrapped_model.named_parameters()}
            save_file(params, str(self.folder / f"rank{rank}.safetensors"))


class Block(PretrainCallback):
    def __init__(self, marker: Path, after_step: int | None, in_checkpoint: int | None):
        self.marker, self.after_step, self.in_checkpoint = marker, after_step, in_checkpoint

    def _wait(self):
        self.marker.write_text("reached")
        while True:
            time.sleep(1)

    def on_step_end(self, run, record):
        if record["step"] == self.after_step:
            run.accelerator.wait_for_everyone()
            if run.accelerator.is_main_process:
                self._wait()
            time.sleep(3600)

    def on_checkpoint(self, run, path):
        if run.step == self.in_checkpoint and run.accelerator.is_main_process:
            (path / "half-written").write_text("x")
            self._wait()


def main(config_file: str) -> None:
    config = json.loads(Path(config_file).read_text())
    callbacks = []
    if config.get("report"):
        callbacks.append(Report(Path(config["report"]), config.get("unsynced", False)))
    if config.get("marker"):
        callbacks.append(Block(Path(config["marker"]), config.get("block_after_step"), config.get("block_in_checkpoint")))
    torch.set_num_threads(1)
    pretrain(PretrainArguments(**config["args"]), callbacks=callbacks)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
