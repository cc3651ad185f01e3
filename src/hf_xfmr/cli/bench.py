"""`hf-xfmr bench`: speed and memory side by side with the transformers reference models."""

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..options import option
from .command import Command, CommandError

COLLATORS = "collators"  # pseudo-case: the data collator benchmark (hf_xfmr.bench.collators)
TRAINER = "trainer-vader"  # pseudo-case: one Trainer epoch on VADER, end to end (hf_xfmr.bench.trainer)
SEQ2SEQ = "seq2seq-finetune"  # pseudo-case: Seq2SeqTrainer steps, T5 and BART (hf_xfmr.bench.seq2seq)


@dataclass
class BenchArguments:
    cases: list[str] | None = option("cases to run (space or comma separated; see --list)", None, metavar="NAME",
                                     exclusive="which")
    suite: Literal["all", "quick"] | None = option(
        "named set of cases: 'all' at full size, 'quick' at tiny sizes (default: all)", None, exclusive="which")
    list: bool = option("list the cases and suites, then exit", False, exclusive="which")
    tiny: bool = option("run the chosen cases at the tiny sizes of --suite quick", False)
    repeats: int | None = option("timed steps per side (default: 7, or 3 with tiny sizes); trainer-vader: epochs "
                                 "per side, seq2seq-finetune: runs per side (default: 1)", None, metavar="N")
    warmup: int = option("untimed steps per side before timing (default: 1)", 1, metavar="N")
    threads: int | None = option("torch threads (default: torch.get_num_threads(); 1 with tiny sizes)", None,
                                 metavar="N")
    no_memory: bool = option("skip the peak-memory measurements", False)
    device: Literal["cpu", "cuda"] | None = option(
        "run the model cases on this device (default: each case's own, the CPU); their MFU is measured against "
        "the device's peak (a matmul probe, or HF_XFMR_PEAK_GFLOPS)", None)
    output: str | None = option("write models.json and models.md (and collators.*) into DIR", None, metavar="DIR")

    def __post_init__(self):
        if self.repeats is not None and self.repeats < 1:
            raise ValueError("--repeats must be >= 1")
        if self.warmup < 0:
            raise ValueError("--warmup must be >= 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError("--threads must be >= 1")


def _list_cases() -> None:
    from hf_xfmr import bench

    public = bench.public_cases()
    width = max(map(len, [*public, COLLATORS]))
    for name in public:
        print(f"{name:<{width}}  {bench.case_summary(name)}")
    print(f"{COLLATORS:<{width}}  data collator throughput, ours vs transformers' (hf_xfmr.bench.collators)")
    print(f"{TRAINER:<{width}}  one Trainer epoch on the VADER sentences, wall-clock and test accuracy "
          f"(hf_xfmr.bench.trainer)")
    print(f"{SEQ2SEQ:<{width}}  Seq2SeqTrainer finetuning steps, T5 and BART, 16 rows of 32-512 source tokens "
          f"(hf_xfmr.bench.seq2seq)")
    for suite, cases in bench.suites().items():
        print(f"suite {suite}: {', '.join(n for n, _ in cases)}, {COLLATORS}")


def _selected_cases(options: BenchArguments) -> tuple[list[tuple[str, dict]], set[str], bool]:
    """(cases with overrides, the pseudo-cases to run (COLLATORS, TRAINER, SEQ2SEQ), whether sizes are tiny)."""
    from hf_xfmr import bench

    pseudo = (COLLATORS, TRAINER, SEQ2SEQ)
    if options.cases:
        names = [name for item in options.cases for name in item.split(",") if name]
        public = bench.public_cases()
        unknown = [n for n in names if n not in public and n not in pseudo]
        if unknown:
            known = ", ".join(public + list(pseudo))
            raise CommandError(f"unknown case(s) {', '.join(unknown)}; known: {known} (see --list)")
        overrides = {"tiny": True} if options.tiny else {}
        overrides.update({"device": options.device} if options.device else {})
        return [(n, overrides) for n in names if n not in pseudo], set(names) & set(pseudo), options.tiny
    suite = options.suite or "all"
    tiny = options.tiny or suite == "quick"
    overrides = {"tiny": True} if tiny else {}
    overrides.update({"device": options.device} if options.device else {})
    cases = [(n, dict(overrides)) for n, _ in bench.suites()["all"]]
    return cases, {COLLATORS}, tiny


def _report(rows: list[dict[str, Any]], table: str, out: Path | None, name: str, **metadata) -> None:
    """Print a result table; with --output also write it as <name>.md and the rows as <name>.json."""
    from hf_xfmr import bench

    print(table)
    if out:
        bench.to_json(rows, out / f"{name}.json", **metadata)
        (out / f"{name}.md").write_text(table)


def _pseudo_case(name: str, options: BenchArguments, threads: int, tiny: bool) -> tuple[list[dict], str]:
    """The rows and table of a pseudo-case (COLLATORS, TRAINER or SEQ2SEQ)."""
    if name == SEQ2SEQ:
        from hf_xfmr.bench import seq2seq

        sizes = seq2seq.TINY_SIZES if tiny else seq2seq.SIZES
        rows = [seq2seq.seq2seq_finetune_step(arch, **sizes, rounds=options.repeats or 1, num_threads=threads)
                for arch in seq2seq.ARCHS]
        return rows, seq2seq.markdown_table(rows)
    if name == TRAINER:
        from hf_xfmr.bench import trainer

        sizes = trainer.TINY_SIZES if tiny else trainer.SIZES
        rows = [trainer.trainer_epoch(**sizes, rounds=options.repeats or 1, num_threads=threads)]
        return rows, trainer.markdown_table(rows)
    from hf_xfmr.bench.collators import benchmark_collators, markdown_table

    sizes = {"batch_size": 2, "seq_len": 64} if tiny else {}
    repeats = options.repeats if options.repeats is not None else (5 if tiny else 40)
    rows = benchmark_collators(**sizes, repeats=repeats, warmup=options.warmup, num_threads=threads)
    return rows, markdown_table(rows)


def run(options: BenchArguments, args: argparse.Namespace) -> int:
    import torch
    from tqdm.auto import tqdm

    from hf_xfmr import bench

    if options.list:
        _list_cases()
        return 0
    out = Path(options.output) if options.output else None
    if out is not None and out.exists() and not out.is_dir():
        raise CommandError(f"--output {out} is a file; pass a folder (created if missing)")
    if options.device == "cuda" and not torch.cuda.is_available():
        raise CommandError("--device cuda: no CUDA device is available here; run on a machine with a GPU or drop "
                           "--device")
    cases, pseudo, tiny = _selected_cases(options)
    repeats = options.repeats or (3 if tiny else 7)
    # Tiny models gain nothing from threads, and a busy 2-core machine makes OpenMP barriers stall.
    threads = options.threads or (1 if tiny else torch.get_num_threads())
    results = []
    for name, overrides in tqdm(cases, desc="bench", unit="case", file=sys.stderr, disable=not cases):
        try:
            case = bench.make_case(name, **overrides)
        except ValueError as err:
            raise CommandError(f"case {name}: {err}") from None
        except TypeError as err:
            if "device" not in overrides:
                raise
            raise CommandError(f"case {name} cannot be moved with --device: {err}") from None
        results.append(bench.measure_case(case, repeats=repeats, warmup=options.warmup, threads=threads,
                                          memory=not options.no_memory, progress=True))
    if results:
        _report(results, bench.to_markdown(results), out, "models", suite=options.suite, tiny=tiny)
    for name, file_name in ((TRAINER, "trainer"), (SEQ2SEQ, "seq2seq"), (COLLATORS, "collators")):
        if name in pseudo:
            _report(*_pseudo_case(name, options, threads, tiny), out, file_name)
    if out:
        print(f"results written to {out}/", file=sys.stderr)
    return 0


COMMAND = Command(
    "bench",
    help="speed and memory side by side with the transformers reference models",
    description=(
        "Time each case's hf_xfmr model against its transformers reference (same weights, same batch):\n"
        "warm-up steps first, then the two sides alternate step by step; the table shows median step\n"
        "times and speed ratio = ref / ours (> 1: ours faster). Peak memory is the growth during one\n"
        "step, measured for each side in its own process (RSS high-water mark on CPU,\n"
        "max_memory_allocated on CUDA); memory ratio = ref / ours (> 1: ours uses less)."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr bench --suite quick              # tiny sizes, a few seconds\n"
        "  hf-xfmr bench --cases bert-mlm-train bert-mlm-infer --repeats 7 --output benchmarks/results\n"
        "  hf-xfmr bench --list"
    ),
    arguments=BenchArguments,
    run=run,
)
