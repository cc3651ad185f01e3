"""The Mixtral page's snippets run as written (tiny sizes and a tiny Mixtral checkpoint swapped in) and produce the
classes they name."""

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet
from ._mixtral import hf_config


def test_mixtral_usage_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    checkpoint = transformers.MixtralForCausalLM(hf_config("gqa", vocab_size=10000, output_router_logits=False))
    checkpoint.save_pretrained(tmp_path / "path/to/mixtral")
    monkeypatch.chdir(tmp_path)
    code = snippet('XfmrMixtralForCausalLM.from_pretrained("path/to/mixtral")', "docs/models/mixtral.md")
    code = code.replace('from_preset("mixtral-8x7b")', 'from_preset("tiny")')
    assert 'from_preset("tiny")' in code
    namespace = run_checking_comments(code)
    assert namespace["_checked"] == 2
    assert torch.isfinite(namespace["loss"]) and namespace["aux"] > 0
    assert namespace["tokens"].shape == (1, 24)


def test_mixtral_lora_snippet():
    code = snippet('target_parameters=["experts.gate_up_proj", "experts.down_proj"]', "docs/models/mixtral.md")
    namespace = run_checking_comments("from hf_xfmr.models.mixtral import XfmrMixtralConfig, XfmrMixtralForCausalLM\n"
                                      + code)
    peft_model = namespace["peft_model"]
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("experts" in n for n in trainable) and any("q_proj" in n for n in trainable)
    ids = torch.randint(3, 900, (2, 6))
    peft_model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for n, p in peft_model.named_parameters() if p.requires_grad)
