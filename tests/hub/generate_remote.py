"""Child process of the seq2seq hub tests: generate text with exported encoder-decoders where hf_xfmr is NOT
importable.

    python generate_remote.py MANIFEST.json

The manifest gives `sources` (texts) and `cases` {name: folder or repo id}. Each case's model is loaded with
`AutoModelForSeq2SeqLM.from_pretrained(..., trust_remote_code=True)` and its tokenizer with `AutoTokenizer`, and
generates for the sources with the settings of its own generation config (what a user of the export gets); the
decoded texts, the generated ids and where the classes came from go into manifest["report"] (errors per case).
For a repo id the model card is read too. HF_ENDPOINT / HF_HOME are set by the parent.
"""

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _childlib import block_package  # noqa: E402

block_package("hf_xfmr")

import torch  # noqa: E402
import transformers  # noqa: E402


def generate(source: str, texts: list[str]) -> dict:
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = model.generate(**batch)  # the export's generation config: its num_beams and max_new_tokens
    result = {"class": type(model).__name__, "module": type(model).__module__, "ids": ids.tolist(),
              "texts": tokenizer.batch_decode(ids, skip_special_tokens=True),
              "num_beams": model.generation_config.num_beams,
              "max_new_tokens": model.generation_config.max_new_tokens}
    if not Path(source).is_dir():
        from huggingface_hub import hf_hub_download

        result["readme"] = Path(hf_hub_download(source, "README.md")).read_text()
    return result


def main(manifest_path: str) -> None:
    manifest = json.loads(Path(manifest_path).read_text())
    torch.set_num_threads(1)  # the reduction order of the parent's run
    report = {"cases": {}}
    for name, source in manifest["cases"].items():
        try:
            report["cases"][name] = generate(source, manifest["sources"])
        except Exception:  # noqa: BLE001  (reported to the test, which fails on it)
            report["cases"][name] = {"error": traceback.format_exc()}
    try:
        import hf_xfmr  # noqa: F401

        report["hf_xfmr_importable"] = True
    except ImportError:
        report["hf_xfmr_importable"] = False
    Path(manifest["report"]).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
