"""`hf-xfmr distill`: help, a tiny end-to-end run from a transformers-format teacher folder, and errors."""

import json
import random
import re

import pytest
import torch
import transformers

from hf_xfmr import cli

from ..conftest import WORDS


def run(argv, capsys):
    try:
        status = cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def teacher_dir(tmp_path, wordpiece_tokenizer):
    """A transformers BertForMaskedLM checkpoint with its tokenizer, and a small text file."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(wordpiece_tokenizer), hidden_size=32, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    path = tmp_path / "teacher"
    transformers.BertForMaskedLM(config).save_pretrained(path)
    wordpiece_tokenizer.save_pretrained(path)
    rng = random.Random(0)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(60)) + "\n")
    return path, text


def test_help_documents_the_recipe_and_options(capsys):
    status, out, _ = run(["distill", "--help"], capsys)
    assert status == 0
    for word in ("--teacher", "--output", "--corpus", "--student", "--student-layers", "--layer-ids", "--temperature",
                 "--alpha-ce", "--alpha-mlm", "--alpha-cos", "--max-steps", "one layer out of two", "T^2"):
        assert word in out, word
    status, out, _ = run(["--help"], capsys)
    assert "distill" in out


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_distill_end_to_end_from_a_transformers_teacher(teacher_dir, tmp_path, capsys, one_thread):
    teacher, text = teacher_dir
    out_dir = tmp_path / "student"
    status, out, err = run(["distill", "--teacher", str(teacher), "--output", str(out_dir), "--corpus", str(text),
                            "--max-steps", "4", "--batch-size", "8", "--seq-len", "32", "--eval-sequences", "8",
                            "--student-layers", "2", "--layer-ids", "1,3"], capsys)
    assert status == 0, err
    assert "distilled xfmr-distilbert student (2 layers)" in out and "top-1 agreement" in out
    assert json.loads((out_dir / "config.json").read_text())["model_type"] == "xfmr-distilbert"
    log = json.loads((out_dir / "distill_log.json").read_text())
    assert log["teacher"] == "xfmr-bert" and len(log["history"]) == 4
    assert log["arguments"]["student_layer_ids"] == [1, 3] and log["arguments"]["alpha_ce"] == 5.0
    student = transformers.AutoModelForMaskedLM.from_pretrained(out_dir)
    reference = transformers.BertForMaskedLM.from_pretrained(teacher)
    # Only layer 3 of the teacher is compared: the student trained 4 steps from it, so it moved a little.
    moved = student.model.layers[1].attn.q_proj.weight - reference.bert.encoder.layer[3].attention.self.query.weight
    assert 0 < moved.abs().max() < 0.05


@pytest.mark.parametrize("extra,message", [
    (["--student-layers", "9"], r"deeper \(9 layers, `num_layers`\) than its teacher \(4 layers\)"),
    (["--layer-ids", "0,x"], "--layer-ids must be comma-separated integers"),
    (["--student", "nowhere"], "'nowhere' is neither 'same', 'distilbert' nor a checkpoint folder"),
    (["--temperature", "0"], "`temperature` must be > 0"),
])
def test_bad_input_exits_with_a_clear_message(teacher_dir, tmp_path, capsys, extra, message):
    teacher, text = teacher_dir
    status, _, err = run(["distill", "--teacher", str(teacher), "--output", str(tmp_path / "o"), "--corpus", str(text),
                          "--max-steps", "1", *extra], capsys)
    assert status == 2
    assert "hf-xfmr distill: error:" in err
    assert re.search(message, err), err


def test_missing_teacher_and_occupied_output(teacher_dir, tmp_path, capsys):
    status, _, err = run(["distill", "--teacher", str(tmp_path / "nope"), "--output", str(tmp_path / "o")], capsys)
    assert status == 2 and "is not a checkpoint folder (it has no config.json)" in err
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "x").write_text("x")
    teacher, _ = teacher_dir
    status, _, err = run(["distill", "--teacher", str(teacher), "--output", str(occupied)], capsys)
    assert status == 2 and "exists and is not empty" in err
