"""`distill` on the pretraining loop (`Pretrainer`): the same student as the loop it replaced, exact resume from a
mid-run checkpoint, the loop's log with the loss terms, and a checkpoint refused with another teacher."""

import json
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file

from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM
from hf_xfmr.training import read_log
from hf_xfmr.training.checkpoint import CheckpointError
from hf_xfmr.training.distill import DistillArguments, DistillBatches, distill

from ..conftest import WORDS

# Recorded with the loop `distill` ran before it moved onto the Pretrainer (its own AdamW, schedule and
# batches), on `_run_arguments()` below: per step (loss, ce, mlm, cos), and the agreement before and after.
RECORDED = [[28.308218, 2.862049, 6.59978, 0.798414], [26.899513, 2.600384, 6.534955, 0.827685],
            [23.0724, 1.850973, 6.652705, 0.512125], [18.938128, 1.039837, 6.72439, 0.290161],
            [17.899879, 1.029446, 6.229699, 0.293253], [17.214661, 0.918444, 6.173856, 0.274729],
            [18.106885, 1.082548, 6.205459, 0.283229], [16.595115, 0.949062, 5.796295, 0.257215]]
RECORDED_AGREEMENT = (0.16025641025641027, 0.04487179487179487)
RECORDED_WEIGHT_SUM = 223.85324914322337  # the old loop's per-tensor AdamW; the shared loop's fused AdamW
WEIGHT_SUM_RTOL = 2e-6  # rounds differently: 8.3e-7 relative measured after the 8 steps


def _teacher(vocab_size, seed=0):
    torch.manual_seed(seed)
    config = XfmrBertConfig.from_preset("tiny", vocab_size=vocab_size, num_hidden_layers=4, max_position_embeddings=64,
                                        initializer_range=0.3)
    return XfmrBertForMaskedLM(config).eval()


def _run_arguments(tok, **overrides):
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))) + "." for _ in range(60)]
    settings = dict(teacher=_teacher(len(tok)), tokenizer=tok, corpus=corpus, max_seq_length=32, max_steps=8,
                    batch_size=8, gradient_accumulation_steps=2, warmup_ratio=0.25, learning_rate=1e-2,
                    eval_sequences=8, seed=3, progress=False)
    return DistillArguments(**{**settings, **overrides})


def test_the_shared_loop_trains_the_student_the_old_loop_trained(wordpiece_tokenizer, one_thread):
    result = distill(_run_arguments(wordpiece_tokenizer))
    terms = [[h[k] for k in ("loss", "ce", "mlm", "cos")] for h in result.history]
    torch.testing.assert_close(torch.tensor(terms, dtype=torch.float64), torch.tensor(RECORDED, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    assert (result.agreement_before, result.agreement_after) == pytest.approx(RECORDED_AGREEMENT, abs=1e-9)
    weight_sum = float(sum(p.detach().double().sum() for p in result.student.parameters()))
    assert weight_sum == pytest.approx(RECORDED_WEIGHT_SUM, rel=WEIGHT_SUM_RTOL)
    # The history's lr is the schedule's value after each step: linear warmup over 2 steps, then decay to 0.
    assert [h["lr"] for h in result.history] == pytest.approx([5e-3, 1e-2, 1e-2 * 5 / 6, 1e-2 * 4 / 6, 1e-2 * 3 / 6,
                                                               1e-2 * 2 / 6, 1e-2 / 6, 0.0])


def test_resuming_a_mid_run_checkpoint_equals_the_uninterrupted_run(wordpiece_tokenizer, tmp_path, one_thread):
    tok = wordpiece_tokenizer
    full = tmp_path / "full"
    distill(_run_arguments(tok, output_dir=str(full), max_steps=6, save_steps=3, save_total_limit=None,
                           logging_steps=1))
    step3 = full / "checkpoints" / "step_3"
    assert (step3 / "model" / "model.safetensors").is_file() and (step3 / "distill_history.json").is_file()
    saved = load_file(str(step3 / "model" / "model.safetensors"))
    assert saved and all(name.startswith("student.") for name in saved)  # the teacher is not checkpointed

    resumed = tmp_path / "resumed"
    shutil.copytree(step3, resumed / "checkpoints" / "step_3")
    result = distill(_run_arguments(tok, output_dir=str(resumed), max_steps=6, save_steps=3, resume="latest"))
    a, b = load_file(str(full / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    log_a = json.loads((full / "distill_log.json").read_text())
    log_b = json.loads((resumed / "distill_log.json").read_text())
    assert log_b["history"] == log_a["history"] == result.history and len(result.history) == 6
    assert log_b["agreement_after"] == log_a["agreement_after"]

    # The loop's own log: one line per --logging_steps with the loss terms, and the final agreement.
    records = read_log(full / "log.jsonl")
    steps = [r for r in records if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 7))
    assert all({"ce", "mlm", "cos", "learning_rate", "grad_norm"} <= set(r) for r in steps)
    assert steps[-1]["ce"] == pytest.approx(log_a["history"][-1]["ce"], abs=1e-6)
    assert [r["eval_top1_agreement"] for r in records if "eval_top1_agreement" in r] == [log_a["agreement_after"]]


def test_a_checkpoint_resumes_only_with_its_own_teacher(wordpiece_tokenizer, tmp_path, one_thread):
    tok = wordpiece_tokenizer
    out = tmp_path / "run"
    distill(_run_arguments(tok, output_dir=str(out), max_steps=2, save_steps=1, eval_sequences=0))
    other = _run_arguments(tok, output_dir=str(out), max_steps=4, resume=str(out / "checkpoints" / "step_1"),
                           teacher=_teacher(len(tok), seed=1), eval_sequences=0)
    with pytest.raises(CheckpointError, match="teacher"):
        distill(other)
    with pytest.raises(FileExistsError, match="--resume"):  # a used folder without --resume
        distill(_run_arguments(tok, output_dir=str(out), max_steps=4, eval_sequences=0))


def test_distill_batches_continue_from_their_state():
    """Batches drawn after restoring `state()` equal those of the uninterrupted stream, across pass boundaries."""
    sequences = [[2, 5 + i, 6 + i, 3] for i in range(11)]

    def stream(state=None, world=1, rank=0):
        masks, order = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)

        def collate(rows, masks=masks):
            ids = torch.tensor([r["input_ids"] for r in rows])
            return {"input_ids": ids, "noise": torch.rand(ids.shape, generator=masks)}
        return DistillBatches(sequences, collate, masks, order, 3, world, rank, state)

    whole = stream()
    batches = [next(it) for it in [iter(whole)] for _ in range(9)]
    head = stream()
    it = iter(head)
    for _ in range(4):  # 3 batches per pass of 11 sequences: stop inside the second pass
        next(it)
    state = json.loads(json.dumps(head.state()))  # as a checkpoint stores it
    rest = iter(stream(state))
    for m, batch in batches[4:]:
        m2, batch2 = next(rest)
        assert m2 == m and all(torch.equal(batch[k], batch2[k]) for k in batch)
    assert whole.epoch == 2  # 9 batches: the third pass (epoch 2) has just given its last one
    # Two processes share each global batch of 6 rows: disjoint halves of the same permutation.
    first = [next(iter(stream(world=2, rank=r)))[1]["input_ids"] for r in (0, 1)]
    rows = {tuple(row.tolist()) for half in first for row in half}
    assert len(rows) == 6
    with pytest.raises(ValueError, match="fewer than one global batch"):
        DistillBatches(sequences[:5], None, torch.Generator(), torch.Generator(), 3, 2, 0)
