"""`hf-xfmr finetune`: help, options from a YAML file with command-line overrides, local CSV files, errors."""

import json

import pytest

from tests.cli_run import run_cli as run

from .finetune_helpers import TINY_OVERRIDES, one_thread, save_mlm_checkpoint, sentiment_rows  # noqa: F401


def write_csv(path, rows):
    path.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    return path


def test_help_lists_the_options(capsys):
    status, out, _ = run(["finetune", "--help"], capsys)
    assert status == 0
    for option in ("--model_name_or_path", "--lora", "--merge", "--push_to_hub", "--config FILE",
                   "--metric_for_best_model", "--learning-rate", "question-answering"):
        assert option in out
    assert "(default: 0.05)" in out  # lora_dropout's default is shown


def test_yaml_options_with_overrides_on_local_csv(tmp_path, capsys, wordpiece_tokenizer):
    checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer)
    train = write_csv(tmp_path / "train.csv", sentiment_rows(48, 0))
    dev = write_csv(tmp_path / "dev.csv", sentiment_rows(16, 1))
    (tmp_path / "options.yaml").write_text(
        f"model_name_or_path: {checkpoint}\ntrain_file: {train}\nvalidation_file: {dev}\nlora: true\n"
        f"merge: true\nmax_steps: 100\nlearning_rate: 5e-3\neval_steps: 2\nuse_cpu: true\n"
        f"disable_tqdm: true\nmax_seq_length: 32\noutput_dir: {tmp_path / 'ignored'}\n")
    status, out, err = run(["finetune", "--config", str(tmp_path / "options.yaml"), "--max_steps", "4",
                            "--output-dir", str(tmp_path / "out")], capsys)
    assert status == 0, err
    assert "eval_accuracy:" in out and "merged model:" in out
    saved = json.loads((tmp_path / "out" / "finetune_args.json").read_text())
    assert (saved["max_steps"], saved["learning_rate"], saved["lora"]) == (4, 5e-3, True)
    assert (tmp_path / "out" / "merged" / "model.safetensors").is_file()
    assert not (tmp_path / "ignored").exists()


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "x"], "Pass exactly one of --model_name_or_path"),
    (["--arch", "bert", "--dataset", "missing.csv"], "--dataset missing.csv does not exist"),
    (["--arch", "nope", "--train_file", "TRAIN"], "--arch: Unknown hf_xfmr architecture 'nope'"),
    (["--arch", "bert", "--train_file", "TRAIN", "--text_column", "body"], "column 'body' is not in the dataset"),
    (["--arch", "bert", "--dataset", "x", "--merge"], "it needs --lora"),
    (["--config", "OPTIONS"], "unknown option(s) lr"),
])
def test_errors_are_command_errors(tmp_path, capsys, argv, message):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(20, 0))
    (tmp_path / "options.yaml").write_text("lr: 1\n")
    argv = [a.replace("TRAIN", str(train)).replace("OPTIONS", str(tmp_path / "options.yaml")) for a in argv]
    status, _, err = run(["finetune", *argv, "--output_dir", str(tmp_path / "out"), "--config_overrides",
                          TINY_OVERRIDES], capsys)
    assert status == 2
    assert "hf-xfmr finetune: error:" in err and message in err
    assert "Traceback" not in err
