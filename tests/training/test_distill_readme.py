"""The distillation page's snippet runs as written (a tiny teacher and a few steps swapped in) and its
objects are the classes its comments name."""

import pytest
import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet


def test_distillation_snippet(tmp_path, monkeypatch, wordpiece_tokenizer, one_thread):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(wordpiece_tokenizer), hidden_size=32, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "my-bert")
    wordpiece_tokenizer.save_pretrained(tmp_path / "my-bert")
    monkeypatch.chdir(tmp_path)
    code = snippet("init_student_from_teacher(teacher, num_layers=6)", "docs/distillation.md")
    code = code.replace("max_steps=1000, batch_size=16", "max_steps=2, batch_size=4")
    code = code.replace("corpus=None,", "corpus=None, max_documents=8,").replace("num_layers=6", "num_layers=2")
    assert "max_steps=2" in code and "max_documents=8" in code and "num_layers=2" in code
    namespace = run_checking_comments(code)
    assert namespace["_checked"] >= 3
    assert (tmp_path / "my-distilbert" / "distill_log.json").is_file()
    assert namespace["student"].model.layers[0].attn.q_proj.weight.grad is not None
