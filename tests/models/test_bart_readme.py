"""The BART page's snippets run as written (tiny sizes swapped in) and produce the classes they name."""

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet
from ._bart import tiny_bart_config


def test_bart_usage_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    transformers.BartForConditionalGeneration(tiny_bart_config(vocab_size=2000)).save_pretrained(
        tmp_path / "path/to/bart")
    monkeypatch.chdir(tmp_path)
    code = snippet('BartForConditionalGeneration.from_pretrained("path/to/bart")', "docs/models/bart.md").replace('"base"', '"tiny"')
    assert '"tiny"' in code
    namespace = run_checking_comments(code)
    assert type(namespace["model"]).__name__ == "XfmrBartForConditionalGeneration"
    assert torch.isfinite(namespace["loss"])
    assert namespace["out"].shape[0] == 2 and namespace["out"].shape[1] <= 21


def test_text_infilling_snippet():
    namespace = run_checking_comments(snippet("DataCollatorForTextInfilling(tokenizer", "docs/models/bart.md"))
    batch, tokenizer = namespace["batch"], namespace["tokenizer"]
    assert (batch["input_ids"] == tokenizer.mask_token_id).any()
    assert batch["labels"][0, 0] == tokenizer.bos_token_id and batch["labels"][0, -1] == tokenizer.eos_token_id
