"""Tiny Llama (GQA, tied and untied embeddings, each RoPE scaling), Mistral (a sliding window shorter than the
batch) and Qwen2 checkpoints, uploaded to the suite's test Hub and loaded by repo id in a child process (the Hub
variables are read when huggingface_hub is imported): `hf_xfmr.from_transformers(id)` and
`XfmrLlamaForCausalLM.from_pretrained(id)` give the transformers models' logits, and convert back to the
checkpoint's own transformers class."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from ..models._llama import VARIANTS, hf_class, hf_config, padded_batch
from .conftest import TOKEN, child_env, run_child
from .hub_server import HubServer

pytestmark = pytest.mark.xdist_group("hub_load_llama")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama-by-id")
    ids, mask = padded_batch()
    inputs = {"input_ids": ids, "attention_mask": mask}
    save_file(inputs, root / "inputs.safetensors")
    checkpoints, references = {}, {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        model = hf_class(variant, "causal-lm")(hf_config(variant)).eval()
        model.save_pretrained(root / variant)
        checkpoints[variant] = {"repo": f"alice/tiny-{variant}", "folder": str(root / variant)}
        with torch.no_grad():
            references[variant] = model(**inputs).logits
    settings = {"checkpoints": checkpoints, "inputs": str(root / "inputs.safetensors"),
                "outputs": str(root / "outputs.safetensors"), "report": str(root / "report.json")}
    with HubServer(tmp_path_factory.mktemp("hub-storage"), tokens={TOKEN: "alice"}) as hub:
        env = child_env(root / "hf_home", HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1")
        run_child("llama_load_by_id_child.py", settings, root / "config.json", env)
    return {"report": json.loads((root / "report.json").read_text()),
            "outputs": load_file(root / "outputs.safetensors"), "references": references, "keep": mask.bool()}


@pytest.mark.parametrize("how", ["from_transformers", "from_pretrained"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_loaded_by_id_gives_the_transformers_logits(loaded, variant, how):
    entry = loaded["report"][f"{how}/{variant}"]
    kind = hf_class(variant, "causal-lm").__name__
    assert entry == {"type": "XfmrLlamaForCausalLM", "hf_model_type": kind[:-len("ForCausalLM")].lower(),
                     "back": kind}
    keep = loaded["keep"]  # unpadded by default: padding positions hold zeros, real ones the reference's values
    torch.testing.assert_close(loaded["outputs"][f"{how}/{variant}"][keep], loaded["references"][variant][keep],
                               atol=1e-5, rtol=1e-5)
