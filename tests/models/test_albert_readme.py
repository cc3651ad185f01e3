"""The ALBERT page's snippets run as written (tiny sizes swapped in) and produce the classes they name."""

import warnings

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet


def test_albert_usage_and_conversion_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    transformers.AlbertForMaskedLM(config).save_pretrained(tmp_path / "path/to/albert-checkpoint")
    monkeypatch.chdir(tmp_path)
    code = snippet('AlbertForMaskedLM.from_pretrained("path/to/albert-checkpoint")', "docs/models/albert.md").replace('"base"', '"tiny"')
    namespace = run_checking_comments(code)
    assert type(namespace["model"]).__name__ == "XfmrAlbertForPreTraining"
    assert type(namespace["ours"]).__name__ == "XfmrAlbertForMaskedLM"
    assert type(namespace["ref"]).__name__ == "AlbertForMaskedLM"


def test_albert_sop_pretraining_snippet():
    code = snippet("create_sop_examples(", "docs/models/albert.md").replace("default_corpus()", "default_corpus(30)")
    code = code.replace("vocab_size=8000", "vocab_size=600").replace('"base"', '"tiny"')
    assert "default_corpus(30)" in code and '"tiny"' in code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny corpus may hold fewer tokens than vocab_size
        namespace = run_checking_comments(code)
    assert namespace["_checked"] >= 1
    batch = namespace["batch"]
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "sentence_order_label"}
    assert torch.isfinite(namespace["loss"])
