"""Embedded corpus, load_corpus over datasets sources, and tokenizer training."""

import json
import warnings

import pytest

from hf_xfmr.data import default_corpus, iter_texts, load_corpus, train_tokenizer


def test_default_corpus_deterministic(corpus):
    full = default_corpus()
    assert full[:120] == corpus
    assert len(full) > 200 and all(isinstance(p, str) and p for d in full for p in d)
    assert sum(len(p) for d in full for p in d) > 300_000
    assert default_corpus() == full


def test_load_corpus_sources(tmp_path):
    ds = load_corpus(max_documents=10)
    assert ds.column_names == ["text"] and len(ds) == 10
    (tmp_path / "a.txt").write_text("first line\nsecond line\n")
    assert load_corpus(str(tmp_path / "a.txt"))["text"] == ["first line", "second line"]
    with open(tmp_path / "b.jsonl", "w") as f:
        for t in ["x y", "z"]:
            f.write(json.dumps({"body": t}) + "\n")
    assert load_corpus(str(tmp_path / "b.jsonl"), text_column="body")["text"] == ["x y", "z"]
    stream = load_corpus(["doc one", ["para a", "para b"]], streaming=True)
    assert [r["text"] for r in stream] == ["doc one", "para a\n\npara b"]
    sub = tmp_path / "dir"
    sub.mkdir()
    (sub / "c.txt").write_text("hello\n")
    assert load_corpus(str(sub))["text"] == ["hello"]


def test_load_corpus_errors(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        load_corpus([])
    with pytest.raises(ValueError, match="does not exist"):
        load_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="Column 'body' not found"):
        load_corpus(["a"], text_column="body")
    with pytest.raises(ValueError, match="empty"):
        next(iter_texts([]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no"):
        load_corpus(str(tmp_path / "empty"))


def test_tokenizer_templates(bert_tok, xlnet_tok, albert_tok, gpt_tok):
    enc = bert_tok("Hello there.", "General Kenobi.")
    toks = bert_tok.convert_ids_to_tokens(enc["input_ids"])
    assert toks[0] == "[CLS]" and toks.count("[SEP]") == 2 and toks[-1] == "[SEP]"
    assert enc["token_type_ids"][-1] == 1 and bert_tok.mask_token == "[MASK]" and bert_tok.pad_token == "[PAD]"
    enc = xlnet_tok("Hello there.", "General Kenobi.")
    toks = xlnet_tok.convert_ids_to_tokens(enc["input_ids"])
    assert toks[-2:] == ["<sep>", "<cls>"] and enc["token_type_ids"][-1] == 2
    assert xlnet_tok.padding_side == "left" and "<eod>" in xlnet_tok.all_special_tokens
    assert {xlnet_tok.mask_token, xlnet_tok.pad_token, xlnet_tok.unk_token} == {"<mask>", "<pad>", "<unk>"}
    padded = xlnet_tok(["a", "a much longer text here"], padding=True)["input_ids"]
    assert padded[0][0] == xlnet_tok.pad_token_id
    toks = albert_tok.convert_ids_to_tokens(albert_tok("Hi.", "Yo.")["input_ids"])
    assert toks[0] == "[CLS]" and toks[-1] == "[SEP]" and albert_tok.pad_token == "<pad>"
    ids = gpt_tok("Hello there")["input_ids"]
    assert gpt_tok.decode(ids) == "Hello there" and gpt_tok.eos_token == "<|endoftext|>"


@pytest.mark.parametrize("kind,first", [("modernbert", "[CLS]"), ("roberta", "<s>")])
def test_bpe_encoder_styles(corpus, kind, first, tmp_path):
    from transformers import AutoTokenizer

    tok = train_tokenizer(kind, corpus[:30], vocab_size=350)
    toks = tok.convert_ids_to_tokens(tok("Hello world")["input_ids"])
    assert toks[0] == first and tok.mask_token is not None and tok.pad_token is not None
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("Hello world")["input_ids"] == tok("Hello world")["input_ids"]


def test_tokenizer_errors_and_cli(corpus, tmp_path):
    with pytest.raises(ValueError, match="Unknown tokenizer kind"):
        train_tokenizer("sentencepiece-ish", corpus[:3])
    with pytest.raises(ValueError, match="too small"):
        train_tokenizer("bpe", corpus[:3], vocab_size=100)
    with pytest.raises(ValueError, match="empty"):
        train_tokenizer("bert", [], vocab_size=500)
    with pytest.raises(ValueError, match="style"):
        train_tokenizer("wordpiece", corpus[:3], style="xlnet")
    from hf_xfmr.data.tokenizers import main

    (tmp_path / "t.txt").write_text("\n".join(" ".join(d) for d in corpus[:20]))
    main(["--kind", "bert", "--corpus", str(tmp_path / "t.txt"), "--vocab-size", "300", "--out", str(tmp_path / "tok")])
    assert (tmp_path / "tok" / "tokenizer.json").exists()


@pytest.mark.parametrize("corpus_arg", ["One text. Another sentence.", b"bytes text"])
def test_a_single_string_is_not_a_corpus(corpus_arg):
    with pytest.raises(ValueError, match="is a single (str|bytes) .* not a collection of texts"):
        train_tokenizer("bert", corpus_arg, vocab_size=300)
    with pytest.raises(ValueError, match="single characters"):
        list(iter_texts(corpus_arg))


@pytest.mark.parametrize("kind", ["bert", "gpt"])
def test_a_vocabulary_smaller_than_asked_is_reported(corpus, kind):
    with pytest.warns(UserWarning, match=r"asked for vocab_size=5000 but .* found only (\d+) tokens") as record:
        tok = train_tokenizer(kind, corpus[:5], vocab_size=5000)
    (message,) = [str(w.message) for w in record if "vocab_size" in str(w.message)]
    assert f"so the tokenizer has {len(tok)}." in message and len(tok) < 5000
    with warnings.catch_warnings():  # a size the corpus supports: no warning
        warnings.simplefilter("error")
        # (WordPiece counts vary by a few tokens from run to run, see train_tokenizer: stay well below)
        assert len(train_tokenizer(kind, corpus[:5], vocab_size=len(tok) // 2)) == len(tok) // 2
