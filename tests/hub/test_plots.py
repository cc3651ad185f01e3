"""`hf_xfmr.plots`: loss curves of JSON-lines training logs (Trainer's log_history records)."""

import json

import pytest

from hf_xfmr.plots import loss_curves, plot_loss_curves, read_log

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_log(path, steps=30, eval_every=10, scale=3.0):
    with path.open("w") as f:
        for step in range(1, steps + 1):
            record = {"step": step, "loss": scale / step, "learning_rate": 1e-3, "epoch": step / steps}
            f.write(json.dumps(record) + "\n")
            if step % eval_every == 0:
                f.write(json.dumps({"step": step, "eval_loss": scale / step + 0.1, "eval_runtime": 0.2}) + "\n")
        f.write("\n")  # blank lines are fine
        f.write(json.dumps({"step": steps, "train_runtime": 4.2, "train_loss": 0.5}) + "\n")
    return path


def test_curves_split_training_and_evaluation_losses(tmp_path):
    records = read_log(_write_log(tmp_path / "run.jsonl"))
    curves = loss_curves(records, "run")
    assert len(curves.train) == 30 and curves.train[0] == (1, 3.0)
    assert [s for s, _ in curves.eval] == [10, 20, 30]
    assert curves.last_step == 30
    assert curves.final_train_loss == pytest.approx(0.1) and curves.final_eval_loss == pytest.approx(0.2)


def test_plot_one_or_several_logs_to_png(tmp_path):
    a = _write_log(tmp_path / "a.jsonl")
    b = _write_log(tmp_path / "b.jsonl", steps=20, eval_every=5, scale=2.0)
    single = plot_loss_curves(a, tmp_path / "one.png")
    assert [c.label for c in single] == ["a"]
    several = plot_loss_curves({"base": a, "large": b}, tmp_path / "plots" / "two.png", title="MLM")
    assert [c.label for c in several] == ["base", "large"]
    records = plot_loss_curves([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}], tmp_path / "records.png")
    assert records[0].train == [(1, 2.0), (2, 1.5)]
    for name in ("one.png", "plots/two.png", "records.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000


def test_bad_logs_get_clear_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is not valid JSON"):
        read_log(bad)
    bad.write_text('{"step": 1, "loss": 2.0}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is a JSON list, not an object"):
        read_log(bad)
    with pytest.raises(FileNotFoundError, match="missing.jsonl does not exist"):
        read_log(tmp_path / "missing.jsonl")
    no_loss = tmp_path / "no_loss.jsonl"
    no_loss.write_text('{"step": 1, "learning_rate": 0.1}\n{"step": 2, "loss": NaN}\n')
    with pytest.raises(ValueError, match=r"no loss to plot in no_loss.*\"step\" and \"loss\".*\"eval_loss\""):
        plot_loss_curves(no_loss, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(ValueError, match="no training log given"):
        plot_loss_curves([], tmp_path / "x.png")
