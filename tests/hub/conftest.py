"""Helpers of the hub tests: a tiny model of every architecture and head, their inputs, child processes.

Every architecture registered in `hf_xfmr.models.architectures()` and every distinct model class of
it is covered, so architectures added later are exported and reloaded by these tests automatically.
"""

import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

import hf_xfmr  # noqa: F401  (registers the architectures)
from hf_xfmr.models import architectures
from hf_xfmr.models.registry import TASK_AUTO_CLASSES

HERE = Path(__file__).parent
TOKEN = "hf_test_write_token_4f2a"  # the test server's only token (user "alice")
CHILD_TIMEOUT = 600


def model_cases():
    """(architecture, task, model class) for each distinct model class of each architecture."""
    cases = []
    for arch in architectures():
        seen = set()
        for task, cls in arch.classes.items():
            if cls not in seen:
                seen.add(cls)
                cases.append((arch, task, cls))
    return cases


def case_id(case) -> str:
    arch, task, _ = case
    return f"{arch.name}-{task}"


def auto_class_name(task: str) -> str:
    """The Auto class an exported model of `task` is loaded with (export maps task-less classes to AutoModel)."""
    return TASK_AUTO_CLASSES.get(task) or "AutoModel"


def tiny_model(arch, cls, seed: int = 0, **overrides):
    """An eval-mode model of `cls` with the architecture's `tiny` preset."""
    torch.manual_seed(seed)
    config = arch.config_class.from_preset("tiny", **overrides)
    return cls(config).eval()


def _padded_ids(config, generator, batch: int, seq_len: int):
    pad = getattr(config, "pad_token_id", None)
    low = min(5, config.vocab_size - 2)
    ids = torch.randint(low, config.vocab_size, (batch, seq_len), generator=generator)
    if pad is not None:
        ids = torch.where(ids == pad, torch.full_like(ids, low if pad != low else low + 1), ids)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    mask[1, -2:] = 0  # row 1 ends with two padding tokens
    if pad is not None:
        ids = ids.masked_fill(mask == 0, pad)
    return ids, mask


def model_inputs(model, task: str, batch: int = 2, seq_len: int = 7, seed: int = 0) -> dict:
    """A padded batch the model's forward accepts; (batch, 2 choices, seq_len) for multiple choice."""
    generator = torch.Generator().manual_seed(seed)
    if task == "multiple-choice":
        (ids_a, mask), (ids_b, _) = (_padded_ids(model.config, generator, batch, seq_len) for _ in range(2))
        inputs = {"input_ids": torch.stack([ids_a, ids_b], dim=1), "attention_mask": torch.stack([mask, mask], dim=1)}
    else:
        ids, mask = _padded_ids(model.config, generator, batch, seq_len)
        inputs = {"input_ids": ids, "attention_mask": mask}
    eos = getattr(model.config, "eos_token_id", None)
    if getattr(model, "pooling", None) == "eos" and eos is not None and task != "multiple-choice":
        # heads that read the <eos> state (T5, BART) need one per row: at each row's last real token
        last = inputs["attention_mask"].sum(-1) - 1
        inputs["input_ids"][torch.arange(batch), last] = eos
    if "decoder_input_ids" in inspect.signature(model.forward).parameters:
        inputs["decoder_input_ids"] = inputs["input_ids"][..., :4].clone()
    return inputs


def fitting_tokenizer(tokenizer, model):
    """The tokenizer when its vocabulary fits the model's (tiny presets may be smaller), else None."""
    return tokenizer if len(tokenizer) <= model.config.vocab_size else None


def export_quietly(*args, **kwargs):
    from hf_xfmr.hub import export

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "exporting without a tokenizer" for tiny vocabularies
        return export(*args, **kwargs)


def child_env(home: Path, **extra) -> dict:
    """The environment of a child process: a fresh HF_HOME, no token unless given, quiet transformers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(home), HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1", TRANSFORMERS_VERBOSITY="error",
               HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               TRANSFORMERS_NO_ADVISORY_WARNINGS="1", OMP_NUM_THREADS="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_child(script: str, config: dict, config_path: Path, env: dict) -> subprocess.CompletedProcess:
    """Run tests/hub/<script> with `config` (as a JSON file); fails the test with its output on error."""
    config_path.write_text(json.dumps(config, indent=2))
    proc = subprocess.run([sys.executable, str(HERE / script), str(config_path)], env=env, capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"{script} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
                             f"--- stderr\n{proc.stderr[-8000:]}")
    return proc
