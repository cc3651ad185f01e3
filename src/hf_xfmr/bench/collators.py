"""Collator throughput against the transformers reference collators (examples per second).

Both sides get the same tokenizer and the same examples (full-length rows cut from the embedded
corpus) and run under the same torch intra-op thread setting (reported as `threads`; our
collators pin themselves to 1 thread inside the call by default). Runs are interleaved (ours,
reference, ours, ...) batch by batch after a warm-up, so background load hits both alike; the
median time per batch over `repeats` batches per side (default 40) is reported. Interleaving also
means each of our calls starts with caches that the reference has just filled with its own data.
Used by `benchmarks/bench_collators.py` and `hf-xfmr bench` (the pseudo-case "collators"):
`benchmark_collators(...) -> list[dict]`, `markdown_table(rows)`.
"""

import statistics
import time

import torch

from ..data.corpus import default_corpus, document_text
from .harness import table_lines, torch_threads


def corpus_rows(tokenizer, seq_len: int, n: int, xlnet: bool) -> list[dict]:
    """`n` examples of exactly `seq_len` tokens, text taken in corpus order.

    Layout `[A, <sep>, B, <sep>, <cls>]` for XLNet, `[CLS] text [SEP]` for BERT.
    """
    docs = [document_text(d) for d in default_corpus()]
    ids = [i for row in tokenizer(docs, add_special_tokens=False)["input_ids"] for i in row]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    body = seq_len - (3 if xlnet else 2)
    rows = []
    for start in range(0, len(ids) - body, body):
        chunk = ids[start:start + body]
        if xlnet:
            half = body // 2
            row = chunk[:half] + [sep] + chunk[half:] + [sep, cls]
            special = [0] * half + [1] + [0] * (body - half) + [1, 1]
        else:
            row = [cls] + chunk + [sep]
            special = [1] + [0] * body + [1]
        rows.append({"input_ids": row, "special_tokens_mask": special})
        if len(rows) == n:
            break
    return (rows * (n // max(1, len(rows)) + 1))[:n]


def interleaved_medians(fns: dict, batches: list, repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds per call of each of `fns` (name -> callable on a batch), the calls interleaved
    (one of each per round, cycling through `batches`) after `warmup` untimed rounds."""
    times = {k: [] for k in fns}
    for i in range(warmup + repeats):
        for name, fn in fns.items():
            batch = batches[i % len(batches)]
            start = time.perf_counter()
            fn(batch)
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def benchmark_collators(batch_size: int = 8, seq_len: int = 512, repeats: int = 40, warmup: int = 5,
                        num_threads: int | None = None) -> list[dict]:
    """Time our collators against transformers' at (batch_size, seq_len).

    Returns rows with keys name, ours, reference, ours_per_s, ref_per_s, ratio (ours / reference).
    `num_threads` sets torch's intra-op threads for the run (DataLoader workers use 1).
    """
    from transformers import DataCollatorForLanguageModeling, DataCollatorForPermutationLanguageModeling

    from ..data.mlm import DataCollatorForMLM
    from ..data.plm import DataCollatorForPLM
    from ..data.tokenizers import train_tokenizer

    with torch_threads(num_threads):
        torch.manual_seed(0)
        docs = default_corpus(200)
        xlnet_tok = train_tokenizer("xlnet", docs, 2000)
        bert_tok = train_tokenizer("bert", docs, 4000)
        n_batches = 4
        plm_rows = corpus_rows(xlnet_tok, seq_len, batch_size * n_batches, xlnet=True)
        mlm_rows = corpus_rows(bert_tok, seq_len, batch_size * n_batches, xlnet=False)
        split = lambda rows: [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]  # noqa: E731
        plm_batches = [[{"input_ids": r["input_ids"]} for r in b] for b in split(plm_rows)]
        mlm_batches = split(mlm_rows)
        num_predict = max(1, seq_len // 6)
        cases = [
            ("plm (XLNet, 1/6 predicted)", "DataCollatorForPermutationLanguageModeling",
             DataCollatorForPLM(xlnet_tok, seq_len=seq_len, num_predict=num_predict, seed=0),
             DataCollatorForPermutationLanguageModeling(xlnet_tok), plm_batches),
            ("plm, float32 perm_mask", "DataCollatorForPermutationLanguageModeling",
             DataCollatorForPLM(xlnet_tok, seq_len=seq_len, num_predict=num_predict, seed=0,
                                perm_mask_dtype=torch.float32),
             DataCollatorForPermutationLanguageModeling(xlnet_tok), plm_batches),
            ("plm, compact (perm_ranks + target_positions)", "DataCollatorForPermutationLanguageModeling",
             DataCollatorForPLM(xlnet_tok, seq_len=seq_len, num_predict=num_predict, seed=0, compact=True),
             DataCollatorForPermutationLanguageModeling(xlnet_tok), plm_batches),
            ("mlm (BERT, 15%, 80/10/10)", "DataCollatorForLanguageModeling",
             DataCollatorForMLM(bert_tok, seed=0), DataCollatorForLanguageModeling(bert_tok, seed=0), mlm_batches),
        ]
        results = []
        for name, ref_name, ours, ref, batches in cases:
            t = interleaved_medians({"ours": ours, "ref": ref}, batches, repeats, warmup)
            results.append({
                "name": name, "ours": type(ours).__name__, "reference": ref_name,
                "batch_size": batch_size, "seq_len": seq_len,
                "ours_per_s": batch_size / t["ours"], "ref_per_s": batch_size / t["ref"],
                "ratio": t["ref"] / t["ours"], "threads": torch.get_num_threads(),
            })
        return results


def markdown_table(rows: list[dict]) -> str:
    """The rows of `benchmark_collators` as a markdown table."""
    return "\n".join(table_lines(
        ["collator", "reference", "batch x seq", "threads", "ours (ex/s)", "reference (ex/s)", "speed-up"], "lllrrrr",
        [[r["name"], f"`{r['reference']}`", f"{r['batch_size']} x {r['seq_len']}", r["threads"], f"{r['ours_per_s']:.0f}",
          f"{r['ref_per_s']:.1f}", f"{r['ratio']:.1f}x"] for r in rows]))


def versus_per_example(fns: dict, batches: list, repeats: int, warmup: int, batch_size: int) -> dict:
    """Examples per second of "ours" and of the "per-example" baseline in `fns` (interleaved runs, median time
    per batch) and the speedup of ours: the figures of bench/bart_collator.py and bench/t5_collator.py."""
    medians = interleaved_medians(fns, batches, repeats, warmup)
    return {**{f"{name}_examples_per_s": batch_size / medians[name] for name in fns},
            "speedup": medians["per-example"] / medians["ours"]}


def per_example_main(argv, *, prog: str, description: str, benchmark, length_flag: str, length_default: int,
                     length_header: str, length_cell) -> None:
    """The command line of a collator-against-a-per-example-baseline benchmark: parse the batch size, the
    length (`length_flag`), repeats and warm-up, run `benchmark(batch_size, length, repeats, warmup)` and
    print its row as a markdown table (`length_cell(row)` fills the `length_header` column)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(length_flag, type=int, default=length_default)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    length = getattr(args, length_flag.lstrip("-").replace("-", "_"))
    row = benchmark(args.batch_size, length, args.repeats, args.warmup)
    print("\n".join(table_lines(
        ["collator", "batch", length_header, "ours ex/s", "per-example ex/s", "speedup"], "llllll",
        [[row["collator"], row["batch_size"], length_cell(row), f"{row['ours_examples_per_s']:.0f}",
          f"{row['per-example_examples_per_s']:.0f}", f"{row['speedup']:.1f}x"]])))
