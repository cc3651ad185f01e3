"""Throughput of the T5 span-corruption collator against a straightforward per-example implementation
(examples per second; interleaved runs, median time per batch).

    python -m hf_xfmr.bench.t5_collator [--batch-size 8] [--input-length 462] [--repeats 40]
"""

import torch

from .collators import per_example_main, versus_per_example


def span_corruption_per_example(examples, vocab_size: int, eos_token_id: int, noise_density: float = 0.15,
                                mean_noise_span_length: float = 3.0, generator=None):
    """A straightforward implementation: one example at a time, Python lists, T5's recipe step by step
    (random segmentation of noise / kept tokens, then a walk over the tokens). The baseline."""
    import random

    rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=generator)))
    inputs, targets = [], []
    for example in examples:
        ids = list(example["input_ids"])
        length = len(ids)
        num_noise = min(max(round(length * noise_density), 1), length - 1)
        num_spans = max(round(num_noise / mean_noise_span_length), 1)

        def segment(total):
            cuts = sorted(rng.sample(range(1, total), num_spans - 1))
            bounds = [0, *cuts, total]
            return [b - a for a, b in zip(bounds, bounds[1:])]
        noise_lengths, kept_lengths = segment(num_noise), segment(length - num_noise)
        x, y, position, sentinel = [], [], 0, vocab_size - 1
        for kept, noise in zip(kept_lengths, noise_lengths):
            x += ids[position:position + kept] + [sentinel]
            position += kept
            y += [sentinel] + ids[position:position + noise]
            position += noise
            sentinel -= 1
        inputs.append(x + [eos_token_id])
        targets.append(y + [eos_token_id])
    return {"input_ids": torch.tensor(inputs), "attention_mask": torch.ones(len(inputs), len(inputs[0]),
                                                                             dtype=torch.long),
            "labels": torch.tensor(targets)}


def benchmark_span_corruption(batch_size: int = 8, input_length: int = 462, repeats: int = 40,
                              warmup: int = 5, vocab_size: int = 32128) -> dict:
    """Examples per second of `DataCollatorForSpanCorruption` and of the per-example implementation on
    rows of T5's text length for `input_length` (interleaved runs, median time per batch)."""
    from ..data.t5 import DataCollatorForSpanCorruption, compute_input_and_target_lengths

    tokens, _ = compute_input_and_target_lengths(input_length)
    g = torch.Generator().manual_seed(0)
    batches = [[{"input_ids": row.tolist()} for row in torch.randint(2, vocab_size - 100, (batch_size, tokens),
                                                                      generator=g)] for _ in range(8)]
    ours = DataCollatorForSpanCorruption(vocab_size=vocab_size, eos_token_id=1, pad_token_id=0, seed=0)
    fns = {"ours": ours, "per-example": lambda b: span_corruption_per_example(b, vocab_size, 1, generator=g)}
    for fn in fns.values():
        assert fn(batches[0])["input_ids"].shape[1] == input_length
    return {"collator": "span corruption (T5)", "batch_size": batch_size, "text_tokens": tokens,
            "input_length": input_length, **versus_per_example(fns, batches, repeats, warmup, batch_size)}


def main(argv=None) -> None:
    per_example_main(argv, prog="python -m hf_xfmr.bench.t5_collator", description=__doc__.splitlines()[0],
                     benchmark=benchmark_span_corruption, length_flag="--input-length", length_default=462,
                     length_header="input / text tokens",
                     length_cell=lambda row: f"{row['input_length']} / {row['text_tokens']}")


if __name__ == "__main__":
    main()
