"""The ModernBERT page's snippet runs as written (the tiny preset swapped in) and produces the classes it names."""

import warnings

import torch

from ..doc_snippets import run_checking_comments, snippet


def test_modernbert_usage_snippet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    code = snippet("XfmrModernBertConfig.from_preset(", "docs/models/modernbert.md")
    code = code.replace('"base"', '"tiny"')
    assert '"tiny"' in code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace = run_checking_comments(code)
    assert namespace["_checked"] >= 3
    assert namespace["packed"]["cu_seqlens"].numel() == 6  # five documents
    assert namespace["out"].logits.shape[:2] == namespace["packed"]["input_ids"].shape
    assert type(namespace["ref"]).__name__ == "ModernBertForMaskedLM"
