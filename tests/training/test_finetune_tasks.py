"""Finetuning pieces without training: metrics, label mapping, tokenization and QA offsets, data loading,
LoRA targets on every architecture, and the errors bad input gets."""

import json

import datasets
import numpy as np
import pytest

import hf_xfmr.models
from hf_xfmr.models import architectures
from hf_xfmr.training.finetune import (
    DEFAULT_LORA_TARGETS,
    FinetuneArguments,
    apply_lora,
    expert_parameters,
    finetune,
    head_modules,
    load_finetune_data,
    lora_targets,
)
from hf_xfmr.training.finetune_tasks import (
    FinetuneError,
    answer_f1,
    classification_metrics,
    label_mapping,
    postprocess_qa,
    qa_metrics,
    tagging_metrics,
    tokenize_qa,
    tokenize_tagging,
)

from .finetune_helpers import one_thread, qa_rows, quick_args, save_mlm_checkpoint, sentiment_dataset  # noqa: F401

FINETUNE_HEADS = ("sequence-classification", "token-classification", "question-answering")


# -- metrics ----------------------------------------------------------------------------------------

def test_classification_metrics_by_hand():
    predictions, labels = np.array([0, 1, 1, 2, 2, 2]), np.array([0, 1, 2, 2, 2, 0])
    metrics = classification_metrics(predictions, labels)
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    # per class F1: class 0: tp1 fp0 fn1 -> 2/3; class 1: tp1 fp1 fn0 -> 2/3; class 2: tp2 fp1 fn1 -> 2/3
    assert metrics["f1"] == pytest.approx(2 / 3)


def test_tagging_metrics_ignore_padding_and_score_entities():
    labels = np.array([[-100, 1, 0, 1, -100], [-100, 0, 0, 1, -100]])  # tag 1 = "O"
    predictions = np.array([[0, 1, 0, 0, 0], [1, 0, 1, 1, 0]])
    metrics = tagging_metrics(predictions, labels, outside_id=1)
    assert metrics["accuracy"] == pytest.approx(4 / 6)
    # entity (non-O) tokens: gold 3, predicted 3, correct 2 -> F1 = 2 * 2 / (3 + 3)
    assert metrics["f1"] == pytest.approx(2 / 3)
    assert tagging_metrics(predictions, labels, outside_id=None)["f1"] == metrics["macro_f1"]


def test_qa_metrics_follow_squad_normalisation():
    assert answer_f1("The Red house", "red house!") == 1.0
    assert answer_f1("red cat", "red dog") == pytest.approx(0.5)
    metrics = qa_metrics(["the red", "blue sky", ""], [["Red"], ["green", "blue"], ["x"]])
    assert metrics["exact_match"] == pytest.approx(100 / 3)
    assert metrics["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)


# -- labels -----------------------------------------------------------------------------------------

def test_label_mapping_for_names_ids_and_classlabels():
    names = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"y": ["pos", "neg", "pos"]}),
                                  "validation": datasets.Dataset.from_dict({"y": ["neg"]})})
    assert label_mapping(names, "y") == (["neg", "pos"], {"neg": 0, "pos": 1})
    ids = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"y": [5, 3, 5]})})
    assert label_mapping(ids, "y") == (["3", "5"], {3: 0, 5: 1})
    features = datasets.Features({"y": datasets.ClassLabel(names=["b", "a"])})
    classes = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"y": [0, 1]}, features=features)})
    assert label_mapping(classes, "y") == (["b", "a"], {0: 0, 1: 1})


@pytest.mark.parametrize("rows, message", [
    ({"train": ["a", "b"], "validation": ["c"]}, "never occur in the training split"),
    ({"train": ["a", None]}, "without a label"),
    ({"train": [0.5, 1.5]}, "regression is not supported"),
    ({"train": ["a", "a"]}, "single label value"),
])
def test_label_mapping_errors(rows, message):
    data = datasets.DatasetDict({name: datasets.Dataset.from_dict({"y": values}) for name, values in rows.items()})
    with pytest.raises(FinetuneError, match=message):
        label_mapping(data, "y")


# -- tokenization -----------------------------------------------------------------------------------

def test_tagging_labels_go_to_first_pieces_only(wordpiece_tokenizer):
    batch = {"tokens": [["the", "xyz", "cat"]], "tags": [["O", "B", "O"]]}
    lookup = {"B": 0, "O": 1}
    out = tokenize_tagging(batch, wordpiece_tokenizer, "tokens", "tags", lookup, 16, label_all_tokens=False)
    pieces = wordpiece_tokenizer.convert_ids_to_tokens(out["input_ids"][0])
    assert pieces == ["[CLS]", "the", "x", "##y", "##z", "cat", "[SEP]"]
    assert out["labels"][0] == [-100, 1, 0, -100, -100, 1, -100]
    every = tokenize_tagging(batch, wordpiece_tokenizer, "tokens", "tags", lookup, 16, label_all_tokens=True)
    assert every["labels"][0] == [-100, 1, 0, 0, 0, 1, -100]


def test_qa_windows_label_the_answer_and_postprocess_recovers_it(wordpiece_tokenizer):
    """Overlapping windows: a window holding the answer points at its tokens (decoding them gives the
    answer), the others at [CLS]; one-hot logits at the gold positions post-process back to every answer."""
    rows = qa_rows(6, seed=3, words=30)
    batch = {k: [r[k] for r in rows] for k in rows[0]}
    out = tokenize_qa(batch, list(range(6)), wordpiece_tokenizer, "question", "context", "answers", 24, 6)
    assert len(out["input_ids"]) > 6  # long contexts became several windows
    assert all(len(ids) == 24 for ids in out["input_ids"])
    seen = set()
    for i, example in enumerate(out["example_index"]):
        start, end = out["start_positions"][i], out["end_positions"][i]
        if start == 0:
            assert end == 0
            continue
        seen.add(example)
        answer = rows[example]["answers"]["text"][0]
        assert wordpiece_tokenizer.decode(out["input_ids"][i][start:end + 1]) == answer
        offsets = out["context_offsets"][i]
        assert rows[example]["context"][offsets[start][0]:offsets[end][1]] == answer
    assert seen == set(range(6))

    length = 24
    start_logits = np.full((len(out["input_ids"]), length), -10.0)
    end_logits = np.full((len(out["input_ids"]), length), -10.0)
    for i in range(len(out["input_ids"])):
        if out["start_positions"][i]:
            start_logits[i, out["start_positions"][i]] = end_logits[i, out["end_positions"][i]] = 10.0
    answers = postprocess_qa([r["context"] for r in rows], out["example_index"], out["context_offsets"],
                             start_logits, end_logits)
    assert answers == [r["answers"]["text"][0] for r in rows]


# -- LoRA on every architecture --------------------------------------------------------------------

@pytest.mark.parametrize("arch", architectures(), ids=lambda a: a.name)
def test_default_lora_targets_and_heads_fit_every_architecture(arch):
    """One target list fits all (uniform projection names), and each task head is trained and saved."""
    for task in FINETUNE_HEADS:
        if task not in arch.classes:
            continue
        config = arch.config_class.from_preset("tiny", **({"num_labels": 3} if task != "question-answering" else {}))
        model = arch.model_class(task)(config)
        targets = lora_targets(model, None)
        experts = expert_parameters(model)  # a mixture of experts: stacked expert weights instead of down_proj
        assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(targets) <= set(DEFAULT_LORA_TARGETS)
        assert "down_proj" in targets or experts
        heads = head_modules(model)
        assert heads and model.base_model_prefix not in heads
        peft_model = apply_lora(model, task)
        trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
        if experts:  # LoRA reaches both stacked expert weights of every layer (PEFT nests one wrapper per weight)
            adapted = [n for n in trainable if ".experts." in n and ".lora_A." in n]
            assert len(adapted) == len(experts) * config.num_hidden_layers, (task, adapted)
        for head in heads:
            assert any(f".{head}.modules_to_save." in f".{n}" for n in trainable), (task, head)


def test_lora_target_errors_name_the_option():
    config = hf_xfmr.models.get_architecture("bert").config_class.from_preset("tiny")
    model = hf_xfmr.models.get_architecture("bert").model_class("sequence-classification")(config)
    with pytest.raises(FinetuneError, match="--lora_target_modules: query not found"):
        lora_targets(model, ["q_proj", "query"])


# -- data sources -----------------------------------------------------------------------------------

def test_local_files_load_offline(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\ngood cat,pos\nbad dog,neg\n")
    (tmp_path / "dev.tsv").write_text("text\tlabel\nsad day\tneg\n")
    (tmp_path / "test.jsonl").write_text(json.dumps({"text": "great", "label": "pos"}) + "\n")
    loaded = load_finetune_data(FinetuneArguments(arch="bert", train_file=str(tmp_path / "train.csv")))
    assert loaded["train"]["label"] == ["pos", "neg"]
    loaded = load_finetune_data(FinetuneArguments(arch="bert", dataset=str(tmp_path / "test.jsonl")))
    assert loaded["train"]["text"] == ["great"]
    loaded = load_finetune_data(FinetuneArguments(arch="bert", dataset=str(tmp_path / "dev.tsv")))
    assert loaded["train"]["text"] == ["sad day"]
    folder = tmp_path / "saved"
    sentiment_dataset(train=4, validation=2).save_to_disk(str(folder))
    assert set(load_finetune_data(FinetuneArguments(arch="bert", dataset=str(folder)))) == {"train", "validation"}


def test_options_file_round_trip(tmp_path):
    (tmp_path / "options.yaml").write_text("arch: bert\ndataset: vader\nlearning_rate: 1e-4\nlora: true\n")
    args = FinetuneArguments.from_file(tmp_path / "options.yaml", max_steps=3)
    assert (args.learning_rate, args.lora, args.max_steps) == (1e-4, True, 3)
    (tmp_path / "bad.yaml").write_text("arch: bert\ndataset: vader\nlearning_rat: 1e-4\n")
    with pytest.raises(FinetuneError, match="unknown option.*learning_rat"):
        FinetuneArguments.from_file(tmp_path / "bad.yaml")


# -- errors before training -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(), "exactly one of --model_name_or_path"),
    (dict(arch="bert", model_name_or_path="x", dataset="d"), "got both"),
    (dict(arch="bert"), "No data"),
    (dict(arch="bert", dataset="d", merge=True), "--merge .* needs --lora"),
    (dict(arch="bert", dataset="d", lora=True, push_to_hub="me/model"), "with --lora also pass --merge"),
    (dict(arch="bert", dataset="d", task="text-generation"), "not a finetuning task"),
    (dict(arch="bert", dataset="d", max_seq_length=0), "--max_seq_length must be >= 1"),
    (dict(arch="bert", dataset="d", task="question-answering", doc_stride=64), "--doc_stride"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(FinetuneError, match=message):
        FinetuneArguments(**kwargs)


def test_bad_data_and_models_fail_before_training(tmp_path, wordpiece_tokenizer, monkeypatch):
    data = sentiment_dataset(train=8, validation=4)
    with pytest.raises(FinetuneError, match="--label_column: column 'sentiment' is not in the dataset"):
        finetune(quick_args(tmp_path / "a", label_column="sentiment"), dataset=data, tokenizer=wordpiece_tokenizer)
    with pytest.raises(FinetuneError, match="none of text, sentence.*--text_column"):
        finetune(quick_args(tmp_path / "b"), dataset=data.rename_column("text", "body"), tokenizer=wordpiece_tokenizer)
    unlabelled_test = datasets.DatasetDict({**data, "test": data["validation"].remove_columns("label")})
    with pytest.raises(FinetuneError, match="Split 'test' lacks column\\(s\\) label \\(its columns: text\\)"):
        finetune(quick_args(tmp_path / "h"), dataset=unlabelled_test, tokenizer=wordpiece_tokenizer)
    with pytest.raises(FinetuneError, match="too small to hold out --validation_split"):
        finetune(quick_args(tmp_path / "g"), dataset=data["validation"].select([0]), tokenizer=wordpiece_tokenizer)
    with pytest.raises(FinetuneError, match="no 'train' split"):
        finetune(quick_args(tmp_path / "c"), dataset=datasets.DatasetDict({"test": data["train"]}),
                 tokenizer=wordpiece_tokenizer)
    with pytest.raises(FinetuneError, match="is not a checkpoint folder"):
        finetune(quick_args(tmp_path / "d", model_name_or_path=str(tmp_path)), dataset=data)
    rows = qa_rows(4, 0)
    rows[2]["answers"] = {"text": ["red"], "answer_start": [0]}
    bad_answers = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                                        "validation": datasets.Dataset.from_list(rows[3:])})
    with pytest.raises(FinetuneError, match="'train' row 2: answer 'red' is not at character 0"):
        finetune(quick_args(tmp_path / "e", task="question-answering", doc_stride=8), dataset=bad_answers,
                 tokenizer=wordpiece_tokenizer)
    # a model without the requested head
    bert = hf_xfmr.models.get_architecture("bert")
    headless = type(bert)(name="bert", config_class=bert.config_class, classes={"base": bert.classes["base"]})
    monkeypatch.setattr(hf_xfmr.models, "get_architecture", lambda key: headless)
    with pytest.raises(FinetuneError, match="bert has no 'sequence-classification' model"):
        finetune(quick_args(tmp_path / "f"), dataset=data, tokenizer=wordpiece_tokenizer)


def test_tokenizer_and_output_dir_mismatches(tmp_path, wordpiece_tokenizer):
    data = sentiment_dataset(train=8, validation=4)
    checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer)
    big = wordpiece_tokenizer.__class__.from_pretrained(checkpoint)
    big.add_tokens([f"extra{i}" for i in range(10)])
    with pytest.raises(FinetuneError, match="ids up to 144 but the model has only 136 embeddings"):
        finetune(quick_args(tmp_path / "a", model_name_or_path=str(checkpoint)), dataset=data, tokenizer=big)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(FinetuneError, match="exists and is not empty; pass --overwrite_output_dir"):
        finetune(quick_args(tmp_path, output_dir=str(tmp_path / "busy")), dataset=data, tokenizer=wordpiece_tokenizer)


def test_preflight_reports_sequences_longer_than_the_model(tmp_path, wordpiece_tokenizer):
    data = sentiment_dataset(train=8, validation=4).map(lambda r: {"text": " ".join(["cat"] * 40)})
    args = quick_args(tmp_path, max_seq_length=64, config_overrides="hidden_size=32,num_hidden_layers=1,"
                      "num_attention_heads=4,intermediate_size=32,max_position_embeddings=16")
    with pytest.raises(FinetuneError, match="cannot run on the tokenized sequence-classification data"):
        finetune(args, dataset=data, tokenizer=wordpiece_tokenizer)
