"""The Llama page's snippet runs as written (tiny sizes and a tiny Mistral checkpoint swapped in) and produces the
classes it names."""

import pytest
import torch
import transformers

from hf_xfmr.models.conversion import ConversionWarning

from ..doc_snippets import run_checking_comments, snippet
from ._llama import hf_config


def test_llama_usage_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    checkpoint = transformers.MistralForCausalLM(hf_config("mistral", vocab_size=10000))
    checkpoint.save_pretrained(tmp_path / "path/to/mistral")
    monkeypatch.chdir(tmp_path)
    code = snippet('XfmrLlamaForCausalLM.from_pretrained("path/to/mistral")', "docs/models/llama.md")
    code = code.replace('from_preset("mistral-7b")', 'from_preset("tiny")')
    assert 'from_preset("tiny")' in code
    with pytest.warns(ConversionWarning, match="score.weight"):  # the classifier's new head, named
        namespace = run_checking_comments(code)
    assert namespace["_checked"] == 2
    assert type(namespace["model"]).__name__ == "XfmrLlamaForCausalLM"
    assert type(namespace["back"]).__name__ == "MistralForCausalLM"
    assert namespace["out"].shape[0] == 2 and torch.isfinite(namespace["loss"])
