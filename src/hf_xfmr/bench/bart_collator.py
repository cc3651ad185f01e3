"""Throughput of the BART text-infilling collator against a straightforward per-example implementation
(examples per second; interleaved runs, median time per batch).

    python -m hf_xfmr.bench.bart_collator [--batch-size 8] [--text-length 510] [--repeats 40]
"""

import argparse

import numpy as np
import torch

from .collators import interleaved_medians


def text_infilling_per_example(examples, mask_token_id: int, bos_token_id: int, eos_token_id: int,
                               pad_token_id: int, mask_ratio: float = 0.3, poisson_lambda: float = 3.0,
                               generator=None):
    """A straightforward implementation: one example at a time, Python lists, BART's recipe step by step
    (Poisson span lengths until they cover the masked count, spans placed among the kept tokens, then a
    walk that writes one mask per span). The baseline."""
    import random

    seed = int(torch.randint(0, 2**31, (1,), generator=generator))
    rng, poisson = random.Random(seed), np.random.default_rng(seed)
    inputs, labels = [], []
    for example in examples:
        ids = list(example["input_ids"])
        to_mask = max(round(len(ids) * mask_ratio), 1)
        spans, covered = [], 0
        while covered < to_mask:
            length = min(int(poisson.poisson(poisson_lambda)), to_mask - covered)
            spans.append(length)
            covered += length
        kept = len(ids) - to_mask
        span_slots = set(rng.sample(range(kept + len(spans)), len(spans)))
        out, position, span = [bos_token_id], 0, 0
        for slot in range(kept + len(spans)):
            if slot in span_slots:
                out.append(mask_token_id)
                position += spans[span]
                span += 1
            else:
                out.append(ids[position])
                position += 1
        inputs.append(out + [eos_token_id])
        labels.append([bos_token_id, *ids, eos_token_id])
    width, label_width = max(map(len, inputs)), max(map(len, labels))
    return {"input_ids": torch.tensor([x + [pad_token_id] * (width - len(x)) for x in inputs]),
            "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in inputs]),
            "labels": torch.tensor([y + [-100] * (label_width - len(y)) for y in labels])}


def benchmark_text_infilling(batch_size: int = 8, text_length: int = 510, repeats: int = 40, warmup: int = 5,
                             vocab_size: int = 32000) -> dict:
    """Examples per second of `DataCollatorForTextInfilling` and of the per-example implementation on rows
    of `text_length` tokens (510 + <s> + </s> = 512 targets; interleaved runs, median time per batch)."""
    from ..data.bart import DataCollatorForTextInfilling

    g = torch.Generator().manual_seed(0)
    batches = [[{"input_ids": row.tolist()} for row in torch.randint(5, vocab_size, (batch_size, text_length),
                                                                      generator=g)] for _ in range(8)]
    special = dict(mask_token_id=4, bos_token_id=0, eos_token_id=2, pad_token_id=1)
    ours = DataCollatorForTextInfilling(**special, seed=0)
    fns = {"ours": ours, "per-example": lambda b: text_infilling_per_example(b, **special, generator=g)}
    for fn in fns.values():
        assert fn(batches[0])["labels"].shape == (batch_size, text_length + 2)
    medians = interleaved_medians(fns, batches, repeats, warmup)
    return {"collator": "text infilling (BART)", "batch_size": batch_size, "text_tokens": text_length,
            **{f"{name}_examples_per_s": batch_size / medians[name] for name in fns},
            "speedup": medians["per-example"] / medians["ours"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hf_xfmr.bench.bart_collator",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--text-length", type=int, default=510)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    row = benchmark_text_infilling(args.batch_size, args.text_length, args.repeats, args.warmup)
    print("| collator | batch | text tokens | ours ex/s | per-example ex/s | speedup |")
    print("|---|---|---|---|---|---|")
    print(f"| {row['collator']} | {row['batch_size']} | {row['text_tokens']} | {row['ours_examples_per_s']:.0f} | "
          f"{row['per-example_examples_per_s']:.0f} | {row['speedup']:.1f}x |")


if __name__ == "__main__":
    main()
