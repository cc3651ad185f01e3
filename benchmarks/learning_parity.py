"""Learning parity: `hf_xfmr.training.pretrain` against transformers' own pipeline (`Trainer` + the reference
model + transformers' collator on its example scripts' blocks) for MLM (BERT), PLM (XLNet) and CLM (GPT):
same corpus, tokenizer, model size and hyperparameters, held-out loss at several steps, two seeds
(`hf_xfmr.bench.learning` has the details). Re-run it whenever a recipe or a collator changes.

    python benchmarks/learning_parity.py                      # 3 cases x 2 sides x 2 seeds, 300 steps each
    python benchmarks/learning_parity.py --cases plm          # one case; merged into the existing results

Writes benchmarks/results/learning/learning_parity.{json,md,png} (docs/learning_parity.md shows them) and
prints, per case, ours minus the reference at the last step on both evaluation sets.
"""

import argparse
import json
from pathlib import Path

from hf_xfmr.bench.learning import CASES, EVAL_SETS, LearningSettings, gaps, run_benchmark, write_reports

RESULTS = Path(__file__).parent / "results" / "learning"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder of the JSON / markdown / PNG")
    parser.add_argument("--work", type=Path, default=Path("learning_output/parity"),
                        help="scratch folder (tokenizers, runs)")
    parser.add_argument("--fresh", action="store_true", help="drop the cases of earlier results instead of merging")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    steps = sorted({s for s in (25, 50, 100, 150, 200, 250, 300) if s < args.steps} | {args.steps})
    settings = LearningSettings(steps=args.steps, eval_at=tuple(steps))
    results = run_benchmark(args.cases, settings, args.work, seeds=args.seeds)
    previous = args.output / "learning_parity.json"
    if previous.exists() and not args.fresh:
        old = json.loads(previous.read_text())
        same = json.loads(json.dumps([results["settings"], results["seeds"]]))  # tuples read back as lists
        if [old.get("settings"), old.get("seeds")] == same:
            fresh = {c["case"] for c in results["cases"]}
            kept = [c for c in old["cases"] if c["case"] not in fresh]
            results["cases"] = sorted(kept + results["cases"], key=lambda c: list(CASES).index(c["case"]))
    paths = write_reports(results, args.output)
    for case in results["cases"]:
        for eval_set in EVAL_SETS:
            gap = gaps(case, eval_set)
            print(f"{case['case']}, {eval_set} set, step {args.steps}: ours - reference = "
                  + ", ".join(f"{d:+.3f} (seed {s})" for s, d in gap.items()))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


if __name__ == "__main__":
    main()
