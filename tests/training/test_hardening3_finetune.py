"""Hardening 3, finetuning side. Point 4: `base_model` in metrics.json and the model card comes only from what
the user gave (the Hub repo id loaded, or --base_model), never from a stale `_name_or_path` inside a local
checkpoint's config.json; pretraining's card alike. Point 5: --max_*_samples subsets are a seeded, stratified
draw (not the first rows of data ordered by source), and the log, metrics.json and the card say so, with the
subset's majority-class baseline. Point 7a on the finetuning side: a run from a checkpoint names the weights it
adds once, without transformers' load report. (Points 6 and 7 are in tests/models/test_hardening3_loading.py.)"""

import collections
import importlib
import json
import logging
import subprocess
import sys

import pytest
from huggingface_hub import ModelCard

from hf_xfmr.hub.cards import pretrain_card_fields
from hf_xfmr.training.finetune import FinetuneArguments, subset_indices
from tests.cli_run import run_cli as run
from tests.hub.conftest import TOKEN, child_env
from tests.hub.hub_server import HubServer

from .finetune_helpers import one_thread, save_mlm_checkpoint, save_transformers_checkpoint, sentiment_rows  # noqa: F401

STALE = "nreimers/MiniLM-L6-H384-uncased"  # what the checkpoint itself was trained from, long ago
QUICK = ["--max_steps", "2", "--eval_steps", "2", "--use_cpu", "--disable_tqdm", "--max_seq_length", "16",
         "--per_device_train_batch_size", "8", "--learning_rate", "5e-3"]


def write_csv(path, rows):
    path.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    return path


@pytest.fixture
def stale_checkpoint(tmp_path, wordpiece_tokenizer):
    """A local transformers BERT folder whose config.json records the model it was trained from."""
    folder = save_transformers_checkpoint(tmp_path / "minilm-copy", wordpiece_tokenizer)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": STALE}))
    return folder


def _card(folder):
    card = ModelCard.load(folder / "README.md")
    return card.data.to_dict(), card.text


# -- point 4: provenance -------------------------------------------------------------------------------

def test_a_local_folder_gives_no_base_model_whatever_its_config_records(tmp_path, capsys, stale_checkpoint):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, 0))
    out = tmp_path / "out"
    status, _, err = run(["finetune", "--model_name_or_path", str(stale_checkpoint), "--train_file", str(train),
                          "--output_dir", str(out), *QUICK], capsys)
    assert status == 0, err
    assert json.loads((out / "metrics.json").read_text())["provenance"]["base_model"] is None
    status, _, err = run(["export", str(out / "model"), str(tmp_path / "export")], capsys)
    assert status == 0, err
    data, text = _card(tmp_path / "export")
    assert "base_model" not in data and STALE not in text
    assert "from a local checkpoint with `hf-xfmr finetune`" in text


def test_base_model_option_names_the_base_in_metrics_cards_and_the_adapter(tmp_path, capsys, stale_checkpoint):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, 0))
    out = tmp_path / "out"
    status, _, err = run(["finetune", "--model_name_or_path", str(stale_checkpoint), "--train_file", str(train),
                          "--output_dir", str(out), "--base_model", "alice/minilm", "--lora", "--merge", *QUICK],
                         capsys)
    assert status == 0, err
    assert json.loads((out / "metrics.json").read_text())["provenance"]["base_model"] == "alice/minilm"
    adapter = ModelCard.load(out / "adapter" / "README.md").data.to_dict()
    assert adapter["base_model"] == "alice/minilm" and "base_model:adapter:alice/minilm" in adapter["tags"]
    to_save = json.loads((out / "adapter" / "adapter_config.json").read_text())["modules_to_save"]
    assert len(to_save) == len(set(to_save)) and "classifier" in to_save  # (point 7c, as the command writes it)
    status, _, err = run(["export", str(out / "merged"), str(tmp_path / "export")], capsys)
    assert status == 0, err
    data, text = _card(tmp_path / "export")
    assert data["base_model"] == "alice/minilm" and STALE not in text
    # A path is no Hub id: refused before anything is loaded.
    status, _, err = run(["finetune", "--model_name_or_path", str(stale_checkpoint), "--train_file", str(train),
                          "--output_dir", str(tmp_path / "out2"), "--base_model", "./runs/minilm", *QUICK], capsys)
    assert status == 2 and "--base_model './runs/minilm' is not a Hub model id" in err
    assert not (tmp_path / "out2").exists()


HUB_CHILD = """
import json, sys, warnings
from huggingface_hub import HfApi
import hf_xfmr
from hf_xfmr import cli

settings = json.loads(open(sys.argv[1]).read())
api = HfApi()
api.create_repo("alice/minilm-copy", exist_ok=True)
api.upload_folder(repo_id="alice/minilm-copy", folder_path=settings["checkpoint"])
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the new head's ConversionWarning
    model = hf_xfmr.from_transformers("alice/minilm-copy", task="sequence-classification", num_labels=3)
with open(settings["labels"], "w") as f:  # point 6 by repo id
    json.dump({"out_features": model.classifier.out_features, "label2id": model.config.label2id}, f)
sys.exit(cli.main(["finetune", "--model_name_or_path", "alice/minilm-copy", "--train_file", settings["csv"],
                   "--output_dir", settings["out"], *settings["quick"]]))
"""


def test_a_hub_repo_id_is_the_base_model_not_the_name_its_config_records(tmp_path, tmp_path_factory,
                                                                          stale_checkpoint):
    """Through the test Hub server: the checkpoint (with the stale `_name_or_path`) is uploaded and finetuned
    by its repo id in a child process (huggingface_hub reads HF_ENDPOINT when it is imported). The child also
    converts the repo with `from_transformers(id, num_labels=3)` (point 6 for a repo id)."""
    settings = {"checkpoint": str(stale_checkpoint), "out": str(tmp_path / "out"), "quick": QUICK,
                "csv": str(write_csv(tmp_path / "train.csv", sentiment_rows(40, 0))),
                "labels": str(tmp_path / "labels.json")}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    with HubServer(tmp_path_factory.mktemp("hub-storage"), tokens={TOKEN: "alice"}) as hub:
        env = child_env(tmp_path / "hf_home", HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1")
        proc = subprocess.run([sys.executable, "-c", HUB_CHILD, str(tmp_path / "settings.json")], env=env,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["provenance"]["base_model"] == "alice/minilm-copy"
    assert json.loads((tmp_path / "labels.json").read_text()) == {
        "out_features": 3, "label2id": {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}}


def test_pretraining_card_names_only_a_given_base_model(tmp_path, stale_checkpoint):
    settings = {"model_path": str(stale_checkpoint), "max_steps": 10}
    assert "base_model" not in pretrain_card_fields(settings, {"eval_loss": 4.5}, objective="mlm")
    given = pretrain_card_fields({**settings, "base_model": "alice/minilm"}, {"eval_loss": 4.5}, objective="mlm")
    assert given["base_model"] == "alice/minilm"
    from hf_xfmr.training import PretrainArguments, pretrain

    with pytest.raises(ValueError, match=r"--base_model './runs/minilm' is not a Hub model id"):  # before training
        pretrain(PretrainArguments(arch="bert", base_model="./runs/minilm", output_dir=str(tmp_path / "pretrain")))
    assert not (tmp_path / "pretrain").exists()


# -- point 5: subsets that represent the data ----------------------------------------------------------

def test_subset_indices_are_a_seeded_stratified_draw():
    labels = [0] * 60 + [1] * 30 + [2] * 10  # ordered by label, as many files are
    picked = subset_indices(len(labels), 20, seed=42, labels=labels)
    assert len(picked) == len(set(picked)) == 20 and picked == sorted(picked)
    assert picked != list(range(20))  # not the first rows
    assert collections.Counter(labels[i] for i in picked) == {0: 12, 1: 6, 2: 2}  # every label keeps its share
    assert subset_indices(len(labels), 20, seed=42, labels=labels) == picked  # reproducible for a seed
    assert subset_indices(len(labels), 20, seed=1, labels=labels) != picked
    # Shares that do not divide evenly: the largest remainders get the rest, the total is exact.
    odd = subset_indices(len(labels), 7, seed=0, labels=labels)
    assert len(odd) == 7 and collections.Counter(labels[i] for i in odd) == {0: 4, 1: 2, 2: 1}
    plain = subset_indices(100, 20, seed=42)  # no labels (tagging, QA): a seeded shuffle
    assert len(set(plain)) == 20 and plain != list(range(20)) and plain == subset_indices(100, 20, seed=42)


def _vader_available() -> bool:
    from hf_xfmr.data.labelled import default_vader_path

    return default_vader_path().is_file()


VADER = pytest.mark.skipif(not _vader_available(), reason="the VADER ratings are not installed (`make data`)")


@VADER
def test_vader_subsets_draw_from_every_source_reproducibly(tmp_path):
    """VADER's splits are ordered by source: the first 1,000 training rows are all tweets (66% positive). The
    subsets take rows of every source, with the split's label shares, the same rows for the same seed."""
    finetune_module = importlib.import_module("hf_xfmr.training.finetune")  # the module, not the function

    def prepared(seed):
        args = FinetuneArguments(arch="bert", dataset="vader", max_train_samples=1000, max_test_samples=300,
                                 output_dir=str(tmp_path / "unused"), seed=seed)
        return finetune_module._prepare_data(args, None)

    data = prepared(42)
    full = finetune_module.load_finetune_data(FinetuneArguments(arch="bert", dataset="vader"))
    assert set(full["train"]["source"][:1000]) == {"tweets"}  # what the first rows would have been
    train, test = data.raw["train"], data.raw["test"]
    assert len(train) == 1000 and len(test) == 300 and len(data.raw["validation"]) == len(full["validation"])
    assert set(train["source"]) == {"tweets", "movies", "amazon", "nyt"}
    positive = sum(full["test"]["label"]) / len(full["test"])  # about 0.545
    assert abs(sum(test["label"]) / 300 - positive) < 0.005 and abs(sum(train["label"]) / 1000 - 0.534) < 0.005
    assert prepared(42).raw["train"]["id"] == train["id"] and prepared(1).raw["train"]["id"] != train["id"]
    assert data.subsets["train"] == {
        "examples": 1000, "of": len(full["train"]), "how": "a seeded shuffle stratified by label (seed 42)",
        "description": f"train: 1,000 of {len(full['train']):,} examples, a seeded shuffle stratified by label "
                       "(seed 42)"}
    assert set(data.subsets) == {"train", "test"}


@VADER
def test_vader_subsets_are_reported_in_the_log_metrics_and_card(tmp_path, capsys, caplog, wordpiece_tokenizer):
    wordpiece_tokenizer.save_pretrained(tmp_path / "tokenizer")
    out = tmp_path / "out"
    argv = ["finetune", "--arch", "bert", "--config_overrides", "hidden_size=32,num_hidden_layers=1,"
            "num_attention_heads=2,intermediate_size=37,max_position_embeddings=64", "--tokenizer_name_or_path",
            str(tmp_path / "tokenizer"), "--dataset", "vader", "--max_train_samples", "1000", "--max_eval_samples",
            "100", "--max_test_samples", "300", "--output_dir", str(out), *QUICK]
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
        status, printed, err = run(argv, capsys)
    assert status == 0, err
    logged = [r.getMessage() for r in caplog.records if "Using subsets of the data" in r.getMessage()]
    assert len(logged) == 1 and "train: 1,000 of 12," in logged[0] and "test: 300 of 1,520 examples" in logged[0]
    assert "subset: test: 300 of 1,520 examples, a seeded shuffle stratified by label (seed 42)" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["subsets"]) == {"train", "validation", "test"}
    assert metrics["subsets"]["test"]["examples"] == 300 and metrics["subsets"]["test"]["of"] == 1520
    majority = metrics["baseline"]["test_majority_accuracy"]
    assert majority == pytest.approx(163 / 300)  # 54.3%: the split's share (828 / 1,520), not the tweets' 68%
    status, _, err = run(["export", str(out / "model"), str(tmp_path / "export")], capsys)
    assert status == 0, err
    data, text = _card(tmp_path / "export")
    assert "Trained and evaluated on subsets of the data, so the figures are those of the subsets: train: 1,000 of " \
        "12," in text
    assert "On the test split of the VADER human-rated sentences" in text
    assert "(300 of 1,520 examples, a seeded shuffle stratified by label (seed 42)):" in text
    assert f"| majority_accuracy | {majority:.4g} |" in text
    assert "`majority_accuracy` is the test accuracy of always answering the most frequent label" in text
    assert "| test examples | 300 of 1,520 (a seeded shuffle stratified by label (seed 42)) |" in text


# -- point 7a, finetuning side: the new weights named once ------------------------------------------------

def test_finetuning_from_a_checkpoint_names_new_weights_once(tmp_path, capfd, caplog, wordpiece_tokenizer):
    """An MLM checkpoint under a classifier: the new head is what finetuning adds (not worth a word), BERT's
    pooler is new too (one warning names it); transformers' LOAD REPORT table is not printed."""
    from hf_xfmr import cli

    checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer)
    train = write_csv(tmp_path / "train.csv", sentiment_rows(40, 0))
    transformers_log = []  # (transformers' handler writes to the stream it found at import: not capfd's)
    handler = logging.Handler()
    handler.emit = lambda record: transformers_log.append(record.getMessage())
    logging.getLogger("transformers.modeling_utils").addHandler(handler)
    try:
        with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
            status = cli.main(["finetune", "--model_name_or_path", str(checkpoint), "--train_file", str(train),
                               "--output_dir", str(tmp_path / "out"), *QUICK])
    finally:
        logging.getLogger("transformers.modeling_utils").removeHandler(handler)
    captured = capfd.readouterr()
    assert status == 0, captured.err
    shown = captured.err + captured.out + "".join(transformers_log)
    assert "LOAD REPORT" not in shown and "MISSING" not in shown
    named = [r.getMessage() for r in caplog.records if "has no weights for" in r.getMessage()]
    assert named == [f"{checkpoint} has no weights for model.pooler.dense (outside the task head): they start from "
                     "random values and are trained."]


def test_no_pinned_memory_without_a_gpu(tmp_path, wordpiece_tokenizer, recwarn):
    """Trainer pins memory by default, which on a CPU-only machine is unused and makes torch warn ('pin_memory'
    argument is set as true but no accelerator is found) at every run: finetune pins only for a GPU."""
    import torch

    from hf_xfmr.training.finetune import finetune

    from .finetune_helpers import quick_args, sentiment_dataset

    result = finetune(quick_args(tmp_path, max_steps=1, eval_steps=1), dataset=sentiment_dataset(train=16, validation=8),
                      tokenizer=wordpiece_tokenizer)
    assert result.trainer.args.dataloader_pin_memory is torch.cuda.is_available()
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]
