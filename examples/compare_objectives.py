"""Which pretraining objective learns best per unit of compute, and what does pretraining add? XLNet's question,
at small scale on a CPU.

Pretrains models of about the same size on the same text with the same token budget (steps x batch x
sequence length), one per objective:

    MLM  ModernBERT (masked language modelling, 30% masking), or BERT where ModernBERT is not installed
    PLM  XLNet (permutation language modelling)
    CLM  GPT (next-token prediction)
    RTD  ELECTRA (replaced-token detection: a generator a quarter of the width fills 15% masked positions, the
         discriminator, the model that is finetuned, learns from every token which ones were replaced)

then finetunes each one the same way (all weights, same steps and learning rate) on `--labelled` VADER sentiment
sentences (positive / negative; the checkpoint with the best validation accuracy is tested), once per finetuning
seed, and finetunes the same architecture (same config, same tokenizer) from random weights the same way with the
same seeds: that floor says what pretraining added.

The pretraining text is in-domain by default: the sentences of VADER's train split with their ratings dropped
(`hf_xfmr.data.labelled.vader_unlabelled_text`: the validation and test sentences are never pretrained on),
grouped into pseudo-documents; the tokenizer is trained on that text. `--corpus` and `--tokenizer-text` select
the embedded corpus (Python's documentation) instead or as well, and the other options are the levers of the
ablation table in docs/compare_objectives.md.

Reported per objective: pretraining time (CPU seconds of the process that ran it, which a machine shared with
other jobs does not inflate, and wall-clock seconds), held-out loss and accuracy on the predicted tokens (each
objective predicts different tokens, so these compare runs of one objective, not objectives), and the finetuned
test accuracy, mean and spread over the finetuning seeds, pretrained and from random weights (these compare
objectives). A finetuning run that stays at chance is counted ("stuck").

    python examples/compare_objectives.py                  # about 25 minutes on 2 CPU cores
    python examples/compare_objectives.py --runs bert:mlm,xlnet:plm,gpt:clm --seeds 5

Pretraining and finetuning runs go to `--jobs` worker processes of one thread each (tiny models keep one core
busier than two threads do). Writes compare_output/results.json and compare_output/results.md (the table).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/demo.py, also in spawned workers
from demo import parse_runs  # noqa: E402

SENTENCES_PER_DOCUMENT = 20  # VADER sentences grouped into pseudo-documents of this many
CORPORA = ("vader", "vader+docs", "docs")
# Config field names of (hidden size, layers, heads, feed-forward size) where they are not BERT's.
SIZE_FIELDS = {
    "xlnet": ("d_model", "n_layer", "n_head", "d_inner"),
    "gpt": ("n_embd", "n_layer", "n_head", "n_inner"),
    "distilbert": ("dim", "n_layers", "n_heads", "hidden_dim"),
}
BERT_SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# Config fields that make a sequence-classification head read the mean of the real tokens ("--pooling mean");
# an architecture not listed keeps its own pooling (GPT: the last real token; BERT: its pooler on [CLS]).
MEAN_POOLING = {"modernbert": {"classifier_pooling": "mean"}, "xlnet": {"summary_type": "mean"}}


def default_runs() -> str:
    """One run per objective: ModernBERT for MLM where this installation has it, else BERT."""
    from hf_xfmr.models import architectures

    mlm = "modernbert" if any(arch.name == "modernbert" for arch in architectures()) else "bert"
    return f"{mlm}:mlm,xlnet:plm,gpt:clm,electra:rtd"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default=default_runs(), help="architecture:objective pairs (default: %(default)s)")
    group = parser.add_argument_group("pretraining")
    group.add_argument("--corpus", choices=CORPORA, default="vader",
                       help="pretraining text: vader = the unlabelled VADER train-split sentences (in-domain), docs = "
                            "the embedded corpus (Python's documentation), or both (default: %(default)s)")
    group.add_argument("--tokenizer-text", choices=("pretraining", "docs"), default="pretraining",
                       help="what the tokenizers are trained on: the pretraining text or the embedded corpus "
                            "(default: %(default)s)")
    group.add_argument("--vocab-size", type=int, default=4000)
    group.add_argument("--pretrain-steps", type=int, default=2000)
    group.add_argument("--batch-size", type=int, default=32, help="pretraining batch size")
    group.add_argument("--seq-len", type=int, default=64, help="pretraining sequence length")
    group.add_argument("--pretrain-lr", type=float, default=2e-3)
    group.add_argument("--hidden-size", type=int, default=128, help="model width (heads of 32 dimensions)")
    group.add_argument("--layers", type=int, default=2)
    group.add_argument("--discriminator-mlm-weight", type=float, default=0.0,
                       help="RTD: weight of an auxiliary MLM loss on the discriminator (ELECTRA's "
                            "`discriminator_mlm_weight`; 0 = the paper's objective; default: %(default)s)")
    group = parser.add_argument_group("finetuning (pretrained and from random weights alike)")
    group.add_argument("--seeds", type=int, default=3, help="finetuning seeds per model (default: %(default)s)")
    group.add_argument("--labelled", type=int, default=1000,
                       help="labelled training sentences, drawn at random (0: all 12,762; default: %(default)s)")
    group.add_argument("--finetune-epochs", type=float, default=10.0)
    group.add_argument("--finetune-lr", type=float, default=5e-4)
    group.add_argument("--finetune-warmup", type=float, default=0.1, help="warm-up, a fraction of the steps")
    group.add_argument("--finetune-batch-size", type=int, default=32)
    group.add_argument("--finetune-seq-len", type=int, default=64)
    group.add_argument("--pooling", choices=("mean", "default"), default="mean",
                       help="mean: the classifier reads the mean of the real tokens where the architecture offers "
                            f"it ({', '.join(MEAN_POOLING)}); default: each architecture's own")
    group.add_argument("--no-scratch", action="store_true", help="skip the finetuned-from-random-weights floor")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes of one thread each (default: the CPU cores; 1: in this process)")
    parser.add_argument("--output", type=Path, default=Path("compare_output"))
    parser.add_argument("--seed", type=int, default=0, help="pretraining seed (finetuning uses 0 .. --seeds - 1)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if not args.discriminator_mlm_weight >= 0:
        parser.error("--discriminator-mlm-weight must be >= 0 (0: ELECTRA's objective as in the paper)")
    if args.hidden_size % 32:
        parser.error("--hidden-size must be a multiple of 32 (heads of 32 dimensions)")
    if args.jobs is None:
        args.jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return args


def model_size(arch: str, hidden: int, layers: int) -> dict:
    names = SIZE_FIELDS.get(arch, BERT_SIZE_FIELDS)
    size = dict(zip(names, (hidden, layers, hidden // 32, 4 * hidden)))
    if arch == "electra":  # embeddings as wide as the layers, as the other models have them
        size["embedding_size"] = hidden
    return size


def config_overrides(arch: str, objective: str, args) -> dict:
    """The config fields a run sets: its size, mean pooling (`--pooling mean`, where the architecture has it) and,
    for RTD, the discriminator's auxiliary MLM weight where one is given."""
    overrides = model_size(arch, args.hidden_size, args.layers)
    if args.pooling == "mean":
        overrides.update(MEAN_POOLING.get(arch, {}))
    if objective == "rtd" and args.discriminator_mlm_weight:
        overrides["discriminator_mlm_weight"] = args.discriminator_mlm_weight
    return overrides


def pretraining_documents(corpus: str) -> list[str]:
    """The pretraining text as documents: the VADER train-split sentences (never a validation or test one)
    grouped by SENTENCES_PER_DOCUMENT, and/or the embedded corpus."""
    from hf_xfmr.data import default_corpus
    from hf_xfmr.data.corpus import document_text
    from hf_xfmr.data.labelled import vader_unlabelled_text

    documents = []
    if "docs" in corpus:
        documents += [document_text(doc) for doc in default_corpus()]
    if "vader" in corpus:
        sentences = vader_unlabelled_text()
        documents += ["\n".join(sentences[i:i + SENTENCES_PER_DOCUMENT])
                      for i in range(0, len(sentences), SENTENCES_PER_DOCUMENT)]
    return documents


def write_documents(path: Path, documents: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")


# -- the jobs (run in worker processes, or in this one with --jobs 1) --------------------------------------------

def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def pretrain_job(options: dict, scratch_dirs: list[str], seeds: list[int]) -> dict:
    """Pretrain as `options` say; then save the same architecture with random weights once per finetuning seed."""
    import torch

    from hf_xfmr.training import PretrainArguments, pretrain

    start, cpu_start = time.perf_counter(), time.process_time()
    result = pretrain(PretrainArguments(**options))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    finetuned = getattr(result.model, "discriminator", result.model)  # RTD: the discriminator is finetuned
    for folder, seed in zip(scratch_dirs, seeds):
        torch.manual_seed(seed)
        type(finetuned)(finetuned.config).save_pretrained(folder)
        for file in Path(result.model_dir).iterdir():  # the tokenizer files
            if "token" in file.name or file.name == "special_tokens_map.json":
                shutil.copy(file, folder)
    metrics = result.eval_metrics
    return dict(model_dir=str(result.model_dir), parameters=finetuned.num_parameters(), pretrain_seconds=seconds,
                pretrain_cpu_seconds=cpu_seconds, eval_loss=metrics["eval_loss"], eval_accuracy=metrics["eval_accuracy"],
                eval_majority_accuracy=metrics.get("eval_majority_accuracy"))


def labelled_data(labelled: int | None):
    """VADER sentiment (2 classes) with `labelled` training sentences drawn at random (seed 0: the same ones for
    every model and seed), or all of them; validation and test stay whole."""
    from hf_xfmr.data.labelled import load_vader_sentiment

    data = load_vader_sentiment(num_classes=2)
    if labelled and labelled < len(data["train"]):
        data["train"] = data["train"].shuffle(seed=0).select(range(labelled))
    return data


def finetune_job(options: dict, labelled: int | None = None) -> dict:
    from hf_xfmr.training import FinetuneArguments, finetune

    start, cpu_start = time.perf_counter(), time.process_time()
    result = finetune(FinetuneArguments(**options), dataset=labelled_data(labelled))
    stuck = [c.message for c in result.trainer.callback_handler.callbacks if type(c).__name__ == "StuckFinetuneCallback"]
    shutil.rmtree(result.output_dir / "model", ignore_errors=True)  # only the figures are kept
    return dict(accuracy=result.metrics["test"]["test_accuracy"],
                majority=result.metrics["baseline"]["test_majority_accuracy"], stuck=bool(stuck and stuck[0]),
                seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu_start)


def _run(log: str, job, *args):
    """`job(*args)` in a worker, its output (progress, Trainer logs) going to the file `log`."""
    import contextlib

    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        return job(*args)


class Runner:
    """Runs jobs in `jobs` worker processes of one thread each (spawned: a clean torch per worker), or in this
    process when `jobs` is 1; `then(future, callback)` chains work on a result."""

    def __init__(self, jobs: int):
        self.pool = None if jobs <= 1 else ProcessPoolExecutor(jobs, mp_context=get_context("spawn"),
                                                                 initializer=_one_thread)
        self.pending = {}

    def submit(self, callback, log: Path, job, *args):
        if self.pool is None:
            callback(job(*args))
        else:
            self.pending[self.pool.submit(_run, str(log), job, *args)] = callback

    def drain(self):
        while self.pending:
            done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
            for future in done:
                self.pending.pop(future)(future.result())  # a failed job raises here
        if self.pool is not None:
            self.pool.shutdown()


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv=None) -> dict:
    from hf_xfmr.data import default_corpus, train_tokenizer
    from hf_xfmr.data.corpus import document_text

    args = parse_args(argv)
    runs = parse_runs(args.runs)
    out = args.output.resolve()
    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    documents = pretraining_documents(args.corpus)
    corpus_file = out / "data" / "pretraining.jsonl"
    write_documents(corpus_file, documents)
    tokens = args.pretrain_steps * args.batch_size * args.seq_len
    seeds = list(range(args.seeds))
    tokenizer_text = documents if args.tokenizer_text == "pretraining" else [document_text(d) for d in default_corpus()]
    print(f"pretraining text: {len(documents)} documents ({args.corpus}) -> {corpus_file}; {args.pretrain_steps} steps "
          f"x {args.batch_size} x {args.seq_len} = {tokens / 1e6:.2f}M tokens per objective; finetuning: "
          f"{args.finetune_epochs:g} epochs x {len(seeds)} seeds, pretrained and from random weights; "
          f"{args.jobs} job(s)", flush=True)

    runner = Runner(args.jobs)
    rows = {}

    def finetune_options(model_dir: Path, folder: Path, seed: int) -> dict:
        return dict(model_name_or_path=str(model_dir), dataset="vader", num_train_epochs=args.finetune_epochs,
                    learning_rate=args.finetune_lr, warmup_steps=args.finetune_warmup,
                    per_device_train_batch_size=args.finetune_batch_size, max_seq_length=args.finetune_seq_len,
                    output_dir=str(folder), overwrite_output_dir=True, seed=seed, disable_tqdm=True, use_cpu=True)

    def finetuned(row, key, seed):
        def record(result):
            row[key][seed] = result
            print(f"  {row['objective'].upper()} ({row['arch']}) {'pretrained' if key == 'pretrained' else 'from random weights'}, "
                  f"seed {seed}: test accuracy {result['accuracy']:.1%}" + (" (stuck at chance)" if result["stuck"] else ""),
                  flush=True)
        return record

    def pretrained(row, scratch_dirs):
        def record(result):
            row.update(result)
            print(f"  {row['objective'].upper()} ({row['arch']}) pretrained in {result['pretrain_cpu_seconds']:.0f} CPU s "
                  f"({result['pretrain_seconds']:.0f} s): held-out loss {result['eval_loss']:.2f}, accuracy "
                  f"{result['eval_accuracy']:.1%}", flush=True)
            for seed, scratch in zip(seeds, scratch_dirs):
                runner.submit(finetuned(row, "pretrained", seed), out / "logs" / f"{row['arch']}-finetune-{seed}.log",
                              finetune_job,
                              finetune_options(Path(result["model_dir"]), out / "finetune" / row["arch"] / f"seed{seed}", seed),
                              args.labelled)
                if not args.no_scratch:
                    runner.submit(finetuned(row, "scratch", seed), out / "logs" / f"{row['arch']}-scratch-{seed}.log",
                                  finetune_job,
                                  finetune_options(Path(scratch), out / "scratch" / row["arch"] / f"seed{seed}", seed),
                                  args.labelled)
        return record

    for arch, objective in runs:
        tokenizer_dir = out / "tokenizers" / arch
        train_tokenizer(arch, tokenizer_text, vocab_size=args.vocab_size).save_pretrained(tokenizer_dir)
        overrides = config_overrides(arch, objective, args)
        options = dict(
            arch=arch, objective=objective, preset="tiny", config_overrides=overrides, dataset=str(corpus_file),
            tokenizer=str(tokenizer_dir), max_seq_length=args.seq_len, per_device_train_batch_size=args.batch_size,
            max_steps=args.pretrain_steps, learning_rate=args.pretrain_lr, lr_scheduler="cosine", logging_steps=20,
            save_steps=0, report_to_tensorboard=False, progress_bar=args.jobs <= 1,
            output_dir=str(out / "pretrain" / arch), overwrite_output_dir=True, seed=args.seed,
        )
        row = rows[arch] = dict(arch=arch, objective=objective, config_overrides=overrides, pretrained={}, scratch={})
        scratch_dirs = [str(out / "random_init" / arch / f"seed{seed}") for seed in seeds]
        runner.submit(pretrained(row, scratch_dirs), out / "logs" / f"{arch}-pretrain.log", pretrain_job, options,
                      scratch_dirs, seeds)
    runner.drain()

    results = []
    for row in rows.values():
        summary = {k: v for k, v in row.items() if k not in ("pretrained", "scratch", "model_dir")}
        for key, name in (("pretrained", "finetuned"), ("scratch", "scratch")):
            done = [row[key][seed] for seed in sorted(row[key])]
            accuracies = [r["accuracy"] for r in done]
            summary[f"{name}_accuracies"] = accuracies
            summary[f"{name}_accuracy"] = statistics.mean(accuracies) if accuracies else None
            summary[f"{name}_spread"] = _spread(accuracies) if accuracies else None
            summary[f"{name}_stuck"] = sum(r["stuck"] for r in done)
            summary[f"{name}_cpu_seconds"] = sum(r["cpu_seconds"] for r in done)
            summary[f"{name}_runs"] = [dict(seed=seed, **row[key][seed]) for seed in sorted(row[key])]
            if done:
                summary["majority_accuracy"] = done[0]["majority"]
        summary["gain"] = (None if summary["scratch_accuracy"] is None
                           else summary["finetuned_accuracy"] - summary["scratch_accuracy"])
        results.append(summary)

    seconds = time.perf_counter() - start
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report = dict(command="python examples/compare_objectives.py" + ("" if argv is None else " " + " ".join(argv)),
                  settings=settings, tokens=tokens, wall_seconds=seconds,
                  cpu_seconds=sum(r["pretrain_cpu_seconds"] + r["finetuned_cpu_seconds"] + r["scratch_cpu_seconds"]
                                  for r in results),
                  runs=results)
    table = results_table(report)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    (out / "results.md").write_text(table + "\n")
    print("\n" + table)
    return report


def _accuracy(mean, spread, stuck, n) -> str:
    if mean is None:
        return "—"
    text = f"{mean:.1%} ± {spread:.1%}" if n > 1 else f"{mean:.1%}"
    return text + (f" ({stuck} stuck)" if stuck else "")


def results_table(report: dict) -> str:
    s = report["settings"]
    n = s["seeds"]
    lines = ["| objective (model) | parameters | pretraining CPU time (wall) | held-out loss | held-out accuracy "
             f"| finetuned test accuracy ({n} seed{'s' if n > 1 else ''}) | from random weights | pretraining adds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        gain = "—" if r["gain"] is None else f"{100 * r['gain']:+.1f} points"
        lines.append(f"| {r['objective'].upper()} ({r['arch']}) | {r['parameters'] / 1e6:.2f}M "
                     f"| {r['pretrain_cpu_seconds']:.0f} s ({r['pretrain_seconds']:.0f} s) | {r['eval_loss']:.2f} | {r['eval_accuracy']:.1%} "
                     f"| {_accuracy(r['finetuned_accuracy'], r['finetuned_spread'], r['finetuned_stuck'], n)} "
                     f"| {_accuracy(r['scratch_accuracy'], r['scratch_spread'], r['scratch_stuck'], n)} | {gain} |")
    majority = report["runs"][0].get("majority_accuracy")
    lines.append(
        f"\nSame text and token budget per objective ({report['tokens'] / 1e6:.2f}M tokens: {s['pretrain_steps']} steps x "
        f"{s['batch_size']} x {s['seq_len']}; text: {s['corpus']}); finetuning {s['finetune_epochs']:g} epochs at "
        f"learning rate {s['finetune_lr']:g}, mean ± standard deviation over seeds 0-{n - 1}"
        + (f"; majority class on the test split: {majority:.1%}" if majority is not None else "")
        + f". {report['wall_seconds'] / 60:.1f} minutes in all with {s['jobs']} job(s).")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
