"""bf16 on CPU: where the time of a training step goes, by op category, against fp32 (issue #29).

    python benchmarks/profile_bf16.py --threads 1                       # BERT MLM and GPT CLM, 8 x 512
    python benchmarks/profile_bf16.py --cases bert --seq 128 --threads 2 --out benchmarks/results/bf16_profile

Each case is a training step at the headline size of `hf-xfmr bench`'s case (`bert-mlm-train`: hidden 256, 4
layers, vocab 30522, sparse MLM prediction; `gpt-clm-train`: hidden 256, 4 layers, vocab 32000, chunked loss;
batch 8 x 512 unless --batch / --seq say otherwise), trained the way `hf-xfmr pretrain` trains it: the model and
`build_optimizer("adamw", parameter_groups(...))` prepared by an `Accelerator(cpu=True, mixed_precision=...)` ("no"
for fp32, "bf16": autocast around the forward, outputs cast back to fp32), `accelerator.backward`, gradient clipping
at 1.0, the optimizer step, `zero_grad`. AdamW takes its fused kernel (`fused=True`) unless `--adamw loop` asks for
the per-tensor loop (`build_optimizer`'s default). Per precision: `--warmup` untimed steps, `--steps` timed steps
(the median is reported), then one step under `torch.profiler`.

Every profiled op's self time goes to one category, decided by the op and the ops it runs inside:
    optimizer   anything inside the clipping + optimizer phase (`Optimizer.step`, the norm, the foreach ops)
    casts       `aten::to` / `aten::_to_copy` and autograd's `ToCopyBackward0` (autocast's weight and
                activation casts, the backward's casts of gradients to the fp32 master weights), wherever they run
    matmul      `mm`, `addmm`, `bmm`, `linear`, `matmul` and their backward nodes
    softmax / attention   `scaled_dot_product_attention` (its kernels included), softmax
    norm        LayerNorm / RMSNorm, forward and backward
    loss        cross-entropy, log-softmax, NLL and the chunked linear cross-entropy
    elementwise activation, dropout, residual adds, masks, copies, reductions, gradient accumulation
    embedding   embedding lookups and their backward
    other       the rest
The JSON lists the ops that took most in each category (with the op they ran in and their first input's shape).
The optimizer phase wins, then a cast, then a matrix product anywhere (the vocabulary products inside the
chunked cross-entropy count as matmul, its exp / sums as loss; a bias gradient's `sum` inside `AddmmBackward0` as
matmul); otherwise the outermost categorised op wins (a `fill_` inside `layer_norm` counts as norm). The table
shows milliseconds per step and shares of the profiled total; the machine (`cpu_info()`) and the thread count go
with it.
"""

import argparse
import json
import re
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

CATEGORIES = ("matmul", "casts", "elementwise", "softmax / attention", "norm", "loss", "embedding", "optimizer",
              "other")
CASES = {"bert": "bert-mlm-train", "gpt": "gpt-clm-train", "llama": "llama-sft-full-padded", "mixtral": "mixtral-clm-train",
         "electra": "electra-rtd-train", "bigbird": "bigbird-mlm-train"}
DEFAULT_CASES = ["bert", "gpt"]  # the two; the families added since run on request (--cases)
OPTIMIZER_PHASE = "phase: optimizer"
# (category, pattern over the lower-cased op or autograd-node name); the first match wins.
RULES = [(category, re.compile(pattern)) for category, pattern in (
    ("casts", r"^aten::(to|_to_copy|type_as)$|tocopybackward"),
    ("loss", r"cross_entropy|crossentropy|nll_loss|nllloss|log_softmax|logsoftmax"),
    ("softmax / attention", r"scaled_dot_product|attention|softmax"),
    ("norm", r"layer_norm|layernorm|rms_norm|rmsnorm"),
    ("matmul", r"^aten::(mm|addmm_?|bmm|baddbmm_?|matmul|linear|_addmm_activation)$|mkldnn|"
               r"(addmm|mm|bmm|linear|matmul|baddbmm)backward"),
    ("embedding", r"embedding"),
    ("optimizer", r"^optimizer\.|_foreach_|_fused_adam|clip_grad"),
    ("elementwise", r"^aten::(add|add_|mul|mul_|sub|sub_|div|div_|gelu|silu|tanh|relu|sigmoid|dropout|"
                    r"native_dropout|bernoulli_|where|masked_fill|masked_fill_|fill_|zero_|zeros|zeros_like|copy_|"
                    r"clone|contiguous|neg|pow|sqrt|rsqrt|exp|sum|mean|threshold|cat|index|index_select|gather|"
                    r"scatter|lerp_|addcmul_|addcdiv_|_unsafe_view|reshape|view|t|transpose|expand|"
                    r"gelu_backward|silu_backward|native_dropout_backward|cumsum|arange|ones_like|empty_like)$|"
                    r"(add|mul|sub|div|gelu|silu|tanh|dropout|where|maskedfill|neg|pow|sqrt|rsqrt|exp|sum|mean|"
                    r"clone|cat|index|unsafeview|view|t|transpose|expand|gather)backward|accumulategrad|"
                    r"^_cpudropout"),
)]


def op_category(name: str) -> str | None:
    """The category of one op or autograd-node name (None: uncategorised)."""
    name = name.lower().removeprefix("autograd::engine::evaluate_function: ")
    for category, pattern in RULES:
        if pattern.search(name):
            return category
    return None


def event_category(event) -> str:
    """The category an event's self time counts in: the optimizer phase, then casts, then matmul, then the
    outermost categorised op among the event and its ancestors, else "other"."""
    chain = []
    while event is not None:
        chain.append(event.name)
        event = event.cpu_parent
    if OPTIMIZER_PHASE in chain:
        return "optimizer"
    categories = [op_category(name) for name in chain]
    for first in ("casts", "matmul"):
        if first in categories:
            return first
    outermost = [c for c in categories if c is not None]
    return outermost[-1] if outermost else "other"


def breakdown(events, steps: int) -> dict:
    """Self time per category (ms per step) and, per category, the ops (with the op they ran in) that took most."""
    per_category = dict.fromkeys(CATEGORIES, 0.0)
    ops: dict[str, dict[str, float]] = {category: {} for category in CATEGORIES}
    for event in events:
        if event.name.startswith("phase: "):
            continue  # our own ranges: the Python between their ops, not an op
        category = event_category(event)
        ms = event.self_cpu_time_total / 1e3 / steps
        per_category[category] += ms
        parent = event.cpu_parent.name if event.cpu_parent is not None else "-"
        key = f"{event.name} in {parent} {list(event.input_shapes[0]) if event.input_shapes else ''}".rstrip()
        ops[category][key] = ops[category].get(key, 0.0) + ms
    top = {category: dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:6]) for category, by_op in ops.items()}
    return {"ms": per_category, "top_ops": top}


def build_case(name: str, batch: int | None, seq: int | None):
    """(our model, batch) of `hf-xfmr bench`'s training case `name` at its headline size."""
    from hf_xfmr import bench

    sizes = {k: v for k, v in dict(batch=batch, seq=seq).items() if v is not None}
    case = bench.make_case(name, **sizes)
    torch.manual_seed(0)
    ours, _ = case.build_pair()
    torch.manual_seed(1)
    return ours, case.make_batch(), case.description


def prepared(model, precision: str, adamw: str = "fused"):
    """(accelerator, model, optimizer) as the Pretrainer prepares them; `adamw`: "fused" (torch's fused kernel,
    `build_optimizer(..., fused=True)`) or "loop" (the per-tensor loop, `build_optimizer`'s default)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from hf_xfmr.training.optim import build_optimizer, parameter_groups

    AcceleratorState._reset_state(reset_partial_state=False)  # a new mixed-precision setting in this process
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16" if precision == "bf16" else "no")
    hyper = dict(lr=1e-5, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    groups = parameter_groups(model, 0.01)
    optimizer = build_optimizer("adamw", groups, **hyper, fused=adamw == "fused")
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    return accelerator, model, optimizer


def train_step(accelerator, model, optimizer, batch, phases: bool = False) -> None:
    """Forward (with the loss), backward, clipping, the update: `Pretrainer.train_step` for one micro-batch."""
    from torch.profiler import record_function

    def phase(name):
        return record_function(f"phase: {name}") if phases else nullcontext()

    with phase("forward"):
        loss = model(**batch).loss
    with phase("backward"):
        accelerator.backward(loss)
    with phase("optimizer"):
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def profile_one(case: str, precision: str, args) -> dict:
    """Timings and the category breakdown of one case in one precision."""
    from torch.profiler import ProfilerActivity, profile

    model, batch, description = build_case(CASES[case], args.batch, args.seq)
    accelerator, model, optimizer = prepared(model, precision, args.adamw)
    for _ in range(args.warmup):
        train_step(accelerator, model, optimizer, batch)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        train_step(accelerator, model, optimizer, batch)
        times.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        train_step(accelerator, model, optimizer, batch, phases=True)
        profiled_s = time.perf_counter() - start
    events = prof.events()
    phase_ms = {e.name.removeprefix("phase: "): e.cpu_time_total / 1e3 for e in events if e.name.startswith("phase: ")}
    result = breakdown(events, 1)
    return {"case": case, "bench_case": CASES[case], "precision": precision, "adamw": args.adamw,
            "description": description,
            "step_ms_median": 1e3 * statistics.median(times), "step_ms": [1e3 * t for t in times],
            "profiled_step_ms": 1e3 * profiled_s, "phase_ms": phase_ms, **result}


def markdown(results: list[dict], machine: str, threads: int) -> str:
    """The category table (ms per step and share) of every case, fp32 next to bf16."""
    adamw = ", ".join(sorted({r["adamw"] for r in results}))
    lines = [f"{machine}; torch {torch.__version__}, {threads} thread(s); AdamW: {adamw}.", ""]
    for case in dict.fromkeys(r["case"] for r in results):
        rows = {r["precision"]: r for r in results if r["case"] == case}
        first = next(iter(rows.values()))
        lines += [f"**{first['bench_case']}** ({first['description']})", ""]
        header = ["category"] + [f"{p} ms (share)" for p in rows] + (["bf16 / fp32"] if len(rows) == 2 else [])
        lines += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        totals = {p: sum(r["ms"].values()) for p, r in rows.items()}
        for category in CATEGORIES + ("total (profiled self time)",):
            cells = [category]
            for p, r in rows.items():
                ms = totals[p] if category.startswith("total") else r["ms"][category]
                cells.append(f"{ms:,.1f} ({100 * ms / totals[p]:.0f}%)")
            if len(rows) == 2:
                a, b = ([totals[p] for p in ("fp32", "bf16")] if category.startswith("total")
                        else [rows[p]["ms"][category] for p in ("fp32", "bf16")])
                cells.append(f"{b / a:.1f}x" if a > 0.05 else "-")
            lines.append("| " + " | ".join(cells) + " |")
        for p, r in rows.items():
            phases = ", ".join(f"{k} {v:,.0f}" for k, v in r["phase_ms"].items())
            lines.append(f"\n{p}: median step {r['step_ms_median']:,.0f} ms unprofiled (of {len(r['step_ms'])}); "
                         f"profiled step by phase (ms): {phases}.")
        lines.append("")
    return "\n".join(lines)


def case_parser(description: str) -> argparse.ArgumentParser:
    """The options of a script over these cases (this one, compile_vs_eager.py): which cases and precisions, the
    batch's size, the threads."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=DEFAULT_CASES,
                        help="what to run (default: bert gpt)")
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    parser.add_argument("--batch", type=int, default=None, help="rows per step (default: the case's)")
    parser.add_argument("--seq", type=int, default=None, help="tokens per row (default: the case's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    return parser


def main(argv=None) -> int:
    parser = case_parser(__doc__)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default: 1)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps before the profiled one (default: 2)")
    parser.add_argument("--adamw", choices=("fused", "loop"), default="fused",
                        help="AdamW's fused kernel (default) or its per-tensor loop, to compare")
    parser.add_argument("--out", type=Path, default=None, help="folder for profile.md and profile.json")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.steps < 1 or args.threads < 1:
        parser.error("--warmup must be >= 0, --steps and --threads >= 1")

    from hf_xfmr.machine import cpu_info, cpu_summary

    torch.set_num_threads(args.threads)
    results = []
    for case in args.cases:
        for precision in args.precisions:
            print(f"profiling {CASES[case]} in {precision} ...", file=sys.stderr, flush=True)
            results.append(profile_one(case, precision, args))
    info = cpu_info()
    text = markdown(results, cpu_summary(info), args.threads)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "profile.md").write_text(text + "\n")
        (args.out / "profile.json").write_text(json.dumps({"machine": info, "threads": args.threads,
                                                           "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
