"""Benchmark cases for XLNet permutation-LM pretraining against `XLNetLMHeadModel` (eager, the only
attention transformers' XLNet has), identical weights through `hf_xfmr.from_transformers`.

- `xlnet-plm-step`: the whole training step as each library's user runs it, collation included: both
  sides get the same raw rows `[A, <sep>, B, <sep>, <cls>]`; ours collates them with
  `DataCollatorForPLM(compact=True)` (85 targets of 512, masks built inside the model), the reference
  with `DataCollatorForPermutationLanguageModeling` (its `target_mapping` is the identity, so its query
  stream runs over every position), then forward + backward + AdamW.
- `xlnet-plm-train`: identical inputs to both models (transformers' collator output, collated once).
- `xlnet-plm-train-85`: identical inputs from our collator's expanded output (85 targets, padding-free
  rows with token types): the models alone on the official recipe's inputs.

Sweep (seq 128..2048): `python benchmarks/bench_xlnet_sweep.py` (calls `main` below).
"""

import torch
from torch import nn

from .harness import BenchCase, dtype_from_name, register_case

PLM_SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=32000, batch=8, seq=512)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=2000, batch=2, seq=32)
SWEEP_SEQS = [128, 256, 512, 1024, 2048]


def _tokenizer():
    from ..data import default_corpus, train_tokenizer

    return train_tokenizer("xlnet", default_corpus(max_documents=200), vocab_size=2000)


def _raw_rows(tokenizer, batch: int, seq: int, seed: int) -> torch.Tensor:
    """(B, L) token ids of `[A, <sep>, B, <sep>, <cls>]` rows cut from the embedded corpus."""
    from .collators import corpus_rows

    rows = corpus_rows(tokenizer, seq, batch * 4, xlnet=True)
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(rows), generator=g)[:batch].tolist()
    return torch.tensor([rows[i]["input_ids"] for i in pick])


def _reference(hidden, layers, heads, ffn, vocab, tokenizer):
    import transformers

    config = transformers.XLNetConfig(vocab_size=vocab, d_model=hidden, n_layer=layers, n_head=heads, d_inner=ffn,
                                      pad_token_id=tokenizer.pad_token_id, mem_len=None)
    return transformers.XLNetLMHeadModel._from_config(config)


class CollateAndTrain(nn.Module):
    """forward(rows) = model(**collator(rows)): the timed step includes the collation of the raw rows.
    `wrapped` is the model (the harness looks through it)."""

    def __init__(self, model, collator):
        super().__init__()
        self.wrapped = model
        self.collator = collator

    def collate(self, rows):
        return self.collator([{"input_ids": r} for r in rows.tolist()])

    def forward(self, rows):
        return self.wrapped(**self.collate(rows))


def _plm_case(name: str, *, inputs: str, dtype: str = "fp32", hidden: int = PLM_SIZES["hidden"],
              layers: int = PLM_SIZES["layers"], heads: int = PLM_SIZES["heads"], ffn: int = PLM_SIZES["ffn"],
              vocab: int = PLM_SIZES["vocab"], batch: int = PLM_SIZES["batch"], seq: int = PLM_SIZES["seq"],
              num_predict: int | None = None, device: str = "cpu", seed: int = 0) -> BenchCase:
    """inputs: "raw" (each side collates with its own collator inside the step), "reference" (both get
    transformers' collator output), "ours-expanded" (both get our collator's expanded output)."""
    state = {}
    num_predict = num_predict or seq // 6

    def tokenizer():
        if "tok" not in state:
            state["tok"] = _tokenizer()
        return state["tok"]

    def build_pair():
        import transformers

        import hf_xfmr
        from ..data import DataCollatorForPLM

        tok = tokenizer()
        ref = _reference(hidden, layers, heads, ffn, vocab, tok)
        ours = hf_xfmr.from_transformers(ref)
        if inputs != "raw":
            return ours, ref
        ours_collator = DataCollatorForPLM(tok, seq_len=seq, num_predict=num_predict, compact=True, seed=seed)
        ref_collator = transformers.DataCollatorForPermutationLanguageModeling(tok)
        return CollateAndTrain(ours, ours_collator), CollateAndTrain(ref, ref_collator)

    def make_batch():
        from ..data import DataCollatorForPLM

        tok = tokenizer()
        rows = _raw_rows(tok, batch, seq, seed)
        if inputs == "raw":
            return {"rows": rows}
        examples = [{"input_ids": r} for r in rows.tolist()]
        if inputs == "reference":
            import transformers

            torch.manual_seed(seed)
            out = transformers.DataCollatorForPermutationLanguageModeling(tok)(examples)
            return {k: v for k, v in out.items()}
        out = DataCollatorForPLM(tok, seq_len=seq, num_predict=num_predict, perm_mask_dtype=torch.float32,
                                 seed=seed)(examples)
        return dict(out)

    what = {"raw": "each side's own collator inside the step (ours compact, 1/6 targets; transformers' "
                   "DataCollatorForPermutationLanguageModeling)",
            "reference": "identical inputs: transformers' collator output (query stream over all positions)",
            "ours-expanded": f"identical inputs: our expanded collator output ({num_predict} targets)"}[inputs]
    return BenchCase(
        name=name, build_pair=build_pair, make_batch=make_batch, mode="train", autocast_dtype=dtype_from_name(dtype),
        device=device,
        description=(f"XLNetLMHeadModel d_model {hidden}, {layers} layers, {heads} heads, d_inner {ffn}, vocab {vocab}; "
                     f"batch {batch} x {seq}; {what}"),
    )


@register_case("xlnet-plm-step", tiny=TINY_SIZES)
def xlnet_plm_step(**kw) -> BenchCase:
    """Headline: the whole PLM training step from the same raw rows, collation included (fp32)."""
    return _plm_case("xlnet-plm-step", **{"inputs": "raw", **kw})


@register_case("xlnet-plm-train", tiny=TINY_SIZES)
def xlnet_plm_train(**kw) -> BenchCase:
    """PLM training step on identical inputs (transformers' collator output)."""
    return _plm_case("xlnet-plm-train", **{"inputs": "reference", **kw})


@register_case("xlnet-plm-train-85", tiny=TINY_SIZES)
def xlnet_plm_train_85(**kw) -> BenchCase:
    """PLM training step on identical inputs from our expanded collator (85 targets of 512)."""
    return _plm_case("xlnet-plm-train-85", **{"inputs": "ours-expanded", **kw})


def main(argv=None):
    """`python benchmarks/bench_xlnet_sweep.py [--cases xlnet-plm-step xlnet-plm-train] [--seqs ...] [--out DIR]`:
    step time and peak memory at seq 128..2048 (batch 8 unless --batch), a markdown table and a PNG plot per
    case. Rows are kept in `<case>_seq.json` and merged by seq, so long sweeps can run one seq at a time."""
    import argparse
    import json
    from pathlib import Path

    from .sweep import plot_sweep, run_sweep, sweep_markdown

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--cases", nargs="+", default=["xlnet-plm-step", "xlnet-plm-train"])
    parser.add_argument("--seqs", nargs="+", type=int, default=SWEEP_SEQS)
    parser.add_argument("--batch", type=int, default=PLM_SIZES["batch"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--ref-up-to", type=int, default=None,
                        help="measure only our side above this seq (where the reference does not fit the machine)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--tiny", action="store_true", help="tiny model sizes (smoke test)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    fixed = dict(TINY_SIZES) if args.tiny else {}
    fixed.pop("seq", None)
    fixed["batch"] = args.batch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for case in args.cases:
        rows = run_sweep(case, "seq", args.seqs, repeats=args.repeats, threads=args.threads,
                         memory=not args.no_memory, ref_up_to=args.ref_up_to, **fixed)
        store = out / f"{case}_seq.json"
        merged = {row["seq"]: row for row in (json.loads(store.read_text()) if store.exists() else [])}
        merged.update({row["seq"]: row for row in rows})
        rows = [merged[seq] for seq in sorted(merged)]
        store.write_text(json.dumps(rows, indent=2, default=str) + "\n")
        table = sweep_markdown(rows, "seq")
        print(f"\n{case}\n{table}")
        (out / f"{case}_seq.md").write_text(table)
        plot_sweep(rows, "seq", out / f"{case}_seq.png", title=f"{case}: batch {args.batch}")
