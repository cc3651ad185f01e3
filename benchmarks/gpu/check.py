"""The GPU check: on one NVIDIA GPU, offline, in a few minutes, what every GPU path of hf_xfmr does there.

    benchmarks/gpu/check.sh                      # on a GPU machine: results under benchmarks/results/gpu/
    python benchmarks/gpu/check.py --dry-run     # the same code paths on the CPU at tiny sizes (seconds)

Sections, each recorded even when another fails (check.json, check.md in the output folder):
1. machine: `hf_xfmr.machine` facts (CPU, GPU), versions, whether flash-attn is installed.
2. parity: every architecture of the registry, every head, built tiny (`from_preset("tiny")`), its
   transformers twin made by the production converter (`hf_xfmr.to_transformers`), both moved to the device,
   on a right-padded batch with labels: every output the two share, at real positions, and the loss. fp32 must
   agree within atol = rtol = 1e-5 (TF32 off). bf16 (both models cast) is compared with the fp32 reference:
   ours passes when its error is at most twice the reference's own bf16 error plus 1e-2 (bf16 keeps 8 bits
   of mantissa; the two implementations round differently, neither is exact).
3. attention: the backends the code selects on the device (eager, sdpa, and flash_attention_2 where
   flash-attn is installed and the device is CUDA; padded batches through the BERT family and ModernBERT take
   the unpadded varlen kernel) against eager on the same weights: sdpa in fp32 (1e-5), flash in bf16 against
   the eager fp32 output (error at most 5e-2, bf16's rounding over a few layers).
4. bench: `hf_xfmr.bench` training cases at full size on the device in fp32 and bf16 autocast (fp32 only for
   cases without an autocast setting), ours against transformers, 5 interleaved steps per side, with step
   FLOPs and the fraction of the device's peak (a matmul probe, or `HF_XFMR_PEAK_GFLOPS`); `--memory` adds
   the peak memory. TF32 is off throughout, so fp32 means fp32.

Exit status 0 when every parity and attention check passed, 1 otherwise (results are written either way).
The `--budget` (seconds) stops starting new work once spent, so the whole run fits `check.sh`'s 8 minutes.
"""

import argparse
import copy
import datetime
import importlib.util
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
FP32_TOL = 1e-5
BF16_SLACK = 1e-2  # bf16 passes when ours' error <= 2 x the reference's bf16 error + BF16_SLACK
FLASH_TOL = 5e-2
DRY_ARCHS = ("bert", "gpt", "t5")
# Training cases timed on the device, with the dtypes each case offers (fp32 only: no autocast setting).
BOTH, FP32 = ("fp32", "bf16"), ("fp32",)
BENCH_CASES = {"bert-mlm-train": BOTH, "gpt-clm-train": BOTH, "modernbert-mlm-train": BOTH, "t5-span-train": BOTH,
               "bart-infill-train": BOTH, "xlnet-plm-train": BOTH, "bigbird-mlm-train": BOTH,
               "llama-sft-full-padded": FP32, "mixtral-clm-train": FP32, "electra-rtd-train": FP32}
BATCH, SEQ, DEC_SEQ, LENGTHS = 3, 12, 7, (12, 8, 5)


class Clock:
    """The run's time budget: `left()` seconds remain, `spent` says whether to stop starting new work."""

    def __init__(self, budget: float):
        self.start, self.budget = time.perf_counter(), budget

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    @property
    def spent(self) -> bool:
        return self.left() <= 0


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------


def _batch(config, task: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """A right-padded batch (rows of 12, 8 and 5 tokens) with what `task` needs (labels, decoder inputs)."""
    g = torch.Generator().manual_seed(seed)
    low, high = 5, min(config.vocab_size, 90)
    ids = torch.randint(low, high, (BATCH, SEQ), generator=g)
    mask = (torch.arange(SEQ)[None] < torch.tensor(LENGTHS)[:, None]).long()
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    if config.is_encoder_decoder and config.eos_token_id is not None:  # BART's heads pool the last </s>
        ids[torch.arange(BATCH), torch.tensor(LENGTHS) - 1] = config.eos_token_id
    ids = ids.masked_fill(mask == 0, pad)
    batch = {"input_ids": ids, "attention_mask": mask}
    if task == "masked-lm":
        chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
        chosen[0, 0] = True
        batch["labels"] = torch.where(chosen, ids, -100)
    elif task == "causal-lm":
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    elif task == "sequence-classification":
        batch["labels"] = torch.randint(0, 2, (BATCH,), generator=g)
    elif task == "token-classification":
        batch["labels"] = torch.randint(0, 2, (BATCH, SEQ), generator=g).masked_fill(mask == 0, -100)
    elif task == "multiple-choice":
        batch = {k: torch.stack([v, v.roll(1, dims=0)], dim=1) for k, v in batch.items()}  # (B, K=2, T)
        batch["labels"] = torch.randint(0, 2, (BATCH,), generator=g)
    elif task == "seq2seq-lm":
        batch["labels"] = torch.randint(low, high, (BATCH, DEC_SEQ), generator=g)
    elif task == "base" and config.is_encoder_decoder:
        batch["decoder_input_ids"] = torch.randint(low, high, (BATCH, DEC_SEQ), generator=g)
    return batch


def _real(batch) -> torch.Tensor:
    mask = batch["attention_mask"]
    return mask.reshape(-1, mask.shape[-1]).bool()  # (B, T) or (B*K, T)


def _tensors(output) -> dict[str, torch.Tensor]:
    named = {}
    for key, value in output.items():
        if isinstance(value, torch.Tensor):
            named[key] = value
        elif isinstance(value, tuple):
            named.update({f"{key}.{i}": v for i, v in enumerate(value) if isinstance(v, torch.Tensor)})
    return named


def _errors(ours, ref, keep, *, skip=()) -> dict[str, tuple[float, float]]:
    """name -> (max |ours - ref|, max |ref|) over the tensors both outputs hold (real positions of per-position
    tensors: padding positions hold documented values of their own)."""
    a_named, b_named = _tensors(ours), _tensors(ref)
    errors = {}
    for key in sorted(set(a_named) & set(b_named) - set(skip)):
        a, b = a_named[key].float(), b_named[key].float()
        if a.shape != b.shape:
            continue
        if a.dim() >= 2 and tuple(a.shape[:2]) == tuple(keep.shape):
            a, b = a[keep], b[keep]
        errors[key] = ((a - b).abs().max().item() if a.numel() else 0.0, b.abs().max().item() if b.numel() else 0.0)
    return errors


# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------


def machine_section(device: str) -> dict:
    import transformers

    import hf_xfmr
    from hf_xfmr import machine

    return {"device": device, **machine.machine_info(device), "torch": torch.__version__,
            "transformers": transformers.__version__, "hf_xfmr": hf_xfmr.__version__,
            "flash_attn": importlib.util.find_spec("flash_attn") is not None,
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _tiny_config(arch, **overrides):
    """The architecture's tiny preset, with a padding id (sequence classification of padded rows needs one)."""
    config = arch.config_class.from_preset("tiny", **overrides)
    if config.pad_token_id is None:
        config = arch.config_class.from_preset("tiny", pad_token_id=0, **overrides)
    return config


def _pair(arch, task: str):
    """(ours, ref): a tiny model of `arch` for `task` and its transformers twin through the converter, eval."""
    import hf_xfmr

    torch.manual_seed(0)
    config = _tiny_config(arch, num_labels=2)
    ours = arch.model_class(task)(config).eval()
    ref = hf_xfmr.to_transformers(ours).eval()
    return ours, ref


def _run(model, batch, device, dtype=None):
    model = model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)
    with torch.no_grad():
        return model(**{k: v.to(device) for k, v in batch.items()})


def parity_case(arch, task: str, device: str) -> dict:
    """fp32 and bf16 parity of one head (see the module docstring)."""
    ours, ref = _pair(arch, task)
    batch = _batch(ours.config, task)
    keep = _real(batch).to(device)
    skip = ("loss",) if task == "question-answering" else ()  # ours masks padding in its span loss
    ref32, ours32 = _run(ref, batch, device), _run(ours, batch, device)
    fp32 = _errors(ours32, ref32, keep, skip=skip)
    fp32_ok = bool(fp32) and all(err <= FP32_TOL + FP32_TOL * scale for err, scale in fp32.values())
    ours16, ref16 = _run(ours, batch, device, torch.bfloat16), _run(ref, batch, device, torch.bfloat16)
    ours_err, ref_err = _errors(ours16, ref32, keep, skip=skip), _errors(ref16, ref32, keep, skip=skip)
    bf16 = {key: (ours_err[key][0], ref_err[key][0]) for key in ours_err if key in ref_err}
    bf16_ok = all(mine <= 2 * theirs + BF16_SLACK for mine, theirs in bf16.values())
    worst = lambda errors: max((e[0] for e in errors.values()), default=None)  # noqa: E731
    return {"arch": arch.name, "task": task, "ok": fp32_ok and bf16_ok, "fp32_ok": fp32_ok, "bf16_ok": bf16_ok,
            "fp32_max_err": worst(fp32), "bf16_max_err_ours": worst(bf16),
            "bf16_max_err_ref": max((e[1] for e in bf16.values()), default=None), "compared": sorted(fp32)}


def parity_section(device: str, archs, clock: Clock) -> list[dict]:
    rows = []
    for arch in archs:
        for task in arch.classes:
            if clock.spent:
                rows.append({"arch": arch.name, "task": task, "ok": None, "error": "not run: time budget spent"})
                continue
            try:
                rows.append(parity_case(arch, task, device))
            except Exception as err:  # record and go on: one broken head must not hide the others
                rows.append({"arch": arch.name, "task": task, "ok": False, "error": _error_text(err)})
    return rows


def _attention_names(device: str) -> list[str]:
    names = ["eager", "sdpa"]
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        names.append("flash_attention_2")
    return names


def attention_case(arch, device: str, attn: str) -> dict:
    """One backend of `arch`'s base model (masked-lm / causal-lm head where there is one) against eager."""
    task = next((t for t in ("masked-lm", "causal-lm", "seq2seq-lm", "base") if t in arch.classes))
    torch.manual_seed(0)
    config = _tiny_config(arch)
    cls = arch.model_class(task)
    # _from_config sets the backend on the config it is given: one copy per model
    eager = cls._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    model = cls._from_config(copy.deepcopy(config), attn_implementation=attn).eval()
    assert (eager.config._attn_implementation, model.config._attn_implementation) == ("eager", attn)
    model.load_state_dict(eager.state_dict())
    batch = _batch(config, task)
    keep = _real(batch).to(device)
    expected = _run(eager, batch, device)
    dtype = torch.bfloat16 if attn == "flash_attention_2" else None
    errors = _errors(_run(model, batch, device, dtype), expected, keep)
    worst = max((e[0] for e in errors.values()), default=None)
    tol = FLASH_TOL if dtype is not None else FP32_TOL
    ok = worst is not None and all(err <= tol + tol * scale for err, scale in errors.values())
    return {"arch": arch.name, "task": task, "attn": attn, "dtype": "bf16" if dtype else "fp32", "ok": ok,
            "max_err": worst, "tolerance": tol}


def attention_section(device: str, archs, clock: Clock) -> list[dict]:
    rows = []
    for arch in archs:
        for attn in _attention_names(device)[1:]:
            if clock.spent:
                rows.append({"arch": arch.name, "attn": attn, "ok": None, "error": "not run: time budget spent"})
                continue
            try:
                rows.append(attention_case(arch, device, attn))
            except Exception as err:
                rows.append({"arch": arch.name, "attn": attn, "ok": False, "error": _error_text(err)})
    return rows


def bench_section(device: str, cases: dict, out: Path, clock: Clock, *, tiny: bool, repeats: int,
                  memory: bool) -> dict:
    """`cases`: case name -> the dtypes to time it in."""
    from hf_xfmr import bench

    results, errors = [], []
    for name, dtypes in cases.items():
        for dtype in dtypes:
            if clock.spent:
                errors.append({"case": name, "dtype": dtype, "error": "not run: time budget spent"})
                continue
            try:
                case = bench.make_case(name, tiny=tiny, device=device, **({"dtype": dtype} if dtype != "fp32" else {}))
                case.name = f"{name}-{dtype}" if dtype != "fp32" else name
                results.append(bench.measure_case(case, repeats=repeats, warmup=1, memory=memory))
            except Exception as err:
                errors.append({"case": name, "dtype": dtype, "error": _error_text(err)})
    if results:
        bench.to_json(results, out / "bench.json", device=device, tiny=tiny)
        (out / "bench.md").write_text(bench.to_markdown(results))
    return {"rows": [r.as_dict() for r in results], "errors": errors}


def _error_text(err: BaseException) -> str:
    lines = traceback.format_exception_only(type(err), err)
    return "".join(lines).strip()[-600:]


# ----------------------------------------------------------------------------------------------
# Report and entry point
# ----------------------------------------------------------------------------------------------


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2e}"


def to_markdown(report: dict) -> str:
    from hf_xfmr.bench.harness import table_lines

    m = report["machine"]
    gpu = m.get("gpu") or {}
    lines = [f"# GPU check ({'dry run, CPU' if report['dry_run'] else gpu.get('name', m['device'])})", "",
             f"{m['timestamp']}; torch {m['torch']}, transformers {m['transformers']}, hf_xfmr {m['hf_xfmr']}; "
             f"flash-attn {'installed' if m['flash_attn'] else 'not installed'}; {report['seconds']:.0f} s.", "",
             f"## Parity (fp32 atol = rtol = {FP32_TOL}; bf16: ours' error <= 2 x the reference's + {BF16_SLACK})",
             ""]
    rows = [[r["arch"], r["task"], {True: "ok", False: "FAIL", None: "not run"}[r["ok"]], _fmt(r.get("fp32_max_err")),
             _fmt(r.get("bf16_max_err_ours")), _fmt(r.get("bf16_max_err_ref")), r.get("error", "")[:160]]
            for r in report["parity"]]
    lines += table_lines(["arch", "task", "result", "fp32 max err", "bf16 err ours", "bf16 err ref", "error"],
                         "lllrrrl", rows)
    lines += ["", "## Attention backends (against eager on the same weights)", ""]
    rows = [[r["arch"], r["attn"], r.get("dtype", ""), {True: "ok", False: "FAIL", None: "not run"}[r["ok"]],
             _fmt(r.get("max_err")), r.get("error", "")[:160]] for r in report["attention"]]
    lines += table_lines(["arch", "attn", "dtype", "result", "max err", "error"], "llllrl", rows)
    lines += ["", "## Training steps against transformers (bench.md)", ""]
    bench_md = Path(report["out"]) / "bench.md"
    lines += [bench_md.read_text().strip()] if bench_md.exists() else ["(no case ran)"]
    lines += [f"- {e['case']} {e['dtype']}: {e['error'][:200]}" for e in report["bench"]["errors"]]
    return "\n".join(lines) + "\n"


def _default_out(device: str, dry_run: bool) -> Path:
    if dry_run:
        return Path(tempfile.mkdtemp(prefix="hf_xfmr_gpu_check_"))
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return ROOT / "benchmarks" / "results" / "gpu" / f"{datetime.date.today().isoformat()}_{slug}"


def check(*, dry_run: bool = False, out: Path | None = None, budget: float = 420.0, archs=None,
          cases=None, memory: bool = False) -> dict:
    """Run every section; write check.json, check.md (and bench.json / bench.md) into `out`; return the report."""
    import hf_xfmr
    from hf_xfmr.models import architectures

    device = "cpu" if dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("check.py: no CUDA device here. Run it on a GPU machine, or pass --dry-run (CPU, tiny).")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity at 1e-5 needs full fp32 products
    torch.backends.cudnn.allow_tf32 = False
    clock = Clock(budget)
    out = Path(out) if out is not None else _default_out(device, dry_run)
    out.mkdir(parents=True, exist_ok=True)
    names = None if archs == ["all"] else archs or (DRY_ARCHS if dry_run else None)
    chosen = [a for a in architectures() if names is None or a.name in names]
    report = {"dry_run": dry_run, "out": str(out), "machine": machine_section(device), "budget_s": budget,
              "hf_xfmr": hf_xfmr.__version__}
    report["parity"] = parity_section(device, chosen, clock)
    report["attention"] = attention_section(device, chosen, clock)
    names = cases or (list(BENCH_CASES)[:1] if dry_run else list(BENCH_CASES))
    report["bench"] = bench_section(device, {name: BENCH_CASES.get(name, BOTH) for name in names}, out, clock,
                                    tiny=dry_run, repeats=1 if dry_run else 5, memory=memory and not dry_run)
    report["seconds"] = time.perf_counter() - clock.start
    checks = [r["ok"] for r in report["parity"] + report["attention"]]
    report["passed"] = all(ok is True for ok in checks)
    (out / "check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "check.md").write_text(to_markdown(report))
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, a few architectures: seconds")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default: benchmarks/results/gpu/<date>_<gpu>; a temp folder for "
                             "--dry-run)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds after which no new work starts")
    parser.add_argument("--archs", nargs="*", default=None,
                        help=f"architectures to check, or 'all' (default: all; with --dry-run: {' '.join(DRY_ARCHS)})")
    parser.add_argument("--cases", nargs="*", default=None, help="bench cases (default: the training headliners)")
    parser.add_argument("--memory", action="store_true",
                        help="also measure each bench case's peak memory (two child processes per case: slower)")
    args = parser.parse_args(argv)
    report = check(dry_run=args.dry_run, out=args.out, budget=args.budget, archs=args.archs, cases=args.cases,
                   memory=args.memory)
    failed = [f"{r['arch']}/{r.get('task', r.get('attn'))}" for r in report["parity"] + report["attention"]
              if r["ok"] is False]
    print((Path(report["out"]) / "check.md").read_text())
    print(f"results in {report['out']}; {'all checks passed' if report['passed'] else 'FAILED: ' + ', '.join(failed)}",
          file=sys.stderr)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
