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


class FirstBatches(PretrainCallback):
    """Keeps a copy of each micro-batch and its real-token count."""

    def __init__(self):
        self.batches, self.tokens = [], []

    def on_micro_batch(self, run, batch):
        from hf_xfmr.training.batches import count_tokens

        self.batches.append({k: v.clone() for k, v in batch.items()})
        self.tokens.append(count_tokens(batch))


def test_the_log_reports_model_flops_and_mfu(saved_tokenizer, tmp_path, capsys):
    """Each training record carries the step's model FLOPs (counted on the first micro-batch: its forward and
    backward, per real token), their rate and its fraction of the given peak; the progress bar shows the MFU."""
    from hf_xfmr.machine import flop_counter

    seen = FirstBatches()
    result = pretrain(PretrainArguments(
        arch="bert", objective="mlm", max_steps=3, max_documents=40, tokenizer=str(saved_tokenizer),
        per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.0,
        progress_bar=True, report_to_tensorboard=False, output_dir=str(tmp_path / "out"), peak_tflops=0.5),
        callbacks=[seen])
    assert "mfu=" in capsys.readouterr().err
    records = [r for r in read_log(result.log_path) if "loss" in r]
    assert len(records) == 3 and len(seen.tokens) == 3  # one micro-batch per step

    # The reference count: the same first micro-batch, forward and backward, through a model of the same shape.
    model = result.model.train()
    with flop_counter() as counter:
        model(**seen.batches[0]).loss.backward()
    per_token = counter.get_total_flops() / seen.tokens[0]
    assert per_token > 6 * sum(p.numel() for n, p in model.named_parameters() if "encoder" in n and p.dim() == 2)
    for record, tokens in zip(records, seen.tokens):
        assert record["flops_per_step"] == pytest.approx(per_token * tokens, rel=1e-9)
        # one window = one step: FLOP/s over tokens/s is the step's FLOPs over its tokens
        assert record["flops_per_second"] / record["tokens_per_second"] == pytest.approx(per_token, rel=1e-9)
        assert record["mfu"] == pytest.approx(record["flops_per_second"] / 0.5e12, rel=1e-12)


def test_the_peak_is_probed_once_per_machine(saved_tokenizer, tmp_path, monkeypatch):
    """Without --peak_tflops the run divides by the cached matmul probe of the run's dtype, measured once (also when
    it was measured on a busy machine). The probe draws random matrices, on a forked RNG: the run that probes trains
    as the one that reads the cache (dropout on)."""
    from hf_xfmr import machine

    monkeypatch.setenv("HF_XFMR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(machine.PEAK_ENV, raising=False)
    probes = []

    def fake_probe(dtype, *, device, size):
        probes.append((dtype, device))
        torch.randn(64)  # as the real probe draws its matrices
        return {"gflops": 20.0, "size": 256, "seconds": 0.01, "busy": True}

    monkeypatch.setattr(machine, "probe_matmul", fake_probe)
    losses = []
    for run in ("first", "second"):
        result = pretrain(PretrainArguments(
            arch="bert", objective="mlm", max_steps=1, max_documents=40, tokenizer=str(saved_tokenizer), seed=3,
            per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.0,
            progress_bar=False, report_to_tensorboard=False, output_dir=str(tmp_path / run)))
        (record,) = read_log(result.log_path)
        assert record["mfu"] == pytest.approx(record["flops_per_second"] / 20e9, rel=1e-12)
        losses.append(record["loss"])
    assert probes == [(torch.float32, "cpu")]
    assert losses[0] == losses[1]


def test_the_flops_and_mfu_reach_tensorboard(tmp_path):
    scalars = {}

    class Writer:
        def add_scalar(self, tag, value, step):
            scalars[tag] = (value, step)

    log = RunLog(tmp_path, enabled=True, tensorboard=False)
    log.writer = Writer()
    log.write({"step": 4, "loss": 2.0, "flops_per_step": 3e9, "flops_per_second": 1.5e9, "mfu": 0.25})
    assert scalars["train/flops_per_step"] == (3e9, 4) and scalars["train/mfu"] == (0.25, 4)
    assert scalars["train/flops_per_second"] == (1.5e9, 4)
