"""The XLNet page's snippet runs as written (tiny sizes swapped in) and produces the classes it names."""

import warnings

import torch

from ..doc_snippets import run_checking_comments, snippet


def test_xlnet_usage_snippet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    code = snippet("DataCollatorForPLM(tok, seq_len=128, reuse_len=64, compact=True)", "docs/models/xlnet.md")
    code = code.replace("default_corpus()", "default_corpus(40)").replace("vocab_size=8000", "vocab_size=600")
    code = code.replace('"base"', '"tiny"')
    assert "default_corpus(40)" in code and '"tiny"' in code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        namespace = run_checking_comments(code)
    assert namespace["_checked"] >= 2
    batch = namespace["batch"]
    assert {"perm_ranks", "target_positions"} <= set(batch) and "perm_mask" not in batch
    assert namespace["expanded"]["perm_mask"].shape == (2, 128, 128)
    assert torch.isfinite(namespace["loss"])
    assert namespace["generated"].shape == (1, 25)
    assert type(namespace["ref"]).__name__ == "XLNetLMHeadModel"
