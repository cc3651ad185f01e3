"""Collator throughput vs transformers (seq 512, batch 8): `python benchmarks/bench_collators.py [--json out.json]`.

Thin wrapper around `hf_xfmr.bench.collators.benchmark_collators`; prints a markdown table.
"""

import argparse
import json

from hf_xfmr.bench.collators import benchmark_collators, markdown_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = benchmark_collators(args.batch_size, args.seq_len, repeats=args.repeats, num_threads=args.threads)
    print(markdown_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
