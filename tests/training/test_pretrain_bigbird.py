"""Pretraining the BigBird families on the block-sparse path: `hf-xfmr pretrain --arch bigbird --objective mlm`
and `--arch bigbird_pegasus --objective gsg` at 96 tokens (the tiny presets' sparse layout starts above 72) resume
bit for bit where the uninterrupted run goes, with the reference's layer-seeded random blocks and with fresh ones
drawn each step (`random_blocks="fresh"`: their draws are part of the restored RNG state)."""

import shutil

import pytest
import torch
from safetensors.torch import load_file

import hf_xfmr  # noqa: F401
from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.models.bigbird import modeling_bigbird
from hf_xfmr.models.bigbird_pegasus import modeling_bigbird_pegasus
from hf_xfmr.training import PretrainArguments, pretrain, read_log
from hf_xfmr.training.logs import TIMING_FIELDS

LENGTH = 96  # 12 blocks of 8: block-sparse (full attention up to (5 + 2 * 2) * 8 = 72 tokens)


pytestmark = pytest.mark.usefixtures("one_thread")  # every test: tests/training/conftest.py


@pytest.fixture
def sparse_calls(monkeypatch):
    """How many times each family's attention ran the block-sparse kernel."""
    calls = {}
    for arch, module in (("bigbird", modeling_bigbird), ("bigbird_pegasus", modeling_bigbird_pegasus)):
        def counted(*args, _kernel=module.block_sparse_attention, _arch=arch, **kwargs):
            calls[_arch] = calls.get(_arch, 0) + 1
            return _kernel(*args, **kwargs)
        monkeypatch.setattr(module, "block_sparse_attention", counted)
    return calls


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """One saved tokenizer per family: runs compared with each other must read the same file."""
    folders = {}
    for arch in ("bigbird", "bigbird_pegasus"):
        folders[arch] = tmp_path_factory.mktemp(f"{arch}-tokenizer")
        train_tokenizer(arch, default_corpus(max_documents=60), vocab_size=400).save_pretrained(folders[arch])
    return folders


def _args(tokenizer, out, arch, objective, random_blocks, **overrides):
    settings = dict(arch=arch, objective=objective, tokenizer=str(tokenizer), max_steps=6, save_steps=3,
                    eval_steps=2, gradient_accumulation_steps=2, save_total_limit=None, max_seq_length=LENGTH,
                    per_device_train_batch_size=4, logging_steps=1, eval_fraction=0.1, max_eval_examples=8,
                    max_documents=60, progress_bar=False, report_to_tensorboard=False, output_dir=str(out),
                    config_overrides=f"random_blocks={random_blocks}")
    return PretrainArguments(**{**settings, **overrides})


@pytest.mark.parametrize("random_blocks", ["reference", "fresh"])
@pytest.mark.parametrize("arch,objective", [("bigbird", "mlm"), ("bigbird_pegasus", "gsg")])
def test_block_sparse_pretraining_resumes_exactly(tokenizers, sparse_calls, tmp_path, arch, objective,
                                                  random_blocks):
    full = pretrain(_args(tokenizers[arch], tmp_path / "full", arch, objective, random_blocks))
    # MLM rows are packed to 96 tokens: every training micro-batch's 2 layers take the sparse path; GSG's
    # documents end where their text does, so only the batches whose longest input passes 72 tokens do.
    assert sparse_calls.get(arch, 0) >= (6 * 2 * 2 if objective == "mlm" else 2 * 2), sparse_calls
    assert full.model.config.attention_type == "block_sparse" and full.model.config.random_blocks == random_blocks
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_3", resumed_dir / "checkpoints" / "step_3")
    resumed = pretrain(_args(tokenizers[arch], resumed_dir, arch, objective, random_blocks, resume="latest"))

    def after_step_3(path):  # every logged number but the throughput
        return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_log(path) if r["step"] > 3]
    expected = after_step_3(full.log_path)
    assert after_step_3(resumed.log_path) == expected
    assert len([r for r in expected if "loss" in r]) == 3 and len([r for r in expected if "eval_loss" in r]) == 2
    a, b = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(resumed_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
