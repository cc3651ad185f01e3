"""examples/long_documents.py: the task is deterministic, balanced, long, split without shared sentences, and holds
nothing about its label in the first `cut` tokens (every quoted sentence starts past them, spread over the rest);
with a budget of a few steps both models finetune at full length and cut, and the table and JSON it writes carry
the figures of its runs."""

import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LENGTH, CUT, EVIDENCE = 768, 256, 3
SIZES = dict(train=12, validation=4, test=7)


@pytest.fixture(scope="module")
def long_documents():
    sys.path.insert(0, str(EXAMPLES))
    try:
        sys.modules.pop("long_documents", None)
        import long_documents
    finally:
        sys.path.remove(str(EXAMPLES))
    return long_documents


@pytest.fixture(scope="module")
def tokenizer(long_documents):
    return long_documents.shared_tokenizer(vocab_size=800, length=LENGTH)


@pytest.fixture(scope="module")
def pools(long_documents, tokenizer):
    return long_documents.sentence_pools(tokenizer)


@pytest.fixture(scope="module")
def task(long_documents, tokenizer):
    return long_documents.long_document_task(tokenizer, sizes=SIZES, length=LENGTH, cut=CUT, evidence=EVIDENCE, seed=3)


def test_task_is_deterministic_and_each_split_independent_of_the_others(long_documents, tokenizer, task):
    again = long_documents.long_document_task(tokenizer, sizes=SIZES, length=LENGTH, cut=CUT, evidence=EVIDENCE,
                                              seed=3)
    for split in SIZES:
        assert task[split].to_list() == again[split].to_list()
    bigger = long_documents.long_document_task(tokenizer, sizes=dict(SIZES, train=20), length=LENGTH, cut=CUT,
                                               evidence=EVIDENCE, seed=3)
    assert bigger["test"].to_list() == task["test"].to_list()
    other = long_documents.long_document_task(tokenizer, sizes=SIZES, length=LENGTH, cut=CUT, evidence=EVIDENCE,
                                              seed=4)
    assert other["test"]["text"] != task["test"]["text"]


def test_labels_are_balanced_and_documents_fill_their_length(task):
    assert task["train"].features["label"].names == ["tweets", "editorials"]
    for split, size in SIZES.items():
        labels = list(task[split]["label"])
        assert len(labels) == size and sorted(set(labels)) == [0, 1]
        assert abs(labels.count(0) - labels.count(1)) <= 1
        # filled up to LENGTH tokens ([CLS] and [SEP] included) less at most one left-out sentence
        assert all(LENGTH - 64 - 8 <= n <= LENGTH for n in task[split]["num_tokens"])


def test_quotes_come_from_the_labelled_source_of_their_own_split(long_documents, pools, task):
    names = long_documents.LABELS
    for split in SIZES:
        for row in task[split]:
            assert len(row["quotes"]) == EVIDENCE and len(set(row["quotes"])) == EVIDENCE
            assert all(q in pools[split][names[row["label"]]] for q in row["quotes"])
            assert all(q in row["text"] for q in row["quotes"])
    # the splits share no sentence: no quote or filler sentence of a test document can have been trained on
    for a, b in (("train", "test"), ("train", "validation"), ("validation", "test")):
        for kind in ("filler", *names):
            assert not set(pools[a][kind]) & set(pools[b][kind]) and not set(pools[a][kind]) & set(pools[b]["filler"])
    train_quotes = {q for qs in task["train"]["quotes"] for q in qs}
    assert not train_quotes & {q for qs in task["test"]["quotes"] for q in qs}


def test_the_first_cut_tokens_hold_no_quote_and_quotes_spread_over_the_rest(long_documents, pools, tokenizer, task):
    """The label is the source of the quoted sentences; before token CUT there are only filler sentences (amazon and
    movies snippets, drawn alike for both labels), so a model reading the first CUT tokens is at chance."""
    positions = []
    for split in SIZES:
        rows = task[split]
        encoded = tokenizer(list(rows["text"]), return_offsets_mapping=True)
        for row, ids, offsets in zip(rows, encoded["input_ids"], encoded["offset_mapping"]):
            assert len(ids) == row["num_tokens"]
            prefix_end = offsets[CUT - 1][1]  # the characters the first CUT tokens cover
            assert all(row["text"].index(q) >= prefix_end for q in row["quotes"])
            for q, t in zip(row["quotes"], row["quote_tokens"]):
                start = offsets[t][0]
                assert row["text"][start:].lstrip().startswith(q[:5]) and CUT <= t < row["num_tokens"] - 1
            prefix = row["text"][:prefix_end]
            quoted = pools[split]["tweets"] + pools[split]["editorials"]
            assert not any(q in prefix for q in quoted if len(q) > 20)
            positions += row["quote_tokens"]
    # spread: quotes land in every third of the part past CUT, not bunched at its start
    span = (LENGTH - CUT) / 3
    thirds = [sum(CUT + i * span <= p < CUT + (i + 1) * span for p in positions) for i in range(3)]
    assert all(count >= len(positions) / 10 for count in thirds), thirds


def test_the_task_needs_room_past_the_cut(long_documents, tokenizer, pools):
    import random

    with pytest.raises(ValueError, match="no room past the first"):
        long_documents.draw_document(pools["test"], 0, random.Random(0), 600, 590, 2)


@pytest.mark.parametrize("argv, message", [
    (["--length", "600", "--cut", "512"], "--length must exceed --cut"),
    (["--hidden-size", "48"], "multiple of 32"),
    (["--test-docs", "1"], "at least 2 documents"),
    (["--evidence", "0"], "--evidence must be at least 1"),
])
def test_bad_settings_are_refused(long_documents, capsys, argv, message):
    with pytest.raises(SystemExit):
        long_documents.parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow  # a tokenizer, the task and four finetuning runs of one step
def test_example_finetunes_both_models_full_and_cut_and_writes_its_table(long_documents, tmp_path):
    out = tmp_path / "long"
    report = long_documents.main(["--length", str(LENGTH), "--cut", str(CUT), "--evidence", "2", "--train-docs", "4",
                                  "--validation-docs", "2", "--test-docs", "4", "--steps", "1", "--batch-size", "2",
                                  "--vocab-size", "600", "--in-process", "--quiet", "--output", str(out)])
    rows = {(r["arch"], r["tokens"]): r for r in report["rows"]}
    assert set(rows) == {(arch, tokens) for arch in ("bigbird", "modernbert") for tokens in (LENGTH, CUT)}
    for (arch, tokens), row in rows.items():
        assert 0 <= row["accuracy"] <= 1 and row["majority"] == 0.5 and row["accuracies"] == [row["accuracy"]]
        assert row["parameters"] > 0 and row["train_seconds"] > 0 and row["cpu_seconds"] > 0
        assert row["peak_memory_mb"] >= 0
        run_dir = out / "runs" / f"{arch}-{tokens}-seed0"
        args = json.loads((run_dir / "finetune_args.json").read_text())
        assert args["max_seq_length"] == tokens and args["arch"] == arch
        config = json.loads((run_dir / "model" / "config.json").read_text())
        assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2
        assert config["max_position_embeddings"] == LENGTH  # the same model at both lengths
        if arch == "bigbird":
            sparse = (config["attention_type"], config["block_size"], config["num_random_blocks"])
            assert sparse == ("block_sparse", 64, 3)
    # both models read the same tokens: one tokenizer, one parameter count per model at both lengths
    assert rows[("bigbird", LENGTH)]["parameters"] == rows[("bigbird", CUT)]["parameters"]
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(report))
    table = (out / "results.md").read_text()
    assert f"| first {CUT} tokens |" in table and f"| {LENGTH} tokens |" in table
    assert f"{100 * rows[('modernbert', LENGTH)]['accuracy']:.1f}%" in table
    assert report["task"]["test"]["first_quote_token"] >= CUT
    assert report["task"]["train"]["labels"] == [2, 2]
