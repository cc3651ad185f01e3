"""Our training step under bf16 autocast against transformers' under the same autocast, for the families that came
after BERT and GPT (issue #29: "ours in bf16 >= 2.5x transformers in bf16, and each family added since").

    python benchmarks/bf16_families.py --threads 2 --out benchmarks/results/bf16_products/families

Each case is `hf-xfmr bench`'s fp32 training case of the family, run under `torch.autocast("cpu", torch.bfloat16)`
on both sides (what `--bf16` / `--mixed_precision bf16` / Trainer's `bf16=True` do), at reduced sizes: on a CPU
without AMX the reference's bf16 products run on torch's slow bf16 kernels, minutes per step at the headline
sizes. Ours takes the products onto the fp32 kernels there (`hf_xfmr.layers.bf16_products`). One warm-up and
`--repeats` timed steps per side, interleaved, in one process.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

# (bench case, size overrides): a quarter of the headline tokens or less, so that the reference's bf16 step
# takes well under a minute
CASES = {
    "llama-sft-full-padded": dict(batch=4, seq=256, min_len=32),
    "mixtral-clm-train": dict(batch=2, seq=256, min_len=256),
    "electra-rtd-train": dict(batch=4, seq=256, min_len=256),
    "bigbird-mlm-train": dict(batch=1, seq=1024),
}


def run(names: list[str], threads: int, repeats: int) -> list[dict]:
    """One row per case; where the reference fails under bf16 autocast, ours is timed alone and the error kept."""
    from hf_xfmr import bench
    from hf_xfmr.bench.harness import SideStats, time_case, time_steps, torch_threads

    rows = []
    for name in names:
        case = bench.make_case(name, **CASES[name])
        case = dataclasses.replace(case, name=f"{name}-bf16", autocast_dtype=torch.bfloat16)
        row = {"case": name, "sizes": CASES[name], "description": case.description, "ref_error": None}
        try:
            result = time_case(case, repeats=repeats, warmup=1, threads=threads, count_flops=False)
            row.update(ours_ms=result.ours.median_ms, ref_ms=result.ref.median_ms)
        except RuntimeError as error:  # the reference's own failure under bf16 (ours is timed alone below)
            row["ref_error"] = str(error).splitlines()[0]
            with torch_threads(threads):
                times, _ = time_steps(case, sides=("ours",), repeats=repeats, warmup=1)
            row.update(ours_ms=SideStats.from_seconds(times["ours"]).median_ms, ref_ms=None)
        row["speed"] = row["ref_ms"] / row["ours_ms"] if row["ref_ms"] else None
        ref = row["ref_error"] or f"{row['ref_ms']:.0f} ms, {row['speed']:.2f}x"
        print(f"{name}: ours {row['ours_ms']:.0f} ms, transformers {ref}", flush=True)
        rows.append(row)
    return rows


def markdown(rows: list[dict], machine: str, threads: int, repeats: int) -> str:
    lines = [f"{machine}; torch {torch.__version__}, {threads} thread(s); bf16 autocast on both sides; one warm-up "
             f"and {repeats} timed step(s) per side, interleaved; medians.", "",
             "| case | sizes | ours ms | transformers ms | speed ratio |", "|---|---|---:|---:|---:|"]
    for r in rows:
        sizes = ", ".join(f"{k} {v}" for k, v in r["sizes"].items())
        ref = f"{r['ref_ms']:.0f}" if r["ref_ms"] else f"fails: {r['ref_error']}"
        speed = f"**{r['speed']:.2f}x**" if r["speed"] else "—"
        lines.append(f"| {r['case']} (bf16) | {sizes} | {r['ours_ms']:.0f} | {ref} | {speed} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES), help="what to run")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps per side (default: 1)")
    parser.add_argument("--out", type=Path, default=None, help="folder for families.md and families.json")
    args = parser.parse_args(argv)
    from hf_xfmr.machine import cpu_info, cpu_summary

    rows = run(args.cases, args.threads, args.repeats)
    machine = cpu_summary(cpu_info())
    text = markdown(rows, machine, args.threads, args.repeats)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "families.md").write_text(text)
        (args.out / "families.json").write_text(json.dumps({"machine": cpu_info(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
