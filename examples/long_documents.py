"""Long documents: BigBird (block-sparse attention) against ModernBERT (local + global attention) at the same length,
and what a model that reads only the first 512 tokens of the same documents gets.

The task ("who is quoted?", built offline and deterministically from the VADER sentences that hf_xfmr.data.labelled
reads from the vaderSentiment sdist): each document is ~2,048 tokens of product and film review snippets (VADER's
amazon and movies sentences) into which `--evidence` sentences quoted from one other source are mixed, all of
them past the first `--cut` (512) tokens: either tweets or New York Times editorial snippets. The label is that
source. The first 512 tokens are drawn the same way for both labels, so they say nothing about it: a model cut to
512 tokens is at chance (50%, the labels are balanced) by construction, and only a model that reads past them can
do better. Each split draws its sentences from its own VADER split (train / validation / test: a sentence in two
of them is kept in the held-out one only), so no sentence of a test document was seen in training.

Both models are small (`--hidden-size` 64, `--layers` 2, heads of 32 dimensions, the same feed-forward size, no
dropout), trained from random weights the same way with `hf_xfmr.training.finetune` (what `hf-xfmr finetune` runs)
on the same tokens: one byte-level BPE tokenizer (ModernBERT's recipe, `hf_xfmr.data.train_tokenizer`) trained on the
VADER train-split sentences serves both. BigBird runs block-sparse attention with blocks of 64 tokens and 3
random blocks (the published settings); ModernBERT its published 128-token local window with a global layer
every third layer (here the first of two). Each is finetuned at `--length` tokens and once more on the same
documents cut to `--cut` tokens.

    python examples/long_documents.py                             # about 8 minutes on 2 CPU cores
    python examples/long_documents.py --length 4096 --seeds 0 1 2 --steps 120

Reported per model and input length: test accuracy (mean and spread over `--seeds`), the wall-clock seconds of the
training steps and the CPU seconds of the whole run (which other jobs on a shared machine do not inflate), and
peak memory: the growth of the process's resident memory over the run, the finetuning stack already imported
(weights, optimizer state, activations, data; the kernel's high-water mark, each run in a fresh process) or, on a
GPU, torch's peak allocation.
Writes long_documents_output/results.json and results.md (the table), the task under data/ (a `datasets`
folder) and each run's `finetune` output under runs/.
"""

import argparse
import json
import random
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

LABELS = ("tweets", "editorials")  # the label: where the quoted sentences come from
QUOTED_SOURCES = {"tweets": "tweets", "editorials": "nyt"}  # label -> VADER source
FILLER_SOURCES = ("movies", "amazon")
SPLITS = ("train", "validation", "test")
MODELS = ("bigbird", "modernbert")
MAX_SENTENCE_TOKENS = 64  # longer sentences are left out, so that documents fill their length closely
MARGIN = 4  # tokens kept free at either end of a budget: the exact count is checked on the whole document


# -- the task -----------------------------------------------------------------------------------------------------

def _clean(text: str) -> str:
    return " ".join(text.split())


def sentence_pools(tokenizer) -> dict:
    """Per split, the sentences documents are made of: `filler` (amazon + movies), one list per label (the
    quoted sources), and `tokens`: each sentence's token count as it appears inside a document.

    The splits are VADER's own (`load_vader_sentiment`, every rating kept); a sentence whose text occurs in two
    splits is kept only in the first of test, validation, train, so the splits share no sentence."""
    from hf_xfmr.data.labelled import load_vader_sentiment

    vader = load_vader_sentiment(num_classes=3, neutral_margin=0.5)  # 3 classes: no sentence is dropped
    pools, taken = {}, set()
    for split in reversed(SPLITS):
        rows = {}
        for text, source in zip(vader[split]["text"], vader[split]["source"]):
            text = _clean(text)
            if text and text not in taken:
                rows.setdefault(text, source)
        taken |= set(rows)
        texts = sorted(rows)
        ids = tokenizer([" " + t for t in texts], add_special_tokens=False)["input_ids"]
        tokens = {t: len(i) for t, i in zip(texts, ids)}
        keep = [t for t in texts if tokens[t] <= MAX_SENTENCE_TOKENS]
        pools[split] = dict(filler=[t for t in keep if rows[t] in FILLER_SOURCES], tokens=tokens)
        for label, source in QUOTED_SOURCES.items():
            pools[split][label] = [t for t in keep if rows[t] == source]
    return pools


def draw_document(pool: dict, label: int, rng: random.Random, length: int, cut: int, evidence: int):
    """One document's sentences and the indices of its quoted ones: filler up to `length` tokens ([CLS] and [SEP]
    included), the quotes put at sentence boundaries drawn uniformly among those past the first `cut` tokens."""
    tokens = pool["tokens"]
    quotes = rng.sample(pool[LABELS[label]], evidence)
    budget = length - 2 - MARGIN - sum(tokens[q] for q in quotes)
    filler, used = [], 0
    while True:
        sentence = rng.choice(pool["filler"])
        if used + tokens[sentence] > budget:
            break
        filler.append(sentence)
        used += tokens[sentence]
    starts, offset = [], 1  # token index at which each boundary (before filler sentence i, and the end) starts
    for sentence in filler + [None]:
        starts.append(offset)
        offset += tokens[sentence] if sentence else 0
    eligible = [i for i, start in enumerate(starts) if start >= cut + MARGIN]
    if not eligible:
        raise ValueError(f"no room past the first {cut} tokens of a {length}-token document for {evidence} quoted "
                         "sentences: raise --length or lower --cut / --evidence.")
    sentences = list(filler)
    for slot, quote in sorted(zip(rng.choices(eligible, k=evidence), quotes), reverse=True):
        sentences.insert(slot, quote)  # from the last slot back, so earlier slots keep their place
    quoted = [i for i, s in enumerate(sentences) if s in quotes]
    return sentences, quoted


def build_split(pool: dict, tokenizer, size: int, *, length: int, cut: int, evidence: int, seed: int,
                split: str) -> list[dict]:
    """`size` documents of one split, half of each label (one more of the first for an odd size), each drawn by its
    own seeded generator: a split does not change with the other splits' sizes."""
    labels = [i % 2 for i in range(size)]
    random.Random(f"{seed}/{split}/labels").shuffle(labels)
    rows = []
    for index, label in enumerate(labels):
        sentences, quoted = draw_document(pool, label, random.Random(f"{seed}/{split}/{index}"), length, cut, evidence)
        text, char_starts = "", []
        for i, sentence in enumerate(sentences):
            text += " " if text else ""
            if i in quoted:
                char_starts.append(len(text))
            text += sentence
        rows.append(dict(text=text, label=label, quotes=[sentences[i] for i in quoted], _chars=char_starts))
    _locate_quotes(rows, tokenizer, length, cut)
    return rows


def _locate_quotes(rows: list[dict], tokenizer, length: int, cut: int) -> None:
    """Adds `num_tokens` and `quote_tokens` (the index of each quoted sentence's first token, [CLS] = 0) from the
    tokenization of the whole document, and checks what the task promises."""
    encoded = tokenizer([r["text"] for r in rows], return_offsets_mapping=True, truncation=False)
    for row, ids, offsets in zip(rows, encoded["input_ids"], encoded["offset_mapping"]):
        chars = row.pop("_chars")
        firsts = [next(i for i, (a, b) in enumerate(offsets) if b > c and b > a) for c in chars]
        row["num_tokens"], row["quote_tokens"] = len(ids), firsts
        if len(ids) > length or min(firsts) < cut:
            raise AssertionError(f"a document of {len(ids)} tokens has a quote at token {min(firsts)}: the task "
                                 f"promises at most {length} tokens and no quote in the first {cut}")


def long_document_task(tokenizer, *, sizes: dict, length: int = 2048, cut: int = 512, evidence: int = 40,
                       seed: int = 0):
    """The task as a `datasets.DatasetDict` (train / validation / test, `sizes[split]` documents each): columns
    text, label (ClassLabel: tweets / editorials), quotes (the quoted sentences), quote_tokens (their first
    token's index), num_tokens (of the whole document, [CLS] and [SEP] included)."""
    import datasets

    pools = sentence_pools(tokenizer)
    features = datasets.Features({
        "text": datasets.Value("string"), "label": datasets.ClassLabel(names=list(LABELS)),
        "quotes": datasets.Sequence(datasets.Value("string")), "num_tokens": datasets.Value("int32"),
        "quote_tokens": datasets.Sequence(datasets.Value("int32")),
    })
    return datasets.DatasetDict({
        split: datasets.Dataset.from_list(
            build_split(pools[split], tokenizer, sizes[split], length=length, cut=cut, evidence=evidence, seed=seed,
                        split=split), features=features)
        for split in SPLITS
    })


def shared_tokenizer(vocab_size: int, length: int):
    """One byte-level BPE tokenizer (ModernBERT's recipe) for both models, trained on the VADER train-split
    sentences only (byte-level BPE training is deterministic)."""
    from hf_xfmr.data import train_tokenizer
    from hf_xfmr.data.labelled import vader_unlabelled_text

    return train_tokenizer("modernbert", vader_unlabelled_text(), vocab_size=vocab_size, model_max_length=length)


# -- the runs ------------------------------------------------------------------------------------------------------

def model_overrides(arch: str, hidden: int, layers: int, length: int) -> str:
    """`config_overrides` of one model: the same width, depth, heads and feed-forward size for both, no dropout
    (ModernBERT's default: the two differ in attention and positions only), each family's published long-document
    attention settings."""
    size = (f"hidden_size={hidden},num_hidden_layers={layers},num_attention_heads={hidden // 32},"
            f"intermediate_size={4 * hidden},max_position_embeddings={max(length, 512)}")
    if arch == "bigbird":
        return size + (",hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0,attention_type=block_sparse,"
                       "block_size=64,num_random_blocks=3")
    return size + ",local_attention=128,global_attn_every_n_layers=3"


def finetune_job(options: dict, threads: int | None = None) -> dict:
    """One finetuning run, `finetune(FinetuneArguments(**options))`, with its figures."""
    import datasets  # noqa: F401  (with Trainer below: the finetuning stack, loaded before the baseline is read)
    import torch
    import transformers.trainer  # noqa: F401

    from hf_xfmr.bench.harness import maxrss_kb, proc_status_kb, reset_peak_rss
    from hf_xfmr.training import FinetuneArguments, finetune

    if threads:
        torch.set_num_threads(threads)
    cuda = torch.cuda.is_available() and not options.get("use_cpu", True)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before_kb = proc_status_kb("VmRSS")
    method = "VmHWM" if before_kb is not None and reset_peak_rss() else "ru_maxrss"
    before_kb = before_kb if method == "VmHWM" else maxrss_kb()
    start, cpu_start = time.perf_counter(), time.process_time()
    result = finetune(FinetuneArguments(**options))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if cuda:
        peak_mb, method = torch.cuda.max_memory_allocated() / 2**20, "cuda.max_memory_allocated"
    else:
        peak_kb = proc_status_kb("VmHWM") if method == "VmHWM" else maxrss_kb()
        peak_mb = max(peak_kb - before_kb, 0) / 1024
    train = result.metrics["train"]
    return dict(accuracy=result.metrics["test"]["test_accuracy"],
                majority=result.metrics["baseline"]["test_majority_accuracy"],
                parameters=result.model.num_parameters(), train_seconds=train["train_runtime"], seconds=seconds,
                cpu_seconds=cpu_seconds, peak_memory_mb=peak_mb,
                memory_method=method, threads=torch.get_num_threads())


def run_job(options: dict, *, in_process: bool, threads: int | None) -> dict:
    """A run in a fresh process (its own allocator: the peak memory is the run's alone), or in this one."""
    if in_process:
        return finetune_job(options, threads)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(finetune_job, options, threads).result()


def finetune_options(args, arch: str, tokens: int, seed: int, out: Path) -> dict:
    """The `FinetuneArguments` of one run: the task saved under out/data, the shared tokenizer of out/tokenizer; the
    same model at every input length (`tokens`: documents are cut there)."""
    overrides = model_overrides(arch, args.hidden_size, args.layers, args.length)
    return dict(dataset=str(out / "data"), arch=arch, preset="tiny", config_overrides=overrides,
                tokenizer_name_or_path=str(out / "tokenizer"), max_seq_length=tokens, max_steps=args.steps,
                per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.batch_size,
                learning_rate=args.learning_rate, warmup_steps=0.1, eval_steps=args.steps,
                logging_steps=max(args.steps // 10, 1), output_dir=str(out / "runs" / f"{arch}-{tokens}-seed{seed}"),
                overwrite_output_dir=True, seed=seed,
                use_cpu=args.device == "cpu", disable_tqdm=args.quiet, report_to="none")


# -- the command -----------------------------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_argument_group("the task")
    group.add_argument("--length", type=int, default=2048, help="document and model length in tokens (default: "
                       "%(default)s)")
    group.add_argument("--cut", type=int, default=512,
                       help="no quoted sentence in the first CUT tokens; the short runs read only those (default: "
                            "%(default)s)")
    group.add_argument("--evidence", type=int, default=40, help="quoted sentences per document (default: %(default)s)")
    group.add_argument("--train-docs", type=int, default=640)
    group.add_argument("--validation-docs", type=int, default=32)
    group.add_argument("--test-docs", type=int, default=128)
    group.add_argument("--vocab-size", type=int, default=4000)
    group.add_argument("--task-seed", type=int, default=0, help="seed of the documents (default: %(default)s)")
    group = parser.add_argument_group("the models and their finetuning")
    group.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    group.add_argument("--hidden-size", type=int, default=64, help="width of both models (heads of 32 dimensions)")
    group.add_argument("--layers", type=int, default=2)
    group.add_argument("--steps", type=int, default=80, help="optimizer steps per run (default: %(default)s)")
    group.add_argument("--batch-size", type=int, default=8)
    group.add_argument("--learning-rate", type=float, default=1e-3)
    group.add_argument("--seeds", type=int, nargs="+", default=[0], help="finetuning seeds (default: 0)")
    group.add_argument("--no-cut-runs", action="store_true", help="skip the runs on documents cut to --cut tokens")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's own)")
    parser.add_argument("--in-process", action="store_true",
                        help="run the finetunings in this process (faster to start; the peak memory of later runs "
                             "is then skewed by what earlier ones left in the allocator)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--output", type=Path, default=Path("long_documents_output"))
    args = parser.parse_args(argv)
    problems = [
        (args.cut < 1 or args.length < args.cut + 128, "--length must exceed --cut (>= 1) by at least 128 tokens"),
        (args.evidence < 1, "--evidence must be at least 1"),
        (min(args.train_docs, args.validation_docs, args.test_docs) < 2, "every split needs at least 2 documents"),
        (args.hidden_size < 32 or args.hidden_size % 32, "--hidden-size must be a multiple of 32"),
        (args.layers < 1 or args.steps < 1 or args.batch_size < 1, "--layers, --steps and --batch-size must be >= 1"),
    ]
    for bad, message in problems:
        if bad:
            parser.error(message)
    return args


def _spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def task_summary(dataset) -> dict:
    summary = {}
    for split, rows in dataset.items():
        firsts = [t for ts in rows["quote_tokens"] for t in ts]
        labels, tokens = list(rows["label"]), list(rows["num_tokens"])
        summary[split] = dict(documents=len(rows), labels=[labels.count(i) for i in range(len(LABELS))],
                              mean_tokens=statistics.mean(tokens), min_tokens=min(tokens),
                              first_quote_token=min(firsts), mean_quote_token=statistics.mean(firsts))
    return summary


def main(argv=None) -> dict:
    import datasets

    args = parse_args(argv)
    datasets.disable_progress_bars()
    out = args.output.resolve()
    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    print(f"[1/3] tokenizer and task: documents of {args.length} tokens, {args.evidence} quoted sentences each, "
          f"none in the first {args.cut}", flush=True)
    tokenizer = shared_tokenizer(args.vocab_size, args.length)
    tokenizer.save_pretrained(out / "tokenizer")
    sizes = dict(train=args.train_docs, validation=args.validation_docs, test=args.test_docs)
    dataset = long_document_task(tokenizer, sizes=sizes, length=args.length, cut=args.cut, evidence=args.evidence,
                                 seed=args.task_seed)
    dataset.save_to_disk(out / "data")
    summary = task_summary(dataset)
    for split, s in summary.items():
        print(f"      {split}: {s['documents']} documents ({s['labels'][0]} {LABELS[0]}, {s['labels'][1]} "
              f"{LABELS[1]}), "
              f"{s['mean_tokens']:.0f} tokens on average, first quote at token {s['first_quote_token']}")

    lengths = [args.length] + ([] if args.no_cut_runs else [args.cut])
    plan = [(arch, tokens, seed) for tokens in lengths for arch in args.models for seed in args.seeds]
    print(f"[2/3] {len(plan)} finetuning runs: {args.steps} steps x {args.batch_size} documents each", flush=True)
    runs = []
    for number, (arch, tokens, seed) in enumerate(plan, 1):
        options = finetune_options(args, arch, tokens, seed, out)
        print(f"  ({number}/{len(plan)}) {arch} at {tokens} tokens, seed {seed}", flush=True)
        result = run_job(options, in_process=args.in_process, threads=args.threads)
        runs.append(dict(arch=arch, tokens=tokens, seed=seed, **result))
        print(f"      test accuracy {result['accuracy']:.1%}, {result['train_seconds']:.0f} s training "
              f"({result['cpu_seconds']:.0f} CPU s in all), peak memory +{result['peak_memory_mb']:.0f} MB", flush=True)

    print("[3/3] results", flush=True)
    report = dict(command="python examples/long_documents.py" + ("" if argv is None else " " + " ".join(argv)),
                  settings={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                  task=summary, runs=runs, rows=summary_rows(runs), wall_seconds=time.perf_counter() - start)
    table = results_table(report)
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.md").write_text(table + "\n")
    print("\n" + table)
    return report


def summary_rows(runs: list[dict]) -> list[dict]:
    """One row per (model, length): the mean over seeds."""
    rows = []
    for key in dict.fromkeys((r["arch"], r["tokens"]) for r in runs):
        group = [r for r in runs if (r["arch"], r["tokens"]) == key]
        accuracies = [r["accuracy"] for r in group]
        rows.append(dict(arch=key[0], tokens=key[1], seeds=[r["seed"] for r in group], accuracies=accuracies,
                         accuracy=statistics.mean(accuracies), spread=_spread(accuracies),
                         parameters=group[0]["parameters"], majority=group[0]["majority"],
                         train_seconds=statistics.mean(r["train_seconds"] for r in group),
                         cpu_seconds=statistics.mean(r["cpu_seconds"] for r in group),
                         peak_memory_mb=max(r["peak_memory_mb"] for r in group),
                         memory_method=group[0]["memory_method"]))
    return rows


def results_table(report: dict) -> str:
    s, rows = report["settings"], report["rows"]
    n = len(s["seeds"])
    names = {"bigbird": "BigBird (block-sparse, blocks of 64)", "modernbert": "ModernBERT (128-token window + global)"}
    lines = [f"| model | input | parameters | test accuracy ({n} seed{'s' if n > 1 else ''}) | finetuning time "
             "(CPU time, whole run) | peak memory |", "|---|---|---|---|---|---|"]
    for r in rows:
        accuracy = f"{r['accuracy']:.1%}" + (f" ± {r['spread']:.1%}" if n > 1 else "")
        lines.append(f"| {names[r['arch']]} | {'first ' if r['tokens'] < s['length'] else ''}{r['tokens']} tokens "
                     f"| {r['parameters'] / 1e6:.2f}M | {accuracy} "
                     f"| {r['train_seconds']:.0f} s ({r['cpu_seconds']:.0f} s) "
                     f"| +{r['peak_memory_mb']:.0f} MB |")
    test = report["task"]["test"]
    lines.append(
        f"\nTask: {s['train_docs']} / {s['validation_docs']} / {s['test_docs']} documents (train / validation / "
        f"test) of {test['mean_tokens']:.0f} tokens on average, {s['evidence']} quoted sentences each, the first at "
        f"token {test['first_quote_token']} or later (test split); majority class {rows[0]['majority']:.1%}. "
        f"Models {s['hidden_size']} wide, {s['layers']} layers, from random weights; {s['steps']} steps x "
        f"{s['batch_size']} documents at learning rate {s['learning_rate']:g}. Peak memory: growth of the "
        f"run's process ({rows[0]['memory_method']}). {report['wall_seconds'] / 60:.1f} minutes in all.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
