"""Tiny tokenizers trained once per test session from the embedded corpus (no network)."""

import pytest

from hf_xfmr.data import default_corpus, train_tokenizer


@pytest.fixture(scope="session")
def corpus():
    return default_corpus(max_documents=120)


@pytest.fixture(scope="session")
def bert_tok(corpus):
    return train_tokenizer("bert", corpus, vocab_size=600)


@pytest.fixture(scope="session")
def xlnet_tok(corpus):
    return train_tokenizer("xlnet", corpus[:40], vocab_size=400)


@pytest.fixture(scope="session")
def albert_tok(corpus):
    return train_tokenizer("albert", corpus[:40], vocab_size=400)


@pytest.fixture(scope="session")
def gpt_tok(corpus):
    return train_tokenizer("gpt", corpus, vocab_size=400)


@pytest.fixture(scope="session")
def t5_tok(corpus):
    return train_tokenizer("t5", corpus[:40], vocab_size=400)


@pytest.fixture(scope="session")
def texts(corpus):
    return [" ".join(doc) for doc in corpus]
