"""ModernBERT MLM step time and peak memory at seq 512 .. 8192, ours vs transformers:
`python benchmarks/bench_modernbert_sweep.py [--seqs ...] [--batch 1] [--repeats 3] [--out benchmarks/results]`.

Writes `modernbert-mlm-train_seq.md` (table) and `modernbert-mlm-train_seq.png` (plot); see
`hf_xfmr.bench.modernbert.main`.
"""

from hf_xfmr.bench.modernbert import main

if __name__ == "__main__":
    main()
