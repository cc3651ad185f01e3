"""Hardening 2, finetuning side: rows without text, one weights check for every command, the non-finite
loss policy, --output_dir naming a file, adapter folders given to export, the adapter's load report, and
the model card of a finetuning run (base model, LoRA, metrics)."""

import json
import logging

import pytest
import torch

from tests.cli_run import run_cli as run
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file

from hf_xfmr import cli
from hf_xfmr.training.finetune import load_adapter_model
from hf_xfmr.training.finetune_tasks import FinetuneError, rows_without_text

from .finetune_helpers import one_thread, save_mlm_checkpoint, sentiment_rows  # noqa: F401

QUICK = ["--max_steps", "2", "--eval_steps", "2", "--use_cpu", "--disable_tqdm", "--max_seq_length", "16",
         "--per_device_train_batch_size", "8", "--learning_rate", "5e-3"]




def write_csv(path, rows, extra_lines=""):
    path.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows) + extra_lines)
    return path


@pytest.fixture
def checkpoint(tmp_path, wordpiece_tokenizer):
    return save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer)


@pytest.fixture
def train_csv(tmp_path):
    return write_csv(tmp_path / "train.csv", sentiment_rows(40, 0))


def finetune_argv(checkpoint, train_csv, out, *extra):
    return ["finetune", "--model_name_or_path", str(checkpoint), "--train_file", str(train_csv),
            "--output_dir", str(out), *QUICK, *extra]


# -- point 4: rows without text ------------------------------------------------------------------

def test_rows_with_an_empty_text_cell_are_skipped_and_counted(tmp_path, capsys, caplog, checkpoint):
    # Row 40 has a label but no text, row 41 is blank: an empty CSV cell reads as None, not "".
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, 0), extra_lines=",positive\n,\n")
    dev = write_csv(tmp_path / "dev.csv", sentiment_rows(8, 1), extra_lines=",negative\n")
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
        status, out, err = run(finetune_argv(checkpoint, train, tmp_path / "out", "--validation_file", str(dev)),
                               capsys)
    assert status == 0, err
    warnings = [r.getMessage() for r in caplog.records if r.name == "hf_xfmr.training.finetune"]
    assert "Skipped 2 of 42 rows of split 'train': no text in column(s) text (row indices 40, 41;" in warnings[0]
    assert "Skipped 1 of 9 rows of split 'validation'" in warnings[1] and "row indices 8;" in warnings[1]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["eval"]["eval_samples_per_second"] > 0 and "eval_accuracy:" in out
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


def test_a_split_without_any_text_or_a_column_of_numbers_is_an_error(tmp_path, capsys, checkpoint):
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n,positive\n,negative\n,positive\n")
    status, _, err = run(finetune_argv(checkpoint, empty, tmp_path / "out"), capsys)
    assert status == 2 and "Split 'train' has no row with a value in column(s) text: every one is empty" in err
    numbers = tmp_path / "numbers.csv"
    numbers.write_text("id,text,label\n" + "".join(f"{i},{i * 7},{['a', 'b'][i % 2]}\n" for i in range(12)))
    status, _, err = run(finetune_argv(checkpoint, numbers, tmp_path / "out2"), capsys)
    assert status == 2 and "column 'text' holds int values (e.g. 0), not text; name the column" in err
    assert "--text_column" in err and "this is a bug" not in err


def test_rows_without_text_checks_word_lists_for_tagging():
    import datasets

    split = datasets.Dataset.from_list([{"tokens": ["a", "b"]}, {"tokens": None}, {"tokens": []}])
    assert rows_without_text(split, {"tokens": "tokens_column"}, "train", word_lists=True) == [1]
    texts = datasets.Dataset.from_list([{"words": "a b"}])
    with pytest.raises(FinetuneError, match="holds str values .* not a list of words; .* --tokens_column"):
        rows_without_text(texts, {"words": "tokens_column"}, "train", word_lists=True)


# -- point 5: one weights check -------------------------------------------------------------------

def test_a_truncated_checkpoint_gets_the_same_message_in_finetune_and_distill(tmp_path, capsys, checkpoint,
                                                                               train_csv):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    expected = f"{weights} is not a valid safetensors file"
    status, _, err = run(finetune_argv(checkpoint, train_csv, tmp_path / "out"), capsys)
    assert status == 2 and expected in err and "probably truncated or empty" in err, err
    assert "this is a bug" not in err and not (tmp_path / "out" / "model").exists()
    status, _, err = run(["distill", "--teacher", str(checkpoint), "--output", str(tmp_path / "student"),
                          "--max-steps", "1"], capsys)
    assert status == 2 and expected in err and "probably truncated or empty" in err, err
    assert "this is a bug" not in err


# -- point 6: non-finite losses -------------------------------------------------------------------

def test_nan_weights_stop_finetuning_with_the_step_and_save_nothing(tmp_path, capsys, checkpoint, train_csv):
    weights = checkpoint / "model.safetensors"
    save_file({k: torch.full_like(v, float("nan")) for k, v in load_file(str(weights)).items()}, str(weights),
              metadata={"format": "pt"})
    status, _, err = run(finetune_argv(checkpoint, train_csv, tmp_path / "out"), capsys)
    assert status == 1, err
    assert "hf-xfmr finetune: error: The training loss is not finite (NaN or inf) at step 1; no model was saved." in err
    assert "The model's weights hold NaN/inf values before any update" in err and "--nan_policy skip" in err
    assert "this is a bug" not in err and "Traceback" not in err
    out = tmp_path / "out"
    assert not (out / "model").exists() and not (out / "metrics.json").exists()


def test_nan_policy_skip_drops_the_batch_and_keeps_training(tmp_path, monkeypatch, wordpiece_tokenizer):
    """A batch whose loss is NaN gives no update with --nan_policy skip: the weights stay finite and the
    run finishes, counting it. (Without the skip, its NaN gradient would make every weight NaN.)"""
    import importlib

    from hf_xfmr.training.finetune import finetune

    finetune_module = importlib.import_module("hf_xfmr.training.finetune")  # the module, not the function

    from .finetune_helpers import quick_args, sentiment_dataset

    real_preflight = finetune_module._preflight
    poisoned = []

    def preflight(model, *args, **kwargs):  # after it, make the first training forward's logits NaN
        real_preflight(model, *args, **kwargs)

        def hook(module, inputs, output):
            if module.training and not poisoned:
                poisoned.append(True)
                return output + float("nan")
        model.classifier.register_forward_hook(hook)

    monkeypatch.setattr(finetune_module, "_preflight", preflight)
    result = finetune(quick_args(tmp_path, nan_policy="skip", max_steps=4, eval_steps=4),
                      dataset=sentiment_dataset(train=64, validation=16), tokenizer=wordpiece_tokenizer)
    assert poisoned and result.metrics["train"]["skipped_batches"] == 1
    assert all(bool(torch.isfinite(p).all()) for p in result.model.parameters())
    assert torch.isfinite(torch.tensor(result.metrics["eval"]["eval_loss"]))


def test_nan_policy_is_checked(tmp_path):
    from .finetune_helpers import quick_args

    with pytest.raises(FinetuneError, match="--nan_policy must be stop or skip, got 'ignore'"):
        quick_args(tmp_path, nan_policy="ignore")


# -- point 9: --output_dir naming a file ----------------------------------------------------------

def test_output_dir_that_is_a_file_is_named_as_such(tmp_path, capsys, checkpoint, train_csv):
    target = tmp_path / "a_file"
    target.write_text("x")
    for extra in ([], ["--overwrite_output_dir"]):
        status, _, err = run(finetune_argv(checkpoint, train_csv, target, *extra), capsys)
        assert status == 2 and f"--output_dir {target} is a file, not a folder: choose another path." in err
    status, _, err = run(["distill", "--teacher", str(checkpoint), "--output", str(target), "--max-steps", "1"],
                         capsys)
    assert status == 2 and f"{target} is a file, not a folder: choose another path." in err
    assert target.read_text() == "x"


# -- points 14 and 16: a LoRA run from a Hub checkpoint, its adapter and its card ------------------

@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, wordpiece_tokenizer):
    """A LoRA + merge run whose base checkpoint sits in the Hugging Face cache layout (so it has a Hub id)."""
    tmp = tmp_path_factory.mktemp("lora_run")
    base = save_mlm_checkpoint(tmp / "hub" / "models--alice--tiny-bert" / "snapshots" / "0123abcd", wordpiece_tokenizer)
    train = write_csv(tmp / "train.csv", sentiment_rows(40, 0))
    out = tmp / "out"
    threads = torch.get_num_threads()  # (the one_thread fixture is per test)
    torch.set_num_threads(1)
    try:
        status = cli.main(finetune_argv(base, train, out, "--lora", "--merge", "--lora_dropout", "0"))
    finally:
        torch.set_num_threads(threads)
    assert status == 0
    return {"base": base, "out": out, "tmp": tmp}


def test_exporting_an_adapter_folder_points_at_merged(lora_run, capsys):
    out = lora_run["out"]
    status, _, err = run(["export", str(out / "adapter"), str(lora_run["tmp"] / "export-adapter")], capsys)
    assert status == 2, err
    assert f"{out / 'adapter'} is a PEFT (LoRA) adapter folder (adapter_config.json), not a complete model" in err
    assert f"Use the merged model {out / 'merged'}" in err and "merge_and_unload()" in err
    assert "no file named model.safetensors" not in err


def test_adapter_folder_without_merged_points_at_merge(tmp_path):
    from hf_xfmr.models.weights import MissingWeightsError, check_weight_files

    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with pytest.raises(MissingWeightsError, match=r"rerun `hf-xfmr finetune` with --lora --merge"):
        check_weight_files(tmp_path / "adapter")


def test_adapter_load_report_lists_no_restored_module(lora_run, capfd, caplog):
    adapter = lora_run["out"] / "adapter"
    with caplog.at_level(logging.WARNING):
        model = load_adapter_model(adapter)
    captured = capfd.readouterr()
    logged = captured.err + captured.out + caplog.text
    assert "LOAD REPORT" not in logged and "MISSING" not in logged and "randomly initialised" not in logged
    assert "not sharded" not in logged  # (transformers' tensor-parallel check, logged when its logger is raised)
    # The head really is restored: it equals the merged model's.
    restored = dict(model.get_base_model().named_parameters())
    saved = load_file(str(lora_run["out"] / "merged" / "model.safetensors"))
    torch.testing.assert_close(restored["classifier.modules_to_save.default.weight"], saved["classifier.weight"])


def test_adapter_load_names_weights_that_neither_holds(lora_run, tmp_path, caplog):
    import shutil

    base = tmp_path / "base"
    shutil.copytree(lora_run["base"], base)
    weights = load_file(str(base / "model.safetensors"))
    dropped = next(key for key in weights if key.startswith("model.") and key.endswith("norm.weight"))
    del weights[dropped]
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
        load_adapter_model(lora_run["out"] / "adapter", base_model_name_or_path=str(base))
    warned = [r.getMessage() for r in caplog.records if r.name == "hf_xfmr.training.finetune"]
    assert len(warned) == 1 and "1 weight(s) are neither in the base model" in warned[0]
    assert warned[0].endswith(f"randomly initialised: {dropped}")


def test_card_of_a_lora_run_names_base_model_lora_and_metrics(lora_run, capsys):
    out = lora_run["out"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["provenance"]["base_model"] == "alice/tiny-bert"
    folder = lora_run["tmp"] / "export-merged"
    status, _, err = run(["export", str(out / "merged"), str(folder)], capsys)
    assert status == 0, err
    card = ModelCard.load(folder / "README.md")
    data = card.data.to_dict()
    assert data["base_model"] == "alice/tiny-bert" and "license" not in data
    assert "lora" in data["tags"] and "model-index" not in data  # local data: no Hub dataset to index
    accuracy = metrics["eval"]["eval_accuracy"]
    assert "No evaluation results were given" not in card.text
    assert "On the validation split of local data (`train.csv`):" in card.text
    assert f"| accuracy | {accuracy:.4g} |" in card.text
    assert "Finetuned with LoRA (r=8, alpha=16; adapters merged into the weights) from `alice/tiny-bert`" in card.text
    assert (folder / "loss_curve.png").is_file()  # the run's log_history.jsonl
    # An option given wins over the run's value.
    status, _, err = run(["export", str(out / "merged"), str(lora_run["tmp"] / "export-2"), "--base-model",
                          "bob/other", "--license", "mit"], capsys)
    data = ModelCard.load(lora_run["tmp"] / "export-2" / "README.md").data.to_dict()
    assert status == 0 and data["base_model"] == "bob/other" and data["license"] == "mit"


def test_adapter_card_names_the_hub_base_model_not_the_local_folder(lora_run):
    data = ModelCard.load(lora_run["out"] / "adapter" / "README.md").data.to_dict()
    assert data["base_model"] == "alice/tiny-bert" and data["library_name"] == "peft"
    assert "base_model:adapter:alice/tiny-bert" in data["tags"] and "lora" in data["tags"]
    assert not any(str(lora_run["base"]) in tag for tag in data["tags"])
