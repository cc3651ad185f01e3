"""`python -m hf_xfmr.bench --memory CASE --side ours|ref`: one side's memory, in this process."""

import sys

from hf_xfmr.bench.harness import memory_main

sys.exit(memory_main())
