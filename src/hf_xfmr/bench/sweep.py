"""Scaling sweeps: one case measured at several values of one size (usually the sequence length),
reported as a table and a plot of step time and peak memory for both sides.

    rows = run_sweep("xlnet-plm-train", "seq", [128, 256, 512, 1024, 2048], batch=2)
    plot_sweep(rows, "seq", "benchmarks/results/xlnet_seq.png", title="XLNet PLM step")
    print(sweep_markdown(rows, "seq"))

A value that fails on one side (typically out of memory) is recorded with its error and skipped in
the plot, so a sweep can show where the reference stops. Values above `ref_up_to` measure our side only
(for sizes the reference cannot run on the machine at hand); the table says so.
"""

from dataclasses import asdict
from pathlib import Path
from typing import Any

from .harness import SideStats, make_case, measure_case, peak_memory, table_lines, time_steps, torch_threads


def measure_ours_only(case, *, repeats: int = 3, warmup: int = 1, threads: int | None = None,
                      memory: bool = True, seed: int = 0) -> dict[str, Any]:
    """Our side of `case` alone (step times and peak memory): a row with `ref` None."""
    with torch_threads(threads) as n_threads:
        times, _ = time_steps(case, ("ours",), repeats=repeats, warmup=warmup, seed=seed)
    row = {"case": case.name, "mode": case.mode, "dtype": case.dtype_label, "threads": n_threads,
           "repeats": repeats, "ours": asdict(SideStats.from_seconds(times["ours"])), "ref": None, "speed_ratio": None,
           "memory_ratio": None, "params": dict(case.factory_kwargs)}
    if memory:
        row["memory"] = {"ours": peak_memory(case, "ours", threads=n_threads, seed=seed).as_dict()}
    return row


def run_sweep(case: str, param: str, values: list, *, repeats: int = 3, warmup: int = 1, threads: int | None = None,
              memory: bool = True, progress: bool = False, ref_up_to=None, **fixed: Any) -> list[dict[str, Any]]:
    """`measure_case` of `case` with `param` set to each of `values` (and `fixed` overrides); values above
    `ref_up_to` (if given) measure our side only."""
    rows = []
    for value in values:
        try:
            bench_case = make_case(case, **{**fixed, param: value})
            if ref_up_to is not None and value > ref_up_to:
                row = measure_ours_only(bench_case, repeats=repeats, warmup=warmup, threads=threads, memory=memory)
            else:
                row = measure_case(bench_case, repeats=repeats, warmup=warmup, threads=threads, memory=memory,
                                   progress=progress).as_dict()
        except (RuntimeError, MemoryError) as err:  # e.g. the reference runs out of memory
            row = {"case": case, "error": str(err).splitlines()[0]}
        row[param] = value
        rows.append(row)
    return rows


def sweep_markdown(rows: list[dict[str, Any]], param: str) -> str:
    """A markdown table: one line per value with both sides' step time and peak memory and the ratios."""
    cells = []
    for row in rows:
        if "error" in row:
            cells.append([row[param], *["—"] * 5, f"— ({row['error']})"])
            continue
        mem = row.get("memory") or {}
        ours_mb, ref_mb = mem.get("ours", {}).get("peak_mb"), mem.get("ref", {}).get("peak_mb")
        ratio = row.get("memory_ratio")
        ref_ms = "not run" if row.get("ref") is None else f"{row['ref']['median_ms']:.1f}"
        speed = "—" if row.get("speed_ratio") is None else f"{row['speed_ratio']:.2f}x"
        cells.append([row[param], f"{row['ours']['median_ms']:.1f}", ref_ms, speed,
                      "—" if ours_mb is None else f"{ours_mb:.0f}", "—" if ref_mb is None else f"{ref_mb:.0f}",
                      "—" if ratio is None else f"{ratio:.2f}x"])
    header = [param, "ours ms", "ref ms", "speed ratio", "ours peak MB", "ref peak MB", "memory ratio"]
    return "\n".join(table_lines(header, "r" * 7, cells)) + "\n"


def plot_sweep(rows: list[dict[str, Any]], param: str, path, *, title: str = "") -> Path:
    """Two panels (step time, peak memory) against `param`, ours and ref, log-log; saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [row for row in rows if "error" not in row]
    xs = [row[param] for row in done]
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(10, 4))
    for side, style in (("ours", "o-"), ("ref", "s--")):
        label = "hf_xfmr" if side == "ours" else "transformers"
        timed = [(row[param], row[side]["median_ms"]) for row in done if row.get(side) is not None]
        ax_time.plot([x for x, _ in timed], [y for _, y in timed], style, label=label)
        mem = [(row[param], (row.get("memory") or {}).get(side, {}).get("peak_mb")) for row in done]
        mem = [(x, y) for x, y in mem if y is not None]
        if mem:
            ax_mem.plot([x for x, _ in mem], [y for _, y in mem], style, label=label)
    for ax, ylabel in ((ax_time, "median step time (ms)"), (ax_mem, "peak memory growth (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(param)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:  # an empty panel (e.g. memory not measured) keeps linear axes and no legend
            ax.set_yscale("log")
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
