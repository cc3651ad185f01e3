"""Child process of test_llama_load_by_id.py: upload tiny Llama / Mistral / Qwen2 checkpoints to the test Hub
server, then load each by repo id with `hf_xfmr.from_transformers(id)` and `XfmrLlamaForCausalLM.from_pretrained(id)`.

    python llama_load_by_id_child.py CONFIG.json

HF_ENDPOINT, HF_HOME, HF_TOKEN and HF_HUB_DISABLE_XET are set by the parent before huggingface_hub is imported.
The logits of each load go into an outputs file and the loaded types into a report; the test asserts on them.
"""

import json
import sys
from pathlib import Path

import torch
from huggingface_hub import HfApi
from safetensors.torch import load_file, save_file

import hf_xfmr
from hf_xfmr.models.llama import XfmrLlamaForCausalLM

config = json.loads(Path(sys.argv[1]).read_text())
inputs = load_file(config["inputs"])
torch.set_num_threads(1)
api = HfApi()
report, outputs = {}, {}
for name, entry in config["checkpoints"].items():
    api.create_repo(entry["repo"], exist_ok=True)
    api.upload_folder(repo_id=entry["repo"], folder_path=entry["folder"])
for name, entry in config["checkpoints"].items():
    for how, load in (("from_transformers", hf_xfmr.from_transformers),
                      ("from_pretrained", XfmrLlamaForCausalLM.from_pretrained)):
        model = load(entry["repo"]).eval()
        with torch.no_grad():
            outputs[f"{how}/{name}"] = model(**inputs).logits.contiguous()
        report[f"{how}/{name}"] = {"type": type(model).__name__, "hf_model_type": model.config.hf_model_type,
                                   "back": type(hf_xfmr.to_transformers(model)).__name__}
save_file(outputs, config["outputs"])
Path(config["report"]).write_text(json.dumps(report))
