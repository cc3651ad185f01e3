"""`python -m hf_xfmr.cli` (as `accelerate launch -m hf_xfmr.cli` and `torchrun -m hf_xfmr.cli` start it)."""

import sys

from . import main

sys.exit(main())
