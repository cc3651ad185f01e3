"""Child process of the hub tests: load exported models where hf_xfmr is NOT importable.

    python load_remote.py MANIFEST.json

The manifest lists cases {name, source (folder or repo id), auto_class, inputs, output, generate,
revision?, refusal?, readme?, tokenizer?}. For each case the model is loaded with
`trust_remote_code=True`, run on the saved inputs, and its outputs are saved; with `refusal`, loading
without trust_remote_code must raise; with `readme`, the README's Python sample is run. A JSON
report goes to manifest["report"]. Errors are reported per case, not raised.
"""

import json
import os
import re
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _childlib import block_package, run_model  # noqa: E402

block_package("hf_xfmr")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def refusal(source: str, revision: str | None) -> dict:
    result = {}
    for name in ("AutoConfig", "AutoModel"):
        try:
            getattr(transformers, name).from_pretrained(source, revision=revision)
            result[name] = None  # loaded without trust_remote_code: the test fails on this
        except Exception as err:  # noqa: BLE001
            result[name] = f"{type(err).__name__}: {err}"
    return result


def readme_sample(source: str, revision: str | None) -> str:
    """Run the Python code block of the model card (with the repo id it names)."""
    import contextlib
    import io

    if os.path.isdir(source):  # a local export still has the placeholder repo id: use the folder, as a user would
        text = Path(source, "README.md").read_text().replace("<your-username>/<model-name>", source)
    else:
        from huggingface_hub import hf_hub_download

        text = Path(hf_hub_download(source, "README.md", revision=revision)).read_text()
    code = re.search(r"```python\n(.*?)```", text, flags=re.DOTALL).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<README.md sample>", "exec"), {"__name__": "__readme__"})
    return out.getvalue()


def main(manifest_path: str) -> None:
    manifest = json.loads(Path(manifest_path).read_text())
    report = {"hf_xfmr_importable": None, "cases": {}}
    for case in manifest["cases"]:
        result = report["cases"][case["name"]] = {}
        revision = case.get("revision")
        try:
            auto = getattr(transformers, case["auto_class"])
            model = auto.from_pretrained(case["source"], trust_remote_code=True, revision=revision).eval()
            result["class"] = type(model).__name__
            result["module"] = type(model).__module__
            result["config_module"] = type(model.config).__module__
            result["dtype"] = str(model.dtype)
            inputs = load_file(case["inputs"])
            save_file(run_model(model, inputs, case.get("generate", False)), case["output"])
            if case.get("tokenizer"):
                tokenizer = transformers.AutoTokenizer.from_pretrained(case["source"], revision=revision,
                                                                       trust_remote_code=True)
                result["tokenizer_vocab"] = len(tokenizer)
            if case.get("refusal"):
                result["refusal"] = refusal(case["source"], revision)
            if case.get("readme"):
                result["readme_output"] = readme_sample(case["source"], revision)
        except Exception:  # noqa: BLE001  (reported to the test, which fails on it)
            result["error"] = traceback.format_exc()
    try:
        import hf_xfmr  # noqa: F401

        report["hf_xfmr_importable"] = True
    except ImportError:
        report["hf_xfmr_importable"] = False
    report["hf_xfmr_in_sys_modules"] = "hf_xfmr" in sys.modules
    report["torch_threads"] = torch.get_num_threads()
    Path(manifest["report"]).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
