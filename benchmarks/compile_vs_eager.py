"""Compiled against eager training steps of our models, in fp32 and under bf16 autocast (issue #29).

    python benchmarks/compile_vs_eager.py --threads 1 --out benchmarks/results/compile
    python benchmarks/compile_vs_eager.py --cases bert --precisions fp32 --seq 128 --steps 2

Each case is `benchmarks/profile_bf16.py`'s: our model of `hf-xfmr bench`'s `bert-mlm-train` / `gpt-clm-train` (the
default), or with `--cases llama mixtral electra bigbird` of the families added since (`llama-sft-full-padded`,
`mixtral-clm-train`, `electra-rtd-train`, `bigbird-mlm-train`), at its headline size (8 x 512 for BERT and GPT) unless
--batch / --seq say otherwise, trained as `hf-xfmr pretrain` trains it (an
`Accelerator` with mixed precision "no" or "bf16", fused AdamW, clipping at 1.0). The compiled side is what
`--compile` does (`hf_xfmr.training.compiled.compile_model`: inductor, dynamic shapes, compiled before
`accelerator.prepare`). Per side: `--warmup` untimed steps (the compiled side's first steps compile; their time is
reported as "compile s"), then `--steps` timed steps; the table shows the medians and eager / compiled (> 1: the
compiled step is faster). A compiled model that fell back to eager says so in the table.
"""

import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_bf16 import CASES, build_case, case_parser, prepared, train_step  # noqa: E402


def time_side(case: str, precision: str, compiled: bool, args) -> dict:
    from hf_xfmr.training.compiled import CompileFallbackWarning, compile_model

    model, batch, description = build_case(CASES[case], args.batch, args.seq)
    if compiled:
        compile_model(model)
    accelerator, model, optimizer = prepared(model, precision)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompileFallbackWarning)
        start = time.perf_counter()
        for _ in range(args.warmup):
            train_step(accelerator, model, optimizer, batch)
        warmup_s = time.perf_counter() - start
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            train_step(accelerator, model, optimizer, batch)
            times.append(time.perf_counter() - start)
    fallback = [str(w.message) for w in caught if issubclass(w.category, CompileFallbackWarning)]
    return {"case": case, "precision": precision, "compiled": compiled, "description": description,
            "warmup_s": warmup_s, "step_ms_median": 1e3 * statistics.median(times), "step_ms": [1e3 * t for t in times],
            "fallback": fallback[0] if fallback else None}


def markdown(rows: list[dict], machine: str, threads: int) -> str:
    lines = ["| case | precision | eager ms | compiled ms | eager / compiled | compile s (warm-up) | fell back |",
             "|---|---|---:|---:|---:|---:|---|"]
    pairs = {}
    for row in rows:
        pairs.setdefault((row["case"], row["precision"]), {})[row["compiled"]] = row
    for (case, precision), pair in pairs.items():
        eager, compiled = pair[False], pair[True]
        lines.append(f"| {CASES[case]} | {precision} | {eager['step_ms_median']:,.0f} | "
                     f"{compiled['step_ms_median']:,.0f} | {eager['step_ms_median'] / compiled['step_ms_median']:.2f}x | "
                     f"{compiled['warmup_s']:,.0f} | {'yes' if compiled['fallback'] else 'no'} |")
    lines += ["", f"{machine}; {threads} thread(s); torch {torch.__version__}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = case_parser(__doc__)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side (default: 2; compiles)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (default: 3)")
    parser.add_argument("--out", type=Path, default=None, help="folder for compile.md and compile.json")
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.threads < 1:
        parser.error("--warmup, --steps and --threads must be >= 1")

    from hf_xfmr.machine import cpu_info, cpu_summary

    torch.set_num_threads(args.threads)
    rows = []
    for case in args.cases:
        for precision in args.precisions:
            for compiled in (False, True):
                print(f"{CASES[case]} {precision} {'compiled' if compiled else 'eager'} ...", file=sys.stderr, flush=True)
                rows.append(time_side(case, precision, compiled, args))
    info = cpu_info()
    text = markdown(rows, cpu_summary(info), args.threads)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compile.md").write_text(text + "\n")
        (args.out / "compile.json").write_text(json.dumps({"machine": info, "threads": args.threads, "rows": rows},
                                                          indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
