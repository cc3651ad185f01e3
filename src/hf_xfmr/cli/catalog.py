"""What the help texts and choices of `hf-xfmr` name from the registries, without importing model code (the
registries import torch and transformers). The architectures come from their family records
(`hf_xfmr.family`, plain data read from `models/<arch>/family.py`); the objectives with a recipe and the tasks
are written out here. tests/test_cli.py checks each against its registry, so a new objective or task fails there
until it is added here.
"""

from ..family import families

# hf_xfmr.models.architectures(): (name, objectives), in the registry's order
ARCHITECTURE_OBJECTIVES = tuple((family.name, family.objectives) for family in families())

# hf_xfmr.training.objectives.available_objectives(): the objectives with a training recipe
OBJECTIVES = ("mlm", "wwm", "mlm+nsp", "mlm+sop", "clm", "plm", "plm-mem", "span-corruption", "text-infilling",
              "gsg", "rtd")

# hf_xfmr.models.supported_tasks(): the heads `convert --task` and `export --task` offer
TASKS = ("base", "pretraining", "masked-lm", "causal-lm", "seq2seq-lm", "encoder", "sequence-classification",
         "token-classification", "question-answering", "multiple-choice")
