"""Throughput of the BART text-infilling collator against a straightforward per-example implementation
(examples per second; interleaved runs, median time per batch).

    python -m hf_xfmr.bench.bart_collator [--batch-size 8] [--text-length 510] [--repeats 40]
"""

import numpy as np
import torch

from .collators import per_example_main, versus_per_example


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
    return {"collator": "text infilling (BART)", "batch_size": batch_size, "text_tokens": text_length,
            **versus_per_example(fns, batches, repeats, warmup, batch_size)}


def main(argv=None) -> None:
    per_example_main(argv, prog="python -m hf_xfmr.bench.bart_collator", description=__doc__.splitlines()[0],
                     benchmark=benchmark_text_infilling, length_flag="--text-length", length_default=510,
                     length_header="text tokens", length_cell=lambda row: row["text_tokens"])


if __name__ == "__main__":
    main()
