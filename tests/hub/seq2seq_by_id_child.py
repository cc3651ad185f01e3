"""Child process of test_seq2seq_by_id.py: upload tiny transformers encoder-decoders to the test Hub server, then
finetune each by repo id with `hf-xfmr finetune --task seq2seq ... --push_to_hub` (the command line, in process).

    python seq2seq_by_id_child.py CONFIG.json

HF_ENDPOINT, HF_HOME, HF_TOKEN and HF_HUB_DISABLE_XET are set by the parent before huggingface_hub is imported.
CONFIG gives the checkpoint folders to upload ({repo: folder}) and the command lines to run ({name: argv}); each
command's exit status and the tail of its output go into CONFIG["report"]; the test asserts on them and on the
files the runs wrote.
"""

import contextlib
import io
import json
import os
import sys
import traceback
from pathlib import Path

import torch

os.environ["HF_DATASETS_OFFLINE"] = "1"  # the data is a local folder; nothing but the test Hub is reachable

from huggingface_hub import HfApi  # noqa: E402

from hf_xfmr import cli  # noqa: E402


def run(argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    except Exception:  # noqa: BLE001  (reported: the test fails on it)
        status, err = "exception", io.StringIO(traceback.format_exc())
    return {"status": status if status is not None else 0, "stdout": out.getvalue()[-4000:],
            "stderr": err.getvalue()[-8000:]}


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    torch.set_num_threads(1)
    api = HfApi()
    for repo, folder in config["uploads"].items():
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=folder)
    report = {name: run(argv) for name, argv in config["runs"].items()}
    Path(config["report"]).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
