"""Side-by-side model benchmarks: hf_xfmr against the transformers reference implementations.

    python benchmarks/bench_models.py --cases bert-mlm-train bert-mlm-infer --repeats 7 \\
        --json benchmarks/results/models.json --markdown benchmarks/results/models.md

A thin script over `hf_xfmr.bench` (the same harness as `hf-xfmr bench`); see `--help`.
"""

import argparse
import sys
from pathlib import Path

import torch

from hf_xfmr import bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cases", nargs="+", default=[name for name, _ in bench.suites()["all"]], metavar="NAME",
        help=f"registered cases (default: the 'all' suite); known: {', '.join(bench.public_cases())}",
    )  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="use the tiny sizes of the quick suite")
    parser.add_argument("--repeats", type=int, default=7, metavar="N", help="timed steps per side (default: 7)")
    parser.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed steps per side (default: 1)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="torch threads (default: all)")
    parser.add_argument("--no-memory", action="store_true", help="skip peak-memory measurements")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the markdown table")
    args = parser.parse_args(argv)

    unknown = [name for name in args.cases if name not in bench.public_cases()]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(bench.public_cases())}")
    threads = args.threads or torch.get_num_threads()
    results = []
    for name in args.cases:
        print(f"[{name}]", file=sys.stderr)
        case = bench.make_case(name, tiny=args.tiny)
        results.append(
            bench.measure_case(
                case, repeats=args.repeats, warmup=args.warmup, threads=threads,
                memory=not args.no_memory, progress=True,
            )  # fmt: skip
        )
    table = bench.to_markdown(results)
    print(table)
    if args.json:
        bench.to_json(results, args.json, tiny=args.tiny)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
