"""What the help texts and choices of `hf-xfmr` name from the registries, written out so that `--help`
imports no model code (the registries import torch and transformers). tests/test_cli.py checks that each
list equals its registry, so a new architecture, objective or task fails there until it is added here.
"""

# hf_xfmr.models.architectures(): (name, objectives), in the registry's order
ARCHITECTURE_OBJECTIVES = (
    ("albert", ("mlm+sop", "mlm")),
    ("bart", ("text-infilling",)),
    ("bert", ("mlm", "wwm", "mlm+nsp")),
    ("distilbert", ("mlm",)),
    ("gpt", ("clm",)),
    ("modernbert", ("mlm",)),
    ("roberta", ("mlm", "wwm")),
    ("t5", ("span-corruption",)),
    ("xlnet", ("plm", "plm-mem")),
)

# hf_xfmr.training.objectives.available_objectives(): the objectives with a training recipe
OBJECTIVES = ("mlm", "wwm", "mlm+nsp", "mlm+sop", "clm", "plm", "plm-mem", "span-corruption", "text-infilling")

# hf_xfmr.models.supported_tasks(): the heads `convert --task` and `export --task` offer
TASKS = ("base", "pretraining", "masked-lm", "causal-lm", "seq2seq-lm", "encoder", "sequence-classification",
         "token-classification", "question-answering", "multiple-choice")
