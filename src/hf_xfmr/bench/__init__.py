"""Side-by-side benchmarks against the transformers reference implementations (`hf-xfmr bench`).

`harness` is the machinery (timing, memory in a child process, reports); every other module holds
the cases of one architecture (or of the data collators) and registers them on import. Adding cases =
a module here + one line in the imports at the bottom. `collators` (data collator throughput) is not a
model case: `hf-xfmr bench` runs it as the pseudo-case "collators".
"""

from .harness import (  # noqa: F401  (the public harness API)
    CASES,
    SIDES,
    BenchCase,
    CaseResult,
    MemoryResult,
    SideStats,
    case_summary,
    make_case,
    measure_case,
    measure_memory_here,
    peak_memory,
    profile_case,
    public_cases,
    register_case,
    suites,
    time_case,
    to_json,
    to_markdown,
)

from . import (  # noqa: E402, F401  (each registers its cases)
    albert, bart, bert, bigbird, bigbird_pegasus, distilbert, electra, finetune, gpt, llama, modernbert, t5, toy, xlnet,
)
