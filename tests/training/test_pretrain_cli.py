"""`hf-xfmr pretrain`: options generated from PretrainArguments, YAML configs, and command-line errors."""

import pytest

from hf_xfmr.cli import main
from hf_xfmr.training import read_log


def test_pretrain_from_yaml_with_command_line_overrides(saved_tokenizer, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"arch: bert\nobjective: wwm\nmax_steps: 500\ntokenizer: {saved_tokenizer}\nmax_documents: 30\n"
                      "per_device_train_batch_size: 4\nmax_seq_length: 32\nsave_steps: 0\nprogress_bar: false\n")
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(config), "--max-steps", "3", "--logging_steps", "1",
                 "--output_dir", str(out), "--no_report_to_tensorboard", "--lr_scheduler", "wsd"]) == 0
    printed = capsys.readouterr().out
    assert "pretrained XfmrBertForMaskedLM for 3 steps on 1 process(es)" in printed
    assert [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r] == [1, 2, 3]
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    # An existing run is not overwritten without --resume / --overwrite_output_dir.
    assert main(["pretrain", "--config", str(config), "--max_steps", "3", "--output_dir", str(out)]) == 2
    assert "holds an earlier run. Pass --resume" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--objective", "clm"], "'bert' does not pretrain with 'clm'"),
    (["--max_steps", "0"], "--max_steps must be a positive integer"),
    (["--resume"], "no checkpoint in"),
])
def test_pretrain_errors_are_command_errors(tmp_path, capsys, argv, message):
    assert main(["pretrain", "--output_dir", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert "hf-xfmr pretrain: error: " in err and message in err


def test_pretrain_help_lists_architectures_objectives_and_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    assert "bert         objectives: mlm, wwm, mlm+nsp" in text
    assert "--lr_scheduler {constant,linear,cosine,wsd,1-sqrt}" in text
    assert "(default: 1000)" in text and "--resume [RESUME]" in text
