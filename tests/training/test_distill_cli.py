"""`hf-xfmr distill`: help, a tiny end-to-end run from a transformers-format teacher folder, both spellings of
every option, --text_column, the student folder in a pipeline, and errors."""

import copy
import dataclasses

import json
import random
import re

import pytest
import torch
import transformers

from hf_xfmr import cli
from tests.cli_run import run_cli as run

from ..conftest import WORDS


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, wordpiece_tokenizer):
    """A transformers BertForMaskedLM checkpoint with its tokenizer (which emits token_type_ids, as BERT's
    does), and a small text file. Tests only read it."""
    tmp_path = tmp_path_factory.mktemp("distill")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(wordpiece_tokenizer), hidden_size=32, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    path = tmp_path / "teacher"
    transformers.BertForMaskedLM(config).save_pretrained(path)
    tokenizer = copy.copy(wordpiece_tokenizer)  # with the inputs of transformers' BertTokenizer
    names = ["input_ids", "token_type_ids", "attention_mask"]
    tokenizer.model_input_names, tokenizer.init_kwargs = names, {**tokenizer.init_kwargs, "model_input_names": names}
    tokenizer.save_pretrained(path)
    rng = random.Random(0)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(60)) + "\n")
    return path, text


def test_help_documents_the_recipe_and_options(capsys):
    status, out, _ = run(["distill", "--help"], capsys)
    assert status == 0
    for word in ("--teacher", "--output", "--corpus", "--text_column", "--student", "--student-layers", "--layer-ids",
                 "--temperature", "--alpha-ce", "--alpha-mlm", "--alpha-cos", "--max-steps", "one layer out of two",
                 "T^2"):
        assert word in out, word
    status, out, _ = run(["--help"], capsys)
    assert "distill" in out


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
    (["--student-layers", "9"], r"deeper \(9 layers, `num_layers` / --student_layers\) than its teacher \(4 layers\)"),
    (["--layer-ids", "0,x"], "--student_layer_ids must be comma-separated integers"),
    (["--student", "nowhere"], "'nowhere' is neither 'same', 'distilbert' nor a checkpoint folder"),
    (["--temperature", "0"], r"`temperature` \(--temperature\) must be > 0"),
    (["--max_seq_length", "2"], "--max_seq_length 2 is too short"),
    (["--text_column", "body"], r"Column 'body' not found in the corpus .*--text_column \(Python: text_column=\)"),
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


def test_every_option_takes_both_spellings(capsys):
    """Each DistillArguments field (but `progress`) is an option, spelled with underscores or dashes as
    pretrain/finetune options are; the earlier short names (--output, --seq-len, ...) still work."""
    from hf_xfmr.training.distill import DistillArguments

    parser = cli.build_parser()
    actions = {a.dest: a for a in parser._subparsers._group_actions[0].choices["distill"]._actions}
    for field in dataclasses.fields(DistillArguments):
        if field.name == "progress":
            continue
        flags = actions[field.name].option_strings
        assert f"--{field.name}" in flags and f"--{field.name.replace('_', '-')}" in flags, field.name
    common = ["distill", "--teacher", "T"]
    underscored = parser.parse_args(common + ["--output_dir", "O", "--text_column", "body", "--max_steps", "3",
                                              "--student_layer_ids", "0,2", "--learning_rate", "0.1",
                                              "--overwrite_output_dir"])
    dashed = parser.parse_args(common + ["--output-dir", "O", "--text-column", "body", "--max-steps", "3",
                                         "--student-layer-ids", "0,2", "--learning-rate", "0.1",
                                         "--overwrite-output-dir"])
    short = parser.parse_args(common + ["--output", "O", "--text-column", "body", "--max-steps", "3",
                                        "--layer-ids", "0,2", "--lr", "0.1", "--overwrite"])
    for parsed in (dashed, short):
        assert {k: v for k, v in vars(parsed).items() if k != "func"} == \
            {k: v for k, v in vars(underscored).items() if k != "func"}
    assert (underscored.output_dir, underscored.text_column, underscored.max_steps) == ("O", "body", 3)
    assert not hasattr(underscored, "batch_size")  # left out: DistillArguments' default applies


def test_text_column_names_the_corpus_column(teacher_dir, tmp_path, capsys, one_thread):
    teacher, _ = teacher_dir
    rows = [{"content": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(20)), "id": i} for i in range(30)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = ["distill", "--teacher", str(teacher), "--corpus", str(corpus), "--max_steps", "1", "--batch_size", "4",
              "--max_seq_length", "16", "--eval_sequences", "0", "--student_layers", "1"]
    status, _, err = run(common + ["--output_dir", str(tmp_path / "a")], capsys)
    assert status == 2
    assert "Column 'text' not found in the corpus (columns: ['content', 'id'])" in err and "--text_column" in err
    status, out, err = run(common + ["--output-dir", str(tmp_path / "b"), "--text-column", "content"], capsys)
    assert status == 0, err
    log = json.loads((tmp_path / "b" / "distill_log.json").read_text())
    assert log["arguments"]["text_column"] == "content" and len(log["history"]) == 1


def test_distilled_student_folder_works_in_a_fill_mask_pipeline(teacher_dir, tmp_path, capsys, one_thread):
    """The teacher's BERT tokenizer emits token_type_ids; the DistilBERT student's saved copy must not (the
    student takes none), so the folder works in `pipeline("fill-mask")` as it is."""
    teacher, text = teacher_dir
    assert "token_type_ids" in transformers.AutoTokenizer.from_pretrained(teacher)("a", "b")
    out_dir = tmp_path / "student"
    status, _, err = run(["distill", "--teacher", str(teacher), "--output_dir", str(out_dir), "--corpus", str(text),
                          "--max_steps", "1", "--batch_size", "4", "--max_seq_length", "16", "--eval_sequences", "0"],
                         capsys)
    assert status == 0, err
    saved = json.loads((out_dir / "tokenizer_config.json").read_text())
    assert saved["model_input_names"] == ["input_ids", "attention_mask"]
    fill = transformers.pipeline("fill-mask", model=str(out_dir), device="cpu")
    predictions = fill("the cat [MASK] the dog", top_k=3)
    assert len(predictions) == 3 and all(p["sequence"].startswith("the cat") for p in predictions)
