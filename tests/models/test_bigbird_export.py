"""The flattened Hub export of BigBird runs the block-sparse layout where hf_xfmr is not importable: a child
process loads it with `trust_remote_code=True` and gives our outputs on inputs long enough for the sparse path, in
eval and training mode (the reference's seeded random blocks). The shared export suite covers short inputs."""

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.testing import assert_close

from hf_xfmr.hub import export
from hf_xfmr.models.bigbird import XfmrBigBirdConfig, XfmrBigBirdForMaskedLM

HUB_TESTS = Path(__file__).resolve().parents[1] / "hub"

CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from _childlib import block_package
    block_package("hf_xfmr")
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForMaskedLM
    model = AutoModelForMaskedLM.from_pretrained(sys.argv[2], trust_remote_code=True)
    assert "hf_xfmr" not in sys.modules and type(model).__module__.startswith("transformers_modules")
    inputs = load_file(sys.argv[3])
    outputs = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        outputs[mode] = model(**inputs).logits.detach().contiguous()
    save_file(outputs, sys.argv[4])
""")


def test_the_flat_export_runs_block_sparse_attention_without_hf_xfmr(tmp_path):
    torch.manual_seed(0)
    config = XfmrBigBirdConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = XfmrBigBirdForMaskedLM(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tokenizer for a tiny vocabulary
        folder = export(model, None, tmp_path / "export")
    ids = torch.randint(5, 900, (2, 100))
    mask = torch.ones(2, 100, dtype=torch.long)
    mask[1, 85:] = 0
    save_file({"input_ids": ids, "attention_mask": mask}, tmp_path / "inputs.safetensors")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               TRANSFORMERS_VERBOSITY="error")
    args = [str(HUB_TESTS), str(folder), str(tmp_path / "inputs.safetensors"), str(tmp_path / "out.safetensors")]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    theirs = load_file(tmp_path / "out.safetensors")
    keep = mask.bool()
    for mode in ("eval", "train"):
        model.train(mode == "train")
        ours = model(input_ids=ids, attention_mask=mask).logits.detach()
        assert_close(theirs[mode][keep], ours[keep], atol=1e-5, rtol=1e-5, msg=lambda m: f"{mode}: {m}")
