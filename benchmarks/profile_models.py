"""Where the time goes: torch.profiler top ops of both sides of a benchmark case.

    python benchmarks/profile_models.py --case bert-mlm-train --threads 1 --top 15
"""

import argparse
import sys

from hf_xfmr import bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", required=True, choices=bench.public_cases(), help="registered case")
    parser.add_argument("--tiny", action="store_true", help="use the tiny sizes of the quick suite")
    parser.add_argument("--steps", type=int, default=1, metavar="N", help="profiled steps per side (default: 1)")
    parser.add_argument("--warmup", type=int, default=1, metavar="N", help="unprofiled steps first (default: 1)")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="torch threads (default: all)")
    parser.add_argument("--top", type=int, default=15, metavar="N", help="rows per table (default: 15)")
    parser.add_argument("--sort-by", default="self_cpu_time_total", help="profiler column to sort by")
    args = parser.parse_args(argv)

    case = bench.make_case(args.case, tiny=args.tiny)
    tables = bench.profile_case(
        case, steps=args.steps, warmup=args.warmup, threads=args.threads, top=args.top, sort_by=args.sort_by
    )
    for side, table in tables.items():
        print(f"## {args.case} — {side} ({case.dtype_label}, {case.mode})\n\n```\n{table}```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
