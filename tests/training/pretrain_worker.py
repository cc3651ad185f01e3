"""Runs `hf_xfmr.training.pretrain` in a (possibly distributed) child process for the tests.

Usage: python pretrain_worker.py CONFIG.json (or under `accelerate launch`). CONFIG holds one run, or
`runs`: a list of them, trained one after the other in the same processes (one launch, several runs).
A run holds:
    args: PretrainArguments fields;
    report: folder for rank<r>.json (world size, backend, fingerprints of the batches seen, the padding
            and targets of each micro-batch) and rank<r>.safetensors (the parameters, when every process
            holds all of them: not under DeepSpeed or FSDP);
    block_after_step: write `marker` after this optimizer step, then wait to be killed;
    block_in_checkpoint: write `marker` while the checkpoint of this step is half written, then wait;
    unsynced: control run: turn off DDP's gradient all-reduce (ranks must then diverge);
    skew: make the ranks' micro-batches differ in shape of work (see `Skew`);
    stall: {"rank": r, "step": s}: process r stops taking part (sleeps) in step s, before its forward pass.
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
        self.folder, self.unsynced, self.batches, self.shapes, self.info = folder, unsynced, [], [], {}

    def on_train_begin(self, run):
        state = run.accelerator.state
        self.info = {"world_size": run.accelerator.num_processes, "rank": run.accelerator.process_index,
                     "distributed_type": str(state.distributed_type), "backend": state.backend}

    def on_micro_batch(self, run, batch):
        self.batches.append(hashlib.sha1(batch["input_ids"].cpu().numpy().tobytes()).hexdigest())
        mask = batch.get("attention_mask")
        self.shapes.append({"padding": int((mask == 0).sum()) if mask is not None else 0,
                            "targets": int((batch["labels"] != -100).sum())})
        if self.unsynced:
            run.model.require_backward_grad_sync = False  # what DDP's no_sync() does

    def on_train_end(self, run, result):
        self.folder.mkdir(parents=True, exist_ok=True)
        rank = self.info["rank"]
        info = {**self.info, "batches": self.batches, "shapes": self.shapes, "final_loss": result.final_loss,
                "step": result.step}
        (self.folder / f"rank{rank}.json").write_text(json.dumps(info))
        if not getattr(run.accelerator.state, "deepspeed_plugin", None) and not run.accelerator.is_fsdp2:
            params = {n: p.detach().cpu().contiguous() for n, p in run.unwrapped_model.named_parameters()}
            save_file(params, str(self.folder / f"rank{rank}.safetensors"))


class Skew(PretrainCallback):
    """Gives the ranks micro-batches that differ in everything a model could branch on.

    Rank 0: every row full length (padding replaced by a real token, attention everywhere). Other ranks:
    heavily padded rows (row r keeps its first r + 2 tokens) and, on even steps, no target at all. Under
    ZeRO-3 the ranks must still run the same modules in the same order, else they wait for ever."""

    def on_micro_batch(self, run, batch):
        ids, mask, labels = batch["input_ids"], batch.get("attention_mask"), batch["labels"]
        if mask is None or mask.dim() != 2:
            raise ValueError("Skew needs a (B, T) attention_mask in the batch")
        if run.accelerator.process_index == 0:
            filler = int(ids[mask.bool()][-1])  # a real token of this batch
            ids.masked_fill_(~mask.bool(), filler)
            mask.fill_(1)
            return
        pad = run.tokenizer.pad_token_id
        for row in range(ids.shape[0]):
            keep = row + 2
            mask[row, keep:] = 0
            ids[row, keep:] = pad
            for name in ("token_type_ids", "position_ids"):
                if name in batch and batch[name].shape == ids.shape:
                    batch[name][row, keep:] = 0
            labels[row, keep:] = -100  # (an encoder-decoder's labels are its targets: those get short too)
        if (run.step + 1) % 2 == 0:
            labels.fill_(-100)
        elif labels.shape == ids.shape:  # odd steps: a target in every row, however short
            missing = labels[:, 1] == -100
            labels[missing, 1] = ids[missing, 1]


class Stall(PretrainCallback):
    """Process `rank` stops taking part in step `step`: it sleeps before its first forward pass of that step."""

    def __init__(self, rank: int, step: int):
        self.rank, self.step = rank, step

    def on_micro_batch(self, run, batch):
        if run.accelerator.process_index == self.rank and run.step + 1 == self.step:
            while True:
                time.sleep(1)


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


def run_one(config: dict) -> None:
    callbacks = []
    if config.get("skew"):
        callbacks.append(Skew())  # before Report, which records what the model is given
    if config.get("report"):
        callbacks.append(Report(Path(config["report"]), config.get("unsynced", False)))
    if config.get("marker"):
        callbacks.append(Block(Path(config["marker"]), config.get("block_after_step"), config.get("block_in_checkpoint")))
    if config.get("stall"):
        callbacks.append(Stall(config["stall"]["rank"], config["stall"]["step"]))
    pretrain(PretrainArguments(**config["args"]), callbacks=callbacks)


def main(config_file: str) -> None:
    config = json.loads(Path(config_file).read_text())
    torch.set_num_threads(1)
    for run in config.get("runs", [config]):
        run_one(run)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
