"""The T5 page's snippet runs as written (tiny sizes swapped in) and produces the classes it names."""

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet
from ._t5 import tiny_t5_config


def test_t5_usage_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    config = tiny_t5_config(vocab_size=2000)
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path / "path/to/t5")
    monkeypatch.chdir(tmp_path)
    code = snippet('T5ForConditionalGeneration.from_pretrained("path/to/t5")', "docs/models/t5.md").replace('"small"', '"tiny"')
    assert '"tiny"' in code
    namespace = run_checking_comments(code)
    model = namespace["model"]
    assert type(model).__name__ == "XfmrT5ForConditionalGeneration"
    assert torch.isfinite(namespace["loss"])
    assert namespace["out"].shape[0] == 2 and namespace["out"].shape[1] <= 21
