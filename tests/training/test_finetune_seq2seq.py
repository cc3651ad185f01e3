"""Generation finetuning of encoder-decoders (`--task seq2seq` / summarization / translation): columns, tokenization
and the collator, learning beyond the copy baseline (T5 and BART, full and LoRA), metrics.json and the card, the
saved model generating the same text through transformers' own class, exact resume, the command line, the
standard-library tasks (docstrings, HTML entities), and the errors before training. Finetuning from checkpoints
loaded by Hub id on the entity task, and the published model generating our text: tests/hub/test_seq2seq_by_id.py."""

import json
import random

import datasets
import pytest
import torch

import hf_xfmr
from hf_xfmr.data import train_tokenizer
from hf_xfmr.data.seq2seq import (
    BUILTIN_DATASETS,
    DataCollatorForSeq2SeqFinetuning,
    Seq2SeqColumns,
    Seq2SeqDataError,
    builtin_dataset,
    copy_first_words,
    docstring_summaries,
    html_entity_names,
    mean_words,
    seq2seq_columns,
    tokenize_seq2seq,
)
from hf_xfmr.hub.cards import finetune_card_fields
from hf_xfmr.models import architectures, get_architecture
from hf_xfmr.training import FinetuneArguments
from hf_xfmr.training.finetune import finetune, load_adapter_model
from hf_xfmr.training.finetune_seq2seq import REGISTRY_TASK, generation_scores
from hf_xfmr.training.finetune_tasks import FinetuneError

from tests.cli_run import run_cli
from tests.hub.seq2seq_remote import check_export_without_hf_xfmr, generate_texts

from .finetune_helpers import one_thread  # noqa: F401  (autouse fixture)

COLORS = ("red", "blue", "green", "black", "white", "yellow")
FILLER = ("the", "cat", "dog", "house", "river", "city", "man", "woman", "sun", "moon", "day", "king", "saw", "and")
SEQ2SEQ_ARCHS = ("t5", "bart")


def color_rows(n: int, seed: int) -> list[dict]:
    """A learnable 'summary': the colour words of a sentence of filler words, in order. Copying the first words
    of the source scores some ROUGE (a colour word is sometimes among them), a model that learned the task more."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(6, 12))]
        for color in [rng.choice(COLORS) for _ in range(rng.randint(1, 3))]:
            words.insert(rng.randrange(len(words) + 1), color)
        rows.append({"document": " ".join(words), "summary": " ".join(w for w in words if w in COLORS)})
    return rows


def color_dataset(train=256, validation=32, test=0) -> datasets.DatasetDict:
    splits = {"train": color_rows(train, 0), "validation": color_rows(validation, 1)}
    if test:
        splits["test"] = color_rows(test, 2)
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})


@pytest.fixture(scope="module")
def tokenizers():
    texts = [row["document"] for row in color_rows(256, 0)] * 3
    sizes = {"t5": 135, "bart": 340}  # what the trainers find in these texts (BPE: every word one token)
    return {arch: train_tokenizer(arch, texts, vocab_size=sizes[arch]) for arch in SEQ2SEQ_ARCHS}


def save_checkpoint(folder, arch: str, tokenizer, seed: int = 0):
    """A freshly initialised tiny `ForConditionalGeneration` of `arch` (the registry's seq2seq-LM class), saved
    with its tokenizer."""
    record = get_architecture(arch)
    ids = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    if tokenizer.bos_token_id is not None:  # BART: <s> starts the source, </s> the decoder
        ids.update(bos_token_id=tokenizer.bos_token_id, decoder_start_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = record.model_class(REGISTRY_TASK)(record.config_class.from_preset("tiny", **ids))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def quick(tmp_path, checkpoint, **overrides) -> FinetuneArguments:
    options = dict(model_name_or_path=str(checkpoint), task="seq2seq", dataset="unused",
                   output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", disable_tqdm=True, max_steps=200,
                   eval_steps=100, logging_steps=20,
                   per_device_train_batch_size=16, learning_rate=1e-2, warmup_steps=0, max_seq_length=32,
                   max_target_length=16, seed=0)
    options.update(overrides)
    return FinetuneArguments(**options)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def test_columns_are_found_by_name_or_named():
    assert seq2seq_columns(["id", "document", "summary"]) == Seq2SeqColumns("document", "summary")
    assert seq2seq_columns(["text", "summary"]) == Seq2SeqColumns("text", "summary")
    assert seq2seq_columns(["source", "target"]) == Seq2SeqColumns("source", "target")
    assert seq2seq_columns(["a", "b"], source_column="b", target_column="a") == Seq2SeqColumns("b", "a")
    wmt = seq2seq_columns(["translation"], source_lang="en", target_lang="de")
    assert wmt == Seq2SeqColumns("translation", "translation", "en", "de")
    sources, targets = wmt.texts({"translation": [{"en": "a house", "de": "ein Haus"}]})
    assert (sources, targets) == (["a house"], ["ein Haus"])


@pytest.mark.parametrize("columns, kwargs, message", [
    (["document", "label"], {}, "--target_column"),
    (["body", "summary"], {}, "--source_column"),
    (["document", "summary"], {"target_column": "headline"}, "'headline' is not in the dataset"),
    (["translation"], {}, "--source_lang and --target_lang"),
    (["translation"], {"source_lang": "en"}, "two different languages"),
    (["document", "summary"], {"source_column": "summary", "target_column": "summary"}, "same column"),
])
def test_columns_that_cannot_be_used_are_named(columns, kwargs, message):
    with pytest.raises(Seq2SeqDataError, match=message):
        seq2seq_columns(columns, **kwargs)


def test_tokenization_prefixes_and_cuts_and_the_collator_pads(tokenizers):
    tokenizer = tokenizers["t5"]
    batch = {"document": ["the cat saw red", "moon"], "summary": ["red", "no color at all here today"]}
    rows = tokenize_seq2seq(batch, tokenizer=tokenizer, columns=Seq2SeqColumns("document", "summary"),
                            source_prefix="summarize: ", max_length=64, max_target_length=5)
    assert rows["input_ids"][0] == tokenizer("summarize: the cat saw red")["input_ids"]
    assert rows["labels"][0] == tokenizer(text_target="red")["input_ids"]
    assert len(rows["labels"][1]) == 5 and rows["labels"][1][-1] == tokenizer.eos_token_id  # cut, EOS kept
    features = [{key: rows[key][i] for key in rows} for i in range(2)]
    out = DataCollatorForSeq2SeqFinetuning(tokenizer.pad_token_id)(features)
    assert set(out) == {"input_ids", "attention_mask", "labels"}  # the model derives the decoder inputs
    lengths = [len(ids) for ids in rows["input_ids"]]
    assert out["attention_mask"].sum(1).tolist() == lengths
    assert (out["input_ids"][1, lengths[1]:] == tokenizer.pad_token_id).all()
    assert out["labels"][0].tolist() == rows["labels"][0] + [-100] * (5 - len(rows["labels"][0]))


@pytest.mark.parametrize("arch", SEQ2SEQ_ARCHS)
def test_a_padded_batch_loses_what_its_rows_lose_alone(arch, tokenizers, tmp_path):
    """The collated batch (encoder unpadded, decoder padded, labels -100 on padding) gives each row the loss and
    the gradients it has alone: padding changes nothing."""
    tokenizer = tokenizers[arch]
    folder = save_checkpoint(tmp_path / arch, arch, tokenizer)
    model = get_architecture(arch).model_class(REGISTRY_TASK).from_pretrained(folder).eval()  # no dropout
    rows = [{"document": "the cat saw a red dog and the king", "summary": "red"},
            {"document": "blue moon", "summary": "blue"},
            {"document": "a white sun and a green river in the black city", "summary": "white green black"}]
    encoded = tokenize_seq2seq({k: [r[k] for r in rows] for k in rows[0]}, tokenizer=tokenizer,
                               columns=Seq2SeqColumns("document", "summary"), max_length=64, max_target_length=16)
    features = [{key: encoded[key][i] for key in encoded} for i in range(3)]
    collate = DataCollatorForSeq2SeqFinetuning(tokenizer.pad_token_id)
    batch = collate(features)
    assert (batch["attention_mask"] == 0).any() and (batch["labels"] == -100).any()  # padding on both sides
    tokens = (batch["labels"] != -100).sum()
    (model(**batch).loss * tokens).backward()
    batched = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    total = 0.0
    for feature in features:
        alone = collate([feature])
        loss = model(**alone).loss * len(feature["labels"])
        loss.backward()
        total += loss.item()
    assert (model(**batch).loss * tokens).item() == pytest.approx(total, rel=1e-5)
    for name, grad in batched.items():
        torch.testing.assert_close(grad, model.get_parameter(name).grad, atol=1e-5, rtol=1e-5)


def test_scores_are_those_of_rouge_score_and_sacrebleu():
    from rouge_score import rouge_scorer
    import sacrebleu

    predictions, references = ["the red cat sat", "blue"], ["a red cat sat down", "blue green"]
    scores = generation_scores(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = sum(scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references)) / 2
    assert scores["rougeL"] == pytest.approx(100 * expected)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(predictions, [references]).score)
    assert generation_scores(references, references)["rouge1"] == pytest.approx(100.0)
    assert copy_first_words(["one two three", "four"], 2) == ["one two", "four"]
    assert mean_words(["a b", "a b c d"]) == 3


def test_the_docstring_task_is_deterministic_and_offline():
    first, again = docstring_summaries(), docstring_summaries()
    assert set(first) == {"train", "validation", "test"}
    assert sum(len(split) for split in first.values()) >= 200
    for name in first:
        assert first[name].to_list() == again[name].to_list()
    row = first["train"][0]
    assert set(row) == {"name", "document", "summary"} and len(row["document"].split()) >= 12
    names = [set(split["name"]) for split in first.values()]
    assert not (names[0] & names[1]) and not (names[0] & names[2])  # each pair in one split


def test_the_entity_task_is_deterministic_offline_and_holds_out_characters():
    """html_entity_names(): every entity of one named character, the target its Unicode name; a character's entities
    all in one split, so the held-out splits ask for characters never named in training; copying scores ~4."""
    import html.entities
    import unicodedata

    first, again = html_entity_names(), html_entity_names()
    assert set(first) == {"train", "validation", "test"} and sum(len(split) for split in first.values()) >= 1500
    for name in first:
        assert first[name].to_list() == again[name].to_list()
    rows = [row for split in first.values() for row in split]
    assert all(html.entities.html5[row["source"] + ";"] == row["char"] for row in rows)
    assert all(row["target"] == unicodedata.name(row["char"]).lower() for row in rows)
    chars = [set(split["char"]) for split in first.values()]
    assert not (chars[0] & chars[1]) and not (chars[0] & chars[2]) and not (chars[1] & chars[2])
    placed = {source: name for name, split in first.items() for source in split["source"]}
    assert placed["rarr"] == placed["rightarrow"] == placed["RightArrow"]  # one character, one split
    assert {"eacute": "latin small letter e with acute", "rarr": "rightwards arrow"}.items() <= \
        {row["source"]: row["target"] for row in rows}.items()
    train_words = mean_words(first["train"]["target"])
    copy = generation_scores(copy_first_words(first["test"]["source"], train_words), first["test"]["target"])
    assert copy["rougeL"] < 10  # an entity name is not its character's name: copying it scores little
    assert builtin_dataset("html-entities")["test"].to_list() == first["test"].to_list()
    assert set(BUILTIN_DATASETS) == {"html-entities", "stdlib-docstrings"}
    with pytest.raises(ValueError, match="choose one of html-entities, stdlib-docstrings"):
        builtin_dataset("entities")
    with pytest.raises(ValueError, match="fractions"):
        html_entity_names(validation=0.6, test=0.5)


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", SEQ2SEQ_ARCHS)
def test_finetuning_beats_the_copy_baseline_and_transformers_generates_the_same(arch, tokenizers, tmp_path):
    tokenizer = tokenizers[arch]
    checkpoint = save_checkpoint(tmp_path / "ckpt", arch, tokenizer)
    result = finetune(quick(tmp_path, checkpoint, num_beams=2), dataset=color_dataset(test=32))
    metrics = json.loads(result.metrics_file.read_text())
    for split, prefix in (("validation", "eval"), ("test", "test")):
        for name in ("rouge1", "rouge2", "rougeL", "bleu", "gen_len"):
            assert f"{prefix}_{name}" in metrics[prefix]
        assert metrics[prefix][f"{prefix}_rougeL"] > metrics["baseline"][f"{split}_copy_rougeL"] + 5
    assert metrics["baseline"]["copy_words"] == mean_words(color_dataset()["train"]["summary"])
    card = finetune_card_fields(json.loads((result.output_dir / "finetune_args.json").read_text()), metrics)
    assert "rougeL" in card["description"] and "bleu" in card["description"]

    # the saved model generates as it was evaluated (its generation config holds the settings), and transformers'
    # own class, converted from it, generates the same text
    ours = get_architecture(arch).model_class(REGISTRY_TASK).from_pretrained(result.model_dir)
    assert ours.generation_config.num_beams == 2 and ours.generation_config.max_new_tokens == 16
    reference = hf_xfmr.to_transformers(ours)
    assert not type(reference).__module__.startswith("hf_xfmr")
    sources = color_dataset(test=32)["test"]["document"][:8]
    texts = generate_texts(ours, tokenizer, sources)  # beam search, as evaluated
    assert texts == generate_texts(reference, tokenizer, sources, num_beams=2, max_new_tokens=16)
    assert generate_texts(ours, tokenizer, sources, num_beams=1) == generate_texts(reference, tokenizer, sources,
                                                                                  num_beams=1, max_new_tokens=16)
    assert sum(any(c in text for c in COLORS) for text in texts) >= 6
    check_export_without_hf_xfmr(ours, tokenizer, card, sources, tmp_path)


def test_lora_learns_and_the_adapter_reloads(tokenizers, tmp_path):
    tokenizer = tokenizers["t5"]
    checkpoint = save_checkpoint(tmp_path / "ckpt", "t5", tokenizer)
    result = finetune(quick(tmp_path, checkpoint, lora=True, merge=True, max_steps=160, eval_steps=80),
                      dataset=color_dataset())
    metrics = result.metrics
    assert metrics["eval"]["eval_rougeL"] > metrics["baseline"]["validation_copy_rougeL"]
    config = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_2_SEQ_LM" and not config["modules_to_save"]  # the LM head stays frozen
    sources = color_rows(6, 9)
    sources = [row["document"] for row in sources]
    merged = get_architecture("t5").model_class(REGISTRY_TASK).from_pretrained(result.merged_dir)
    reloaded = load_adapter_model(result.adapter_dir)
    settings = dict(num_beams=1, max_new_tokens=16)
    assert generate_texts(reloaded, tokenizer, sources, **settings) == generate_texts(merged, tokenizer, sources,
                                                                                      **settings)


def test_resume_continues_exactly(tokenizers, tmp_path):
    """A run resumed from its step-4 checkpoint ends with the weights and losses of the run that went through."""
    tokenizer = tokenizers["bart"]
    checkpoint = save_checkpoint(tmp_path / "ckpt", "bart", tokenizer)
    data = color_dataset(train=64, validation=8)
    settings = dict(max_steps=8, eval_steps=4, logging_steps=1, per_device_train_batch_size=8, keep_checkpoints=True)
    through = finetune(quick(tmp_path / "a", checkpoint, **settings), dataset=data)
    interrupted = tmp_path / "b" / "out"
    (interrupted / "checkpoints").mkdir(parents=True)
    import shutil

    shutil.copytree(through.output_dir / "checkpoints" / "checkpoint-4", interrupted / "checkpoints" / "checkpoint-4")
    (interrupted / "log_history.jsonl").write_text("{}\n" * 50)  # lines after the checkpoint are replaced
    resumed = finetune(quick(tmp_path / "b", checkpoint, resume="latest", **settings), dataset=data)

    def losses(result):
        return [json.loads(line).get("loss") for line in result.log_file.read_text().splitlines()]

    assert losses(resumed) == losses(through)
    assert resumed.metrics["eval"]["eval_loss"] == through.metrics["eval"]["eval_loss"]
    for (name, a), (_, b) in zip(through.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.filterwarnings("ignore:train_tokenizer")  # a small vocabulary: the texts hold few words
@pytest.mark.parametrize("arch", [a.name for a in architectures() if REGISTRY_TASK in a.classes])
def test_every_encoder_decoder_of_the_registry_finetunes_from_scratch(arch, tmp_path):
    """--arch + --preset tiny, the tokenizer trained on the data: every architecture with a seq2seq-LM head runs
    the task (families added later included), with translation pairs."""
    rows = [{"translation": {"en": r["document"], "xx": r["summary"]}} for r in color_rows(48, 3)]
    args = FinetuneArguments(arch=arch, task="translation", source_lang="en", target_lang="xx",
                                    dataset="unused", output_dir=str(tmp_path / "out"), use_cpu=True,
                                    report_to="none", disable_tqdm=True, max_steps=2, eval_steps=2,
                                    per_device_train_batch_size=8, max_seq_length=32, max_target_length=8,
                                    vocab_size=400, seed=0)
    result = finetune(args, dataset=datasets.Dataset.from_list(rows))
    assert "eval_bleu" in result.metrics["eval"] and "validation_copy_bleu" in result.metrics["baseline"]
    assert (result.model_dir / "model.safetensors").is_file()


def test_command_line_summarization(tokenizers, tmp_path, capsys):
    checkpoint = save_checkpoint(tmp_path / "ckpt", "t5", tokenizers["t5"])
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": r["document"], "headline": r["summary"]}) + "\n"
                            for r in color_rows(40, 4)))
    status, out, err = run_cli(
        ["finetune", "--model_name_or_path", str(checkpoint), "--task", "summarization", "--train_file", str(data),
         "--source_column", "text", "--target_column", "headline", "--source_prefix", "summarize: ",
         "--max_steps", "2", "--max_new_tokens", "4", "--num_beams", "2", "--use_cpu", "--disable_tqdm",
         "--output_dir", str(tmp_path / "out"), "--max_seq_length", "32"], capsys)
    assert status == 0, err
    assert "eval_rougeL:" in out and "validation_copy_rougeL:" in out
    saved = json.loads((tmp_path / "out" / "finetune_args.json").read_text())
    assert saved["source_prefix"] == "summarize: " and saved["task"] == "summarization"


# ---------------------------------------------------------------------------------------------
# Errors before training
# ---------------------------------------------------------------------------------------------

def test_a_missing_column_is_named(tokenizers, tmp_path):
    checkpoint = save_checkpoint(tmp_path / "ckpt", "t5", tokenizers["t5"])
    with pytest.raises(FinetuneError, match="--target_column"):
        finetune(quick(tmp_path, checkpoint), dataset=datasets.Dataset.from_list([{"document": "a b"}] * 20))
    with pytest.raises(FinetuneError, match="'body' is not in the dataset"):
        finetune(quick(tmp_path, checkpoint, source_column="body", overwrite_output_dir=True),
                 dataset=color_dataset(train=20, validation=4))


@pytest.mark.parametrize("arch", ["gpt", "bert"])
def test_a_decoder_only_or_encoder_only_model_is_refused(arch, tmp_path):
    rows = datasets.Dataset.from_list(color_rows(20, 0))
    args = FinetuneArguments(arch=arch, task="seq2seq", dataset="unused", output_dir=str(tmp_path / "out"))
    with pytest.raises(FinetuneError, match="encoder-decoder with a seq2seq-LM head: .*t5"):
        finetune(args, dataset=rows)


def test_seq2seq_options_are_checked():
    base = dict(arch="t5", dataset="x")
    with pytest.raises(FinetuneError, match="--source_prefix applies to --task seq2seq"):
        FinetuneArguments(source_prefix="summarize: ", **base)
    with pytest.raises(FinetuneError, match="--num_beams must be >= 1"):
        FinetuneArguments(task="seq2seq", num_beams=0, **base)
    with pytest.raises(FinetuneError, match="--overwrite_output_dir would delete"):
        FinetuneArguments(task="seq2seq", resume="latest", overwrite_output_dir=True, **base)


def test_resume_without_a_resumable_checkpoint_says_why(tokenizers, tmp_path):
    checkpoint = save_checkpoint(tmp_path / "ckpt", "bart", tokenizers["bart"])
    with pytest.raises(FinetuneError, match="no checkpoint in"):
        finetune(quick(tmp_path, checkpoint, resume="latest"), dataset=color_dataset(train=20, validation=4))
    weights_only = tmp_path / "w" / "checkpoint-2"
    weights_only.mkdir(parents=True)
    (weights_only / "trainer_state.json").write_text("{}")
    with pytest.raises(FinetuneError, match="no optimizer state"):
        finetune(quick(tmp_path, checkpoint, resume=str(weights_only)), dataset=color_dataset(train=20, validation=4))


def test_docs_seq2seq_snippet(tmp_path, monkeypatch):
    """docs/finetuning.md's seq2seq snippet runs as written (the standard-library docstring task), on a tiny T5
    checkpoint and a few steps."""
    from ..doc_snippets import snippet

    monkeypatch.chdir(tmp_path)
    texts = [" ".join(row[column] for column in ("document", "summary")) for row in docstring_summaries()["train"]]
    save_checkpoint(tmp_path / "my-t5", "t5", train_tokenizer("t5", texts, vocab_size=600))
    code = snippet('task="summarization", dataset="docstrings"', "docs/finetuning.md")
    assert "max_steps=300" in code
    namespace = {}
    exec(code.replace("max_steps=300", "max_steps=2, eval_steps=2, use_cpu=True, disable_tqdm=True, "
                                       "max_new_tokens=8"), namespace)
    metrics = namespace["result"].metrics
    assert {"test_rougeL", "test_bleu"} <= set(metrics["test"]) and "test_copy_rougeL" in metrics["baseline"]
    assert (tmp_path / "docsum" / "model" / "generation_config.json").is_file()


def test_the_benchmark_case_runs_both_sides_on_the_rows_it_describes():
    """`hf_xfmr.bench.seq2seq` (tiny sizes): rows within the stated length ranges, ending in EOS; both sides timed
    on every step after the warm-up."""
    from hf_xfmr.bench.seq2seq import TINY_SIZES, _rows, markdown_table, seq2seq_finetune_step

    rows = _rows(64, vocab=100, min_source=8, max_source=48, min_target=4, max_target=12, eos=1, seed=0)
    assert all(8 <= len(r["input_ids"]) <= 48 and 4 <= len(r["labels"]) <= 12 for r in rows)
    assert all(r["input_ids"][-1] == 1 and r["labels"][-1] == 1 for r in rows)
    assert len({len(r["input_ids"]) for r in rows}) > 10  # lengths vary: the batches are padded
    result = seq2seq_finetune_step("bart", **TINY_SIZES, num_threads=1)
    assert result["steps"] == TINY_SIZES["steps"] - TINY_SIZES["warmup"]
    assert result["ours_s"] > 0 and result["ref_s"] > 0 and result["ratio"] == result["ref_s"] / result["ours_s"]
    assert "bart-seq2seq-finetune" in markdown_table([result])
