"""`hf_xfmr.malloc`: the first training forward of an hf_xfmr model has glibc keep freed blocks for reuse
(unless the model was set up to save memory).

Each case runs in its own Python process (the setting is process-wide and has no getter): it counts the page
faults of touching a freshly allocated 48 MB tensor after an equal one was freed. Served by a fresh `mmap`,
every 4 KiB page faults (about 12,000); reused from the heap, almost none do.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from hf_xfmr.malloc import MALLOC_ENV, malloc_choice

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")

SCRIPT = textwrap.dedent("""
    import resource, sys, torch
    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    def refault_pages():
        torch.empty(12 * 2**20).fill_(1.0)  # 48 MB, freed at once
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.empty(12 * 2**20).fill_(1.0)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    config = XfmrBertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=16)
    model = XfmrBertForMaskedLM(config)
    if sys.argv[1:] == ["checkpointing"]:
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, 64, (2, 8))
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)
    inference = refault_pages()
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    print(inference, refault_pages())
""")
PAGES = 12 * 2**20 * 4 // 4096  # pages of the 48 MB tensor


def _page_faults(malloc: str | None, *args: str) -> tuple[int, int]:
    """(faults after an inference forward, faults after a training forward) in a fresh process."""
    env = {key: value for key, value in os.environ.items() if key != MALLOC_ENV}
    if malloc is not None:
        env[MALLOC_ENV] = malloc
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    inference, training = done.stdout.split()[-2:]
    return int(inference), int(training)


def test_a_training_forward_keeps_freed_memory_for_reuse():
    inference, training = _page_faults(None)
    assert inference > PAGES // 2  # an inference-only process keeps glibc's rules: a fresh mmap, every page
    assert training < PAGES // 20  # after training began: the freed block is reused


def test_system_leaves_the_allocator_alone():
    inference, training = _page_faults("system")
    assert inference > PAGES // 2 and training > PAGES // 2


def test_a_model_set_up_to_save_memory_leaves_the_allocator_alone():
    # gradient checkpointing (or quantized weights): fragmentation of a heap that keeps everything would cost
    # more than such a run saves
    inference, training = _page_faults(None, "checkpointing")
    assert inference > PAGES // 2 and training > PAGES // 2


def test_a_bad_choice_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(MALLOC_ENV, "jemalloc")
    with pytest.raises(ValueError, match="HF_XFMR_MALLOC='jemalloc' is not a choice: use reuse .* or system"):
        malloc_choice()
    monkeypatch.setenv(MALLOC_ENV, " System ")
    assert malloc_choice() == "system"
    monkeypatch.delenv(MALLOC_ENV)
    assert malloc_choice() == "reuse"


def test_saves_memory_reads_checkpointing_and_quantization():
    from types import SimpleNamespace

    from hf_xfmr.malloc import saves_memory

    assert not saves_memory(SimpleNamespace(is_gradient_checkpointing=False, is_quantized=False))
    assert saves_memory(SimpleNamespace(is_gradient_checkpointing=True))
    assert saves_memory(SimpleNamespace(is_loaded_in_4bit=True))  # QLoRA (bitsandbytes NF4)
    assert saves_memory(SimpleNamespace(is_quantized=True))
