"""Loss curves from training logs.

A training log is a JSON-lines file: one JSON object per line, with the keys of transformers'
`Trainer.state.log_history`. Training records carry `"step"` and `"loss"` (and `"learning_rate"`,
`"grad_norm"`, `"epoch"`, ...); evaluation records carry `"step"` and `"eval_loss"`. Other records
(e.g. the final `train_runtime` summary) are ignored. To write one from a Trainer:

    with open("train_log.jsonl", "w") as f:
        for record in trainer.state.log_history:
            f.write(json.dumps(record) + "\\n")

`plot_loss_curves` draws training loss (solid) and evaluation loss (dashed, with markers) against
the step, one colour per log, into a PNG. matplotlib's object API is used directly (no pyplot, no
global backend switch), so it is safe in scripts, notebooks and threads alike.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

TRAIN_KEY = "loss"
EVAL_KEY = "eval_loss"
STEP_KEY = "step"


@dataclass(frozen=True)
class LossCurves:
    """The losses of one log: (step, value) pairs for training and evaluation."""

    label: str
    train: list[tuple[int, float]]
    eval: list[tuple[int, float]]

    @property
    def last_step(self) -> int | None:
        steps = [s for s, _ in self.train + self.eval]
        return max(steps) if steps else None

    @property
    def final_train_loss(self) -> float | None:
        return self.train[-1][1] if self.train else None

    @property
    def final_eval_loss(self) -> float | None:
        return self.eval[-1][1] if self.eval else None


def read_log(path) -> list[dict]:
    """The records of a JSON-lines training log (blank lines are skipped)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training log {path} does not exist (expected a JSON-lines file, one record per line)")
    records = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno} is not valid JSON ({err.msg}); a training log holds one JSON "
                             f"object per line, e.g. {{\"step\": 10, \"loss\": 2.3}}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno} is a JSON {type(record).__name__}, not an object; each line of a "
                             f"training log is one record such as {{\"step\": 10, \"loss\": 2.3}}")
        records.append(record)
    return records


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def loss_curves(records: Iterable[Mapping], label: str = "run") -> LossCurves:
    """Training and evaluation (step, loss) pairs of a log's records, sorted by step."""
    train, evals = [], []
    for i, record in enumerate(records):
        step = record.get(STEP_KEY, i)
        if _number(step) is None:
            continue
        for key, out in ((TRAIN_KEY, train), (EVAL_KEY, evals)):
            value = _number(record.get(key))
            if value is not None:
                out.append((int(step), value))
    return LossCurves(label, sorted(train), sorted(evals))


def _as_curves(logs) -> list[LossCurves]:
    """Accepts one log or several: paths, lists of records, or a {label: path or records} mapping."""
    if isinstance(logs, (str, Path)) or (isinstance(logs, Sequence) and logs and isinstance(logs[0], Mapping)):
        logs = [logs]
    items = list(logs.items()) if isinstance(logs, Mapping) else [(None, log) for log in logs]
    curves = []
    for i, (label, log) in enumerate(items):
        if isinstance(log, (str, Path)):
            records, default = read_log(log), Path(log).stem
        else:
            records, default = list(log), f"run {i + 1}"
        curves.append(loss_curves(records, label or default))
    return curves


def plot_loss_curves(logs, output, *, title: str = "Loss", dpi: int = 120) -> list[LossCurves]:
    """Plot training loss and evaluation loss against the step for one or more logs into a PNG.

    Args:
        logs: a path to a JSON-lines log, a list of records (dicts), several of those in a list, or a
            {label: log} mapping. Each log's label in the legend defaults to its file name.
        output: the PNG file to write (its folder is created).
        title: the figure title.

    Returns the curves that were plotted (with final losses and last steps, e.g. for a model card).
    Raises ValueError when no log has a training or evaluation loss.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curves = _as_curves(logs)
    if not curves:
        raise ValueError("no training log given to plot")
    if not any(c.train or c.eval for c in curves):
        names = ", ".join(c.label for c in curves)
        raise ValueError(f"no loss to plot in {names}: training records need \"{STEP_KEY}\" and \"{TRAIN_KEY}\", "
                         f"evaluation records \"{STEP_KEY}\" and \"{EVAL_KEY}\" (Trainer's log_history keys)")
    figure = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colors = [f"C{i % 10}" for i in range(len(curves))]
    for curve, color in zip(curves, colors):
        prefix = f"{curve.label}: " if len(curves) > 1 else ""
        if curve.train:
            steps, values = zip(*curve.train)
            axes.plot(steps, values, color=color, linewidth=1.4, label=f"{prefix}training loss")
        if curve.eval:
            steps, values = zip(*curve.eval)
            axes.plot(steps, values, color=color, linestyle="--", marker="o", markersize=3.5,
                      label=f"{prefix}evaluation loss")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=dpi, format="png")
    return curves


__all__ = ["LossCurves", "loss_curves", "plot_loss_curves", "read_log"]
