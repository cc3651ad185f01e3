"""`hf-xfmr pretrain --arch bart --objective gsg` (PEGASUS gap-sentence generation on any encoder-decoder): the
loss falls and the saved model loads and generates as the trained one; a resumed run ends bit for bit where the
uninterrupted one does; the windows fit --max_seq_length on both sides; `--gsg_ratio` / `--gsg_strategy` reach the
collator (and family defaults fill them), and other objectives refuse them."""

import dataclasses
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_xfmr  # noqa: F401
from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.data.corpus import document_text
from hf_xfmr.family import Family
from hf_xfmr.models import registry
from hf_xfmr.training import PretrainArguments, get_objective, pretrain, read_log
from hf_xfmr.training.logs import TIMING_FIELDS
from hf_xfmr.training.objectives import ObjectiveSettings, objective_settings_options


@pytest.fixture(autouse=True)
def bart_trains_gsg(monkeypatch):
    """The bart architecture with "gsg" among its objectives (a no-op once the registry and its record list it)."""
    arch = registry.get_architecture("bart")
    if "gsg" not in arch.objectives:
        monkeypatch.setitem(registry.OBJECTIVES, "gsg", "gap-sentence generation (PEGASUS)")
        monkeypatch.setitem(registry._ARCHITECTURES, "bart",
                            dataclasses.replace(arch, objectives=arch.objectives + ("gsg",)))


pytestmark = pytest.mark.usefixtures("one_thread")  # every test: tests/training/conftest.py


@pytest.fixture(scope="module")
def bart_tokenizer(tmp_path_factory):
    """Saved once: runs compared with each other must read the same tokenizer file."""
    folder = tmp_path_factory.mktemp("bart-tokenizer")
    train_tokenizer("bart", default_corpus(max_documents=60), vocab_size=400).save_pretrained(folder)
    return folder


def _args(tokenizer, out, **overrides):
    settings = dict(arch="bart", objective="gsg", tokenizer=str(tokenizer), max_steps=4, max_seq_length=64,
                    per_device_train_batch_size=8, logging_steps=1, save_steps=0, eval_fraction=0.1,
                    max_eval_examples=16, max_documents=60, progress_bar=False, report_to_tensorboard=False,
                    output_dir=str(out))
    return PretrainArguments(**{**settings, **overrides})


def test_gsg_loss_falls_and_the_saved_model_generates_the_same(bart_tokenizer, tmp_path):
    result = pretrain(_args(bart_tokenizer, tmp_path / "out", max_steps=40, learning_rate=5e-3, warmup_steps=2))
    losses = [r["loss"] for r in read_log(result.log_path) if "loss" in r]
    assert len(losses) == 40 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses  # measured: 5.96 -> 4.78
    metrics = result.eval_metrics  # held-out gap sentences: better than always predicting the commonest token
    assert metrics["eval_majority_accuracy"] < metrics["eval_accuracy"] <= 1, metrics
    model = result.model.eval()
    assert type(model).__name__ == "XfmrBartForConditionalGeneration"
    tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(result.model_dir).eval()
    ids = tokenizer(["The cat sat on the mat. <mask> It was happy."], return_tensors="pt").input_ids
    generated = loaded.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(generated, model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False))


def test_gsg_resume_continues_exactly(bart_tokenizer, tmp_path):
    """Two micro-batches per step, evaluation, a checkpoint at step 3: resuming it ends with the uninterrupted
    run's log and weights."""
    common = dict(max_steps=6, save_steps=3, eval_steps=2, gradient_accumulation_steps=2, save_total_limit=None)
    pretrain(_args(bart_tokenizer, tmp_path / "full", **common))
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_3", resumed_dir / "checkpoints" / "step_3")
    resumed = pretrain(_args(bart_tokenizer, resumed_dir, resume="latest", **common))

    def after_step_3(path):  # every logged number but the throughput
        return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_log(path) if r["step"] > 3]
    expected = after_step_3(tmp_path / "full" / "log.jsonl")
    assert after_step_3(resumed.log_path) == expected
    assert len([r for r in expected if "loss" in r]) == 3 and len([r for r in expected if "eval_loss" in r]) == 2
    a, b = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(resumed_dir / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("length", [16, 64])
def test_windows_fit_the_encoder_and_the_decoder(bart_tokenizer, length):
    tokenizer = AutoTokenizer.from_pretrained(bart_tokenizer)
    objective = get_objective("gsg")
    settings = objective.resolve(ObjectiveSettings(max_seq_length=length, arch="bart"))
    assert objective.decoder_length(settings) == length
    texts = [document_text(d) for d in default_corpus(max_documents=30)]
    examples = objective.build_examples(tokenizer, texts, settings)
    assert len(examples) > 20
    collate = objective.make_collator(tokenizer, settings)
    for start in range(0, len(examples), 16):
        batch = collate(examples[start:start + 16], generator=torch.Generator().manual_seed(start))
        assert batch["input_ids"].shape[1] <= length and batch["labels"].shape[1] <= length
        assert ((batch["input_ids"] == tokenizer.mask_token_id).sum(1) >= 1).all()
    with pytest.raises(ValueError, match="--max_seq_length 3 is too short for gap-sentence generation"):
        objective.build_examples(tokenizer, texts, ObjectiveSettings(max_seq_length=3))


def test_options_reach_the_collator_and_other_objectives_refuse_them(bart_tokenizer, monkeypatch):
    tokenizer = AutoTokenizer.from_pretrained(bart_tokenizer)
    gsg, mlm = get_objective("gsg"), get_objective("mlm")
    given = SimpleNamespace(gsg_ratio=0.45, gsg_strategy="seq-uniq")
    assert objective_settings_options(gsg, given) == {"gsg_ratio": 0.45, "gsg_strategy": "seq-uniq"}
    assert objective_settings_options(gsg, SimpleNamespace(gsg_ratio=None, gsg_strategy=None)) == {}
    assert objective_settings_options(mlm, SimpleNamespace(gsg_ratio=None)) == {}
    with pytest.raises(ValueError, match=r"--gsg_ratio apply only to the objective\(s\) that have them \(gsg\), not "
                                         r"to 'mlm'"):
        objective_settings_options(mlm, SimpleNamespace(gsg_ratio=0.3, gsg_strategy=None))

    settings = ObjectiveSettings(max_seq_length=64, arch="bart", **objective_settings_options(gsg, given))
    collator = gsg.make_collator(tokenizer, gsg.resolve(settings)).collator
    assert (collator.gsg_ratio, collator.strategy) == (0.45, "seq-uniq")
    default = gsg.make_collator(tokenizer, gsg.resolve(ObjectiveSettings(arch="bart"))).collator
    assert (default.gsg_ratio, default.strategy) == (0.3, "ind-orig")
    # A family's record sets its own defaults (as BigBird-Pegasus may), which the run's options override.
    arch = registry.get_architecture("bart")
    family = Family(name="bart", model_type="xfmr-bart", objectives=arch.objectives, tokenizer="roberta",
                    pretraining_defaults={"gsg": {"gsg_ratio": 0.15, "gsg_strategy": "lead"}})
    monkeypatch.setitem(registry._ARCHITECTURES, "bart", dataclasses.replace(arch, family=family))
    assert gsg.resolve(ObjectiveSettings(arch="bart")).gsg_ratio == 0.15
    assert gsg.resolve(settings).gsg_ratio == 0.45
    with pytest.raises(ValueError, match="gsg_ratio=0 must lie in"):
        gsg.make_collator(tokenizer, ObjectiveSettings(gsg_ratio=0))


def test_command_line_options_reach_the_collator(bart_tokenizer, tmp_path, monkeypatch):
    """`--gsg_ratio` / `--gsg_strategy` (PretrainArguments fields) set the run's settings; bad values and other
    objectives are refused before training."""
    from hf_xfmr.training import objectives as objectives_module

    gsg, seen = get_objective("gsg"), []

    def spy(tokenizer, settings):
        seen.append(settings)
        return gsg.make_collator(tokenizer, settings)
    monkeypatch.setitem(objectives_module._OBJECTIVES, "gsg", dataclasses.replace(gsg, make_collator=spy))
    pretrain(_args(bart_tokenizer, tmp_path / "out", max_steps=1, gsg_ratio=0.6, gsg_strategy="lead"))
    assert (seen[0].gsg_ratio, seen[0].gsg_strategy) == (0.6, "lead")
    with pytest.raises(ValueError, match=r"--gsg_ratio must be in \(0, 1\), got 1.5"):
        _args(bart_tokenizer, tmp_path / "bad", gsg_ratio=1.5)
    with pytest.raises(ValueError, match="Unknown gap-sentence strategy 'best'"):
        pretrain(_args(bart_tokenizer, tmp_path / "bad", gsg_strategy="best"))
    with pytest.raises(ValueError, match="--gsg_ratio apply only to the objective"):
        pretrain(_args(bart_tokenizer, tmp_path / "mlm", objective="text-infilling", gsg_ratio=0.3))
