"""XLNet PLM step time and peak memory at seq 128, 256, 512, 1024, 2048, ours vs transformers:
`python benchmarks/bench_xlnet_sweep.py [--cases ...] [--seqs ...] [--batch 8] [--out benchmarks/results]`.

Writes `<case>_seq.md` (table) and `<case>_seq.png` (plot) per case; see `hf_xfmr.bench.xlnet.main`.
"""

from hf_xfmr.bench.xlnet import main

if __name__ == "__main__":
    main()
