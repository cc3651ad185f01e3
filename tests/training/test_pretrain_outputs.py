"""What a pretraining run shows and leaves besides the model: the progress bar (loss, tokens/s), a log of
JSON lines only when tensorboard is not importable, the rotation of checkpoints (`--save_total_limit`),
gradient clipping, a resumed data order that starts at its position without reading the consumed batches,
and the local file formats `--dataset` reads."""

import sys

import pytest
import torch

from hf_xfmr.training import PretrainArguments, PretrainCallback, pretrain, read_log
from hf_xfmr.training.batches import BatchPlan, train_batches
from hf_xfmr.training.logs import RunLog


def test_progress_bar_and_last_k_checkpoints(saved_tokenizer, tmp_path, capsys):
    out = tmp_path / "out"
    pretrain(PretrainArguments(
        arch="bert", objective="mlm", max_steps=3, max_documents=40, tokenizer=str(saved_tokenizer),
        per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=1, save_total_limit=2,
        eval_fraction=0.1, max_eval_examples=8, progress_bar=True, report_to_tensorboard=False, output_dir=str(out)))
    bar = capsys.readouterr().err
    assert "pretraining bert (mlm)" in bar and "3/3" in bar and "loss=" in bar and "tok_s=" in bar
    # (The TensorBoard mirror is checked with TensorBoard's own reader in test_hardening2_pretrain.py.)

    # --save_total_limit 2: only the last two checkpoints stay.
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_2", "step_3"]


def test_without_tensorboard_the_log_is_json_lines_only(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` raises ImportError
    log = RunLog(tmp_path, enabled=True, tensorboard=True)
    log.write({"step": 1, "loss": 2.5})
    log.close()
    assert log.writer is None and read_log(tmp_path / "log.jsonl") == [{"step": 1, "loss": 2.5}]
    assert not (tmp_path / "tensorboard").exists()


class CountingRows(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n, self.read = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read.append(i)
        return {"input_ids": [i]}


def _collate(rows, generator):
    return {"input_ids": torch.tensor([r["input_ids"] for r in rows]),
            "noise": torch.rand(len(rows), generator=generator)}


def test_resumed_batches_start_at_their_position_without_reading_the_consumed_ones():
    plan = BatchPlan(num_examples=40, batch_size=4, world_size=1, rank=0, layout="shuffled", seed=3)
    full_rows = CountingRows(40)
    full = train_batches(full_rows, plan, _collate, start=0)
    expected = [next(full) for _ in range(14)]  # crosses the epoch boundary (10 micro-batches per epoch)

    rows = CountingRows(40)
    resumed = train_batches(rows, plan, _collate, start=11)
    got = [next(resumed) for _ in range(3)]
    for (m, batch), (m_full, batch_full) in zip(got, expected[11:]):
        assert m == m_full
        assert torch.equal(batch["input_ids"], batch_full["input_ids"]) and torch.equal(batch["noise"], batch_full["noise"])
    # Only the 3 micro-batches produced were read: nothing of the 11 consumed ones.
    assert len(rows.read) == 3 * 4
    assert sorted(rows.read) == sorted(full_rows.read[11 * 4:14 * 4])


def test_local_file_formats(tmp_path):
    import datasets

    from hf_xfmr.data import load_corpus

    texts = ["the first document", "a second one", "and a third"]
    table = datasets.Dataset.from_dict({"body": texts, "id": [1, 2, 3]})
    table.to_parquet(str(tmp_path / "part-0.parquet"))
    table.to_csv(str(tmp_path / "docs.csv"), index=False)
    table.to_json(str(tmp_path / "docs.jsonl"))
    for name in ("part-0.parquet", "docs.csv", "docs.jsonl", "part-*.parquet"):
        assert load_corpus(str(tmp_path / name), text_column="body")["text"] == texts, name
    streamed = load_corpus(str(tmp_path / "part-0.parquet"), text_column="body", streaming=True)
    assert [r["text"] for r in streamed] == texts


class GradNormAtUpdate(PretrainCallback):
    """Records the total gradient norm the optimizer sees at each update (after any clipping)."""

    def __init__(self):
        self.norms = []

    def on_train_begin(self, run):
        optimizer, step = run.optimizer, run.optimizer.step

        def recording_step(*args, **kwargs):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            self.norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))
            return step(*args, **kwargs)
        optimizer.step = recording_step


@pytest.mark.parametrize("max_grad_norm", [0.05, 0.0], ids=["clipped", "off"])
def test_gradient_clipping(saved_tokenizer, tmp_path, max_grad_norm):
    recorder = GradNormAtUpdate()
    result = pretrain(PretrainArguments(
        arch="bert", objective="mlm", max_steps=2, max_documents=40, tokenizer=str(saved_tokenizer),
        per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.0,
        progress_bar=False, report_to_tensorboard=False, max_grad_norm=max_grad_norm, output_dir=str(tmp_path / "out")),
        callbacks=[recorder])
    logged = [r["grad_norm"] for r in read_log(result.log_path) if "loss" in r]  # the norm before clipping
    assert len(recorder.norms) == 2 and all(n > 0.05 for n in logged)
    for before, at_update in zip(logged, recorder.norms):
        expected = min(before, max_grad_norm) if max_grad_norm else before
        assert at_update == pytest.approx(expected, rel=1e-4)
