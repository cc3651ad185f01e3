#!/usr/bin/env bash
# The GPU check: on one NVIDIA GPU, with the installed packages only (no network), in at most 8 minutes.
# Writes benchmarks/results/gpu/<date>_<gpu>/: check.md, check.json (machine facts, parity of every family's
# heads in fp32 and bf16, each attention backend), bench.md, bench.json (training steps against transformers,
# with FLOPs and % of the GPU's peak). Commit that folder.
#
#   benchmarks/gpu/check.sh                  # on the GPU machine
#   benchmarks/gpu/check.sh --dry-run        # the same code paths on the CPU, tiny sizes (seconds)
#   HF_XFMR_PEAK_GFLOPS=bf16=989000,fp32=67000 benchmarks/gpu/check.sh   # MFU against the datasheet peaks
#
# Other options: python benchmarks/gpu/check.py --help. PYTHON picks the interpreter (default: .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# check.py starts no new work after 420 s (--budget); the hard stop leaves a minute for the last case.
exec timeout --signal=TERM --kill-after=10 480 "$python" benchmarks/gpu/check.py "$@"
