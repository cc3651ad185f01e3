"""Why did `pretrain --arch xlnet --objective plm` learn slower than transformers' pipeline? An ablation of
the recipe, one factor at a time, at the learning-parity settings (XLNet d_model 128, 2 layers, batch 32 x 64,
AdamW 2e-3 cosine, the embedded corpus; `hf_xfmr.bench.learning`).

Every variant is `pretrain` with one `PLMRecipe` (registered as "plm" for its run). Each is scored at
every evaluation step on:

- reference: transformers' run_plm blocks and `DataCollatorForPermutationLanguageModeling` masks;
- blocks: the default recipe's own evaluation set (shuffled 64-token blocks, our collator), the same for
  every variant;
- own: the variant's own evaluation set, as `pretrain` evaluates it (without memory);
- streams: the variant's held-out examples as contiguous per-row streams (the same batches for every
  variant with the default's blocks); streams+mem (memory variants): the same, each batch with the memory
  of the previous one (how XLNet's memory is used at inference).

The reference pipeline (`Trainer` + `XLNetLMHeadModel`) is run once per seed on the same settings.

    python benchmarks/plm_recipe_ablation.py                    # every variant, seed 0 (~25 min on one core)
    python benchmarks/plm_recipe_ablation.py --seeds 0 1 --only default
    python benchmarks/plm_recipe_ablation.py --seq-len 128 --batch-size 16 --suffix seq128 --no-reference \
        --only default default+memory xlnet                    # longer rows, the same tokens per step

Results are cached per (variant, seed, settings) in benchmarks/results/learning/plm_ablation[_SUFFIX].json
(--rerun recomputes); the markdown table goes next to it.
"""

import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch

from hf_xfmr.bench.learning import (
    CASES,
    EvalSet,
    LearningSettings,
    our_eval_set,
    prepare,
    run_ours,
    run_reference,
)
from hf_xfmr.training import PretrainCallback
from hf_xfmr.training.objectives import PLM_MEMORY_RECIPE, PLMRecipe, plm_objective

RESULTS = Path(__file__).parent / "results" / "learning"

# name -> (what changes, recipe, layout override or None). The first rows walk from XLNet's recipe (the
# old default) to the new default one factor at a time; the others change one factor of the default.
VARIANTS = {
    "xlnet": ("XLNet's recipe (the old default): pairs, contiguous streams, memory, reuse block", PLM_MEMORY_RECIPE,
              None),
    "no-mem": ("... without memory (streams still contiguous)",
                PLMRecipe(segments="pairs", reuse=True, budget_rounding="floor"), "contiguous"),
    "no-mem,shuffled": ("... and rows shuffled", PLMRecipe(segments="pairs", reuse=True, budget_rounding="floor"),
                         None),
    "no-reuse": ("... and no reuse block (pairs no longer overlap)",
                 PLMRecipe(segments="pairs", budget_rounding="floor"), None),
    "blocks": ("... and run_plm's blocks (one segment per row, no segment ids)",
               PLMRecipe(segments="blocks", budget_rounding="floor"), None),
    "default": ("... and the 1/6 budget rounded at random (the new default)", PLMRecipe(), None),
    "default+bi_data": ("default + bi_data (half of every batch reversed)", PLMRecipe(), "bi_data"),
    "default+contiguous": ("default with contiguous (unshuffled) streams", PLMRecipe(), "contiguous"),
    "default+reuse": ("default + reuse block (first half never sees the rest)", PLMRecipe(reuse=True), None),
    "default+memory": ("default + memory: contiguous streams, each block cached whole for the next",
                      PLMRecipe(memory=True), None),
}


def variant_objective(name: str):
    _, recipe, change = VARIANTS[name]
    objective = plm_objective(recipe, name="plm")
    if change == "bi_data":
        def make_collator(tokenizer, settings, base=objective.make_collator):
            seeded = base(tokenizer, settings)
            return type(seeded)(replace(seeded.collator, bi_data=True))
        return replace(objective, make_collator=make_collator)
    return replace(objective, layout=change) if change else objective


class BiData(PretrainCallback):
    """Switches the model to bi_data once `pretrain` has checked it with a one-row batch (bi_data needs two)."""

    def on_train_begin(self, run):
        run.unwrapped_model.config.bi_data = True


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), help="variants to run (default: all)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-reference", action="store_true", help="skip the reference runs")
    parser.add_argument("--rerun", action="store_true", help="recompute cached runs")
    parser.add_argument("--work", type=Path, default=Path("learning_output/plm_ablation"))
    parser.add_argument("--suffix", default="", help="results file suffix (e.g. seq128)")
    return parser.parse_args(argv)


def markdown(cache: dict, settings: LearningSettings) -> str:
    step = settings.steps
    sets = ("reference", "blocks", "own", "streams", "streams+mem")
    lines = [f"Held-out PLM loss after {step} steps (seed: value; lower is better; — = not applicable).\n",
             "| variant | what changes | " + " | ".join(f"{s} set" for s in sets) + " |",
             "|---|---|" + "---:|" * len(sets)]
    names = ["reference"] + list(VARIANTS)
    for name in names:
        runs = {k: v for k, v in cache.items() if v["variant"] == name}
        if not runs:
            continue
        what = "transformers: Trainer + XLNetLMHeadModel + DataCollatorForPermutationLanguageModeling" \
            if name == "reference" else VARIANTS[name][0]
        cells = []
        for s in sets:
            ordered = sorted(runs.values(), key=lambda r: r["seed"])
            vals = [f"{r['eval_loss'][s][r['steps'].index(step)]:.3f}" for r in ordered if s in r["eval_loss"]]
            cells.append(" / ".join(vals) if vals else "—")
        lines.append(f"| {name} | {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    eval_at = tuple(s for s in (50, 100, 150, 200, 250, 300) if s < args.steps) + (args.steps,)
    settings = LearningSettings(steps=args.steps, seq_len=args.seq_len, batch_size=args.batch_size, eval_at=eval_at)
    suffix = f"_{args.suffix}" if args.suffix else ""
    path = RESULTS / f"plm_ablation{suffix}.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    data = prepare(CASES["plm"], settings, args.work)
    fixed = {"reference": data.eval_sets["reference"], "blocks": our_eval_set(data, plm_objective(PLMRecipe()))}

    def save():
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1) + "\n")
        path.with_suffix(".md").write_text(markdown(cache, settings) + "\n")

    for seed in args.seeds:
        if not args.no_reference and (args.rerun or f"reference/{seed}" not in cache):
            run = run_reference(data, seed, eval_sets=fixed)
            cache[f"reference/{seed}"] = {**run, "variant": "reference"}
            save()
        for name in args.only or list(VARIANTS):
            key = f"{name}/{seed}"
            if key in cache and not args.rerun:
                continue
            objective = variant_objective(name)
            sets = dict(fixed, own=our_eval_set(data, objective))
            bi_data = VARIANTS[name][2] == "bi_data"
            if bi_data:  # forward-only sets: scored as forward text
                sets.update({k: EvalSet(v, config={"bi_data": False}) for k, v in fixed.items()})
            streams = our_eval_set(data, objective, streams=True)
            sets["streams"] = EvalSet(streams)
            if VARIANTS[name][1].memory:
                sets["streams+mem"] = EvalSet(streams, memory=True)
            run = run_ours(data, seed, eval_sets=sets, objective=objective, callbacks=[BiData()] if bi_data else ())
            cache[key] = {**run, "variant": name}
            print(f"{key}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in run["eval_loss"].items()), flush=True)
            save()
    print(markdown(cache, settings))


if __name__ == "__main__":
    main()
