"""Helpers shared by the test processes and the child processes they start.

Nothing here imports hf_xfmr: the children load exported models where hf_xfmr must not be importable.
"""

import importlib.abc
import sys


class _BlockPackage(importlib.abc.MetaPathFinder):
    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name or fullname.startswith(self.name + "."):
            raise ImportError(f"{self.name} is not importable in this process (blocked by the tests)")
        return None


def block_package(name: str = "hf_xfmr") -> None:
    """Make `import name` fail in this process, as if the package were not installed."""
    if name in sys.modules:
        raise RuntimeError(f"{name} is already imported; block it before anything imports it")
    sys.meta_path.insert(0, _BlockPackage(name))


def flatten_output(output, prefix: str = "") -> dict:
    """Every tensor in a model output (ModelOutput, tuple, list, dict), keyed by its path."""
    import torch

    tensors = {}
    if isinstance(output, torch.Tensor):
        tensors[prefix or "output"] = output.detach().contiguous()
    elif isinstance(output, dict):  # ModelOutput is an OrderedDict of its non-None fields
        for key, value in output.items():
            tensors.update(flatten_output(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(output, (tuple, list)):
        for i, value in enumerate(output):
            tensors.update(flatten_output(value, f"{prefix}.{i}" if prefix else str(i)))
    return tensors  # anything else (a Cache object, None) carries no tensor of its own to compare


def run_model(model, inputs: dict, generate: bool) -> dict:
    """Forward outputs (and greedy generation when asked) of `model` on `inputs`, single-threaded."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # identical reduction order in every process
    try:
        with torch.no_grad():
            tensors = flatten_output(model(**inputs))
            if generate:
                ids = inputs["input_ids"]
                tensors["generated"] = model.generate(
                    input_ids=ids, attention_mask=inputs.get("attention_mask"), max_new_tokens=3, do_sample=False,
                    min_new_tokens=3,
                ).contiguous()  # beam search returns a strided view, which safetensors refuses
    finally:
        torch.set_num_threads(threads)
    return tensors
