"""The objective table: data side of every recipe, metrics, and the state hooks of stateful objectives
(the mechanism XLNet's memory uses), tested with a fake objective on BERT."""

import dataclasses

import pytest
import torch

import hf_xfmr  # noqa: F401
from hf_xfmr.data.corpus import document_text
from hf_xfmr.models import registry
from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM
from hf_xfmr.training import Objective, ObjectiveSettings, PretrainArguments, PretrainCallback, get_objective, pretrain
import hf_xfmr.training.objectives as objectives_module
from hf_xfmr.training.objectives import chunk_documents, target_histogram, token_accuracy_counts


@pytest.fixture(scope="module")
def texts():
    from hf_xfmr.data import default_corpus

    return [document_text(d) for d in default_corpus(max_documents=30)]


def _batch(objective, tokenizer, examples, seed=0):
    collator = objective.make_collator(tokenizer, ObjectiveSettings())
    return collator(examples, generator=torch.Generator().manual_seed(seed))


def test_every_registry_objective_is_known_to_the_table(monkeypatch):
    table = objectives_module.available_objectives()
    assert {"mlm", "wwm", "mlm+nsp", "mlm+sop", "clm", "span-corruption"} <= set(table)
    assert set(table) <= set(registry.OBJECTIVES)
    for objective in table.values():
        assert objective.task in registry.TASKS
    monkeypatch.setitem(registry.OBJECTIVES, "future-objective", "an objective without a recipe yet")
    with pytest.raises(ValueError, match="'future-objective' .* has no pretraining recipe"):
        get_objective("future-objective")


def test_mlm_windows_keep_word_ids_and_the_template(bert_tok, texts):
    settings = ObjectiveSettings(max_seq_length=24)
    examples = chunk_documents(bert_tok, texts[:5], settings, word_ids=True)
    assert len(examples) > 5  # long documents are cut into several windows
    for ex in examples:
        assert len(ex["input_ids"]) <= 24 and ex["input_ids"][0] == bert_tok.cls_token_id
        assert ex["input_ids"][-1] == bert_tok.sep_token_id
        assert [w == -1 for w in ex["word_ids"]] == [bool(s) for s in ex["special_tokens_mask"]]
    batch = _batch(get_objective("wwm"), bert_tok, examples[:8])
    labelled = batch["labels"] != -100
    assert labelled.any() and not (labelled & (batch["attention_mask"] == 0)).any()


def test_clm_rows_are_packed_documents_separated_by_eos(gpt_tok, texts):
    clm = get_objective("clm")
    rows = clm.build_examples(gpt_tok, texts[:6], ObjectiveSettings(max_seq_length=64))
    assert all(len(r["input_ids"]) == 64 for r in rows[:-1]) and 0 < len(rows[-1]["input_ids"]) <= 64
    stream = [t for r in rows for t in r["input_ids"]]
    documents = gpt_tok(texts[:6], add_special_tokens=False)["input_ids"]
    assert stream == [t for d in documents for t in d + [gpt_tok.eos_token_id]]  # nothing dropped or reordered
    batch = _batch(clm, gpt_tok, rows[-2:])
    assert torch.equal(batch["labels"][0], batch["input_ids"][0])  # the model shifts
    assert (batch["labels"][1][batch["attention_mask"][1] == 0] == -100).all()


def test_sop_examples_and_metric(albert_tok, texts):
    sop = get_objective("mlm+sop")
    examples = sop.build_examples(albert_tok, texts[:10], ObjectiveSettings(max_seq_length=48, seed=1))
    labels = [ex["sentence_order_label"] for ex in examples]
    assert 0 < sum(labels) < len(labels)  # both orders occur
    batch = _batch(sop, albert_tok, examples[:6])
    assert batch["sentence_order_label"].tolist() == labels[:6]
    assert {"input_ids", "attention_mask", "token_type_ids", "labels"} <= set(batch)
    fake = type("Out", (), {"sop_logits": torch.nn.functional.one_hot(batch["sentence_order_label"], 2).float()})
    assert sop.metrics(batch, fake) == {"sop_accuracy": (6, 6)}


def test_token_accuracy_reads_dense_and_sparse_logits_alike():
    labels = torch.tensor([[-100, 3, -100, 1], [2, -100, -100, -100]])
    dense = torch.zeros(2, 4, 5)
    dense[0, 1, 3] = dense[0, 3, 0] = dense[1, 0, 2] = 1.0  # 2 of 3 labelled positions right
    sparse = dense[labels != -100]  # (N, V), row-major like a sparse-prediction head
    assert token_accuracy_counts(dense, labels) == (2, 3) == token_accuracy_counts(sparse, labels)
    shifted = torch.zeros(1, 3, 5)
    shifted[0, 0, 4] = shifted[0, 1, 1] = 1.0
    assert token_accuracy_counts(shifted, torch.tensor([[9, 4, 2]]), shift=True) == (1, 2)


def test_target_histogram_counts_labelled_positions_only():
    labels = torch.tensor([[-100, 3, -100, 3], [2, -100, 3, -100]])
    assert target_histogram(labels, 5).tolist() == [0, 0, 1, 3, 0]
    assert target_histogram(torch.tensor([[9, 4, 4]]), 10, shift=True).tolist() == [0] * 4 + [2] + [0] * 5


# ----------------------------------------------------------------------------------------------
# State hooks (what XLNet's memory needs), with a fake stateful objective
# ----------------------------------------------------------------------------------------------

def _segments(tokenizer, texts, settings):
    """The corpus as one token stream cut into numbered segments (a segment's number is its place in the stream)."""
    ids = [t for d in tokenizer(list(texts), add_special_tokens=False)["input_ids"] for t in d]
    n = settings.max_seq_length
    return [{"input_ids": ids[i:i + n], "segment": i // n} for i in range(0, len(ids) - n + 1, n)]


def _initial(rows):
    return {"next_segment": torch.full((rows,), -1), "breaks": torch.zeros((), dtype=torch.long),
            "steps": torch.zeros((), dtype=torch.long)}


def _step_inputs(batch, state):
    # Every row must hold the segment right after the one this row held at the previous step.
    expected = state["next_segment"]
    state["breaks"] += int(((expected >= 0) & (batch["segment"] != expected)).sum())
    return {k: v for k, v in batch.items() if k != "segment"}


def _update(batch, outputs, state):
    return {**state, "next_segment": batch["segment"] + 1, "steps": state["steps"] + 1}


def _fake_objective(layout):
    mlm = get_objective("mlm")
    return Objective(name="test-memory", description="fake stateful objective", task="masked-lm",
                     build_examples=_segments, make_collator=mlm.make_collator, required_tokens=mlm.required_tokens,
                     layout=layout, initial_state=_initial, step_inputs=_step_inputs, update_state=_update)


class KeepState(PretrainCallback):
    def on_train_end(self, run, result):
        self.state = {k: v.clone() for k, v in run.objective_state.items()}


@pytest.fixture
def fake_architecture(monkeypatch):
    monkeypatch.setitem(registry.OBJECTIVES, "test-memory", "fake stateful objective")
    arch = registry.Architecture(name="bert-memory", config_class=XfmrBertConfig,
                                 classes={"masked-lm": XfmrBertForMaskedLM}, objectives=("test-memory",))
    monkeypatch.setitem(registry._ARCHITECTURES, "bert-memory", arch)

    def use(layout):
        monkeypatch.setitem(objectives_module._OBJECTIVES, "test-memory", _fake_objective(layout))
    return use


def _memory_args(tokenizer, output_dir, **overrides):
    return PretrainArguments(**{**dict(
        arch="bert-memory", max_steps=6, max_documents=30, tokenizer=str(tokenizer), per_device_train_batch_size=3,
        max_seq_length=16, save_steps=3, eval_fraction=0.0, progress_bar=False, report_to_tensorboard=False,
        output_dir=str(output_dir), logging_steps=1), **overrides})


def test_contiguous_layout_feeds_each_row_its_next_segment_and_resume_restores_state(
        fake_architecture, saved_tokenizer, tmp_path):
    fake_architecture("contiguous")
    full = KeepState()
    pretrain(_memory_args(saved_tokenizer, tmp_path / "full"), callbacks=[full])
    assert full.state["breaks"] == 0 and full.state["steps"] == 6

    class Stop(PretrainCallback):
        def on_step_end(self, run, record):
            if record["step"] == 4:
                raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        pretrain(_memory_args(saved_tokenizer, tmp_path / "cut"), callbacks=[Stop()])
    resumed = KeepState()
    pretrain(_memory_args(saved_tokenizer, tmp_path / "cut", resume="latest"), callbacks=[resumed])
    # The state came back from the step-3 checkpoint: 3 saved steps + 3 resumed ones, and no broken stream.
    for key in full.state:
        assert torch.equal(resumed.state[key], full.state[key]), key


def test_shuffled_layout_breaks_the_streams(fake_architecture, saved_tokenizer, tmp_path):
    """Control for the test above: with shuffled examples the continuity check does fire."""
    fake_architecture("shuffled")
    kept = KeepState()
    pretrain(_memory_args(saved_tokenizer, tmp_path / "out", save_steps=0), callbacks=[kept])
    assert kept.state["breaks"] > 0


def test_objective_fields_are_documented():
    documented = objectives_module.__doc__
    assert documented.startswith("The pretraining objectives")
    for f in dataclasses.fields(Objective):
        if f.name not in ("name", "description", "shift_labels", "config_defaults"):
            assert f"`{f.name}`" in documented or f.name in documented, f.name
