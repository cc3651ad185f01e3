"""Training logs: JSON lines always, TensorBoard when it is installed. Main process only.

Each line of `OUTPUT/log.jsonl` is one object with transformers Trainer's `log_history` keys:
training records carry "step", "epoch", "loss", "learning_rate", "grad_norm", "tokens_per_second",
"flops_per_step", "flops_per_second" and "mfu" (`ModelFlops`; None where unknown) (plus "batches_without_targets"
and "skipped_steps" counters); evaluation records carry "step", "epoch", "eval_loss", "eval_perplexity",
"eval_accuracy" (plus objective-specific "eval_*" accuracies).
"""

import contextlib
import json
import math
from pathlib import Path
from typing import Any

# Training-record fields measured with a clock: they differ between two runs of the same steps.
TIMING_FIELDS = ("tokens_per_second", "flops_per_second", "mfu")

LOG_FILE = "log.jsonl"


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines log (a truncated last line, from a killed run, is ignored)."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class RunLog:
    """Appends records to `log.jsonl` and mirrors scalars to TensorBoard (if importable).

    On resume, records after the resumed step (written by the interrupted run after its last checkpoint)
    are dropped first, so the log reads as one run.
    """

    def __init__(self, output_dir: Path, enabled: bool, tensorboard: bool, resume_step: int | None = None):
        self.path = Path(output_dir) / LOG_FILE
        self.enabled = enabled
        self.writer = None
        if not enabled:
            return
        if resume_step is None:
            self.path.write_text("")
        elif self.path.exists():
            kept = [r for r in read_log(self.path) if r.get("step", 0) <= resume_step]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            tmp.replace(self.path)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: JSON lines only
                SummaryWriter = None
            if SummaryWriter is not None:
                self.writer = SummaryWriter(log_dir=str(Path(output_dir) / "tensorboard"),
                                            purge_step=resume_step + 1 if resume_step is not None else None)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            step = record.get("step", 0)
            for key, value in record.items():
                if key in ("step", "epoch") or not isinstance(value, (int, float)) or not math.isfinite(value):
                    continue
                tag = f"eval/{key[5:]}" if key.startswith("eval_") else f"train/{key}"
                self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class ModelFlops:
    """Model FLOPs per optimizer step, per second and as a fraction of the machine's peak (MFU), for the log.

    The FLOPs are counted once, on the run's first micro-batch (`measure`: its forward and backward pass run
    eagerly inside `hf_xfmr.machine.flop_counter`, which counts matrix products and attention), as FLOPs per real
    input token; a window of steps then did `per_token x` its real tokens. That is exact for batches like the first
    and a close estimate for others (attention grows with the square of a sequence's length, the rest with its
    tokens). With gradient checkpointing the recomputed forward pass is counted too. A checkpoint keeps `per_token`,
    so a resumed run logs the figures of the uninterrupted one. `peak`: the peak FLOP/s of all processes together for
    the run's dtype (None: no MFU)."""

    FIELDS = ("flops_per_step", "flops_per_second", "mfu")

    def __init__(self, peak: float | None = None):
        self.peak = peak
        self.per_token: float | None = None

    @contextlib.contextmanager
    def measure(self, tokens: float):
        """Count the FLOPs of the block (a micro-batch of `tokens` real tokens) if none were counted yet; a compiled
        model runs it eagerly (the counter sees eager operations only), the next call compiles as usual."""
        if self.per_token is not None or not tokens:
            yield
            return
        import torch

        from ..machine import flop_counter

        with flop_counter() as counter, torch.compiler.set_stance("force_eager"):
            yield
        self.per_token = counter.get_total_flops() / tokens

    def fields(self, tokens: float, steps: int, seconds: float) -> dict[str, float | None]:
        """The log fields of a window of `steps` optimizer steps over `tokens` real tokens (all processes) that took
        `seconds`."""
        if self.per_token is None or not steps or seconds <= 0:
            return dict.fromkeys(self.FIELDS)
        flops = self.per_token * tokens
        per_second = flops / seconds
        return {"flops_per_step": flops / steps, "flops_per_second": per_second,
                "mfu": per_second / self.peak if self.peak else None}
