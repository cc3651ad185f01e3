"""The Python snippets of README.md and of the pages it hands over to (conversion, data, benchmarks) run as
written (tiny sizes swapped in where they would be slow), and the classes their comments name are the classes
they produce."""

import re
import subprocess
import sys
import warnings

import pytest
import torch
import transformers

from .doc_snippets import run_checking_comments, snippet


@pytest.fixture
def tiny_bert_folders(tmp_path, monkeypatch):
    """A tiny BertForMaskedLM saved under the paths the README uses; the working directory is tmp_path."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=37, max_position_embeddings=64)
    model = transformers.BertForMaskedLM(config)
    for folder in ("path/to/bert-checkpoint", "bert-base-uncased", "google-bert/bert-base-uncased"):
        model.save_pretrained(tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_conversion_snippets(tiny_bert_folders):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the new head's ConversionWarning
        namespace = run_checking_comments(snippet("back = hf_xfmr.to_transformers(ours)", "docs/conversion.md"))
    assert namespace["_checked"] >= 3
    namespace = run_checking_comments(snippet('ours.save_pretrained("./bert-base-xfmr")', "docs/conversion.md"))
    assert type(namespace["ref"]).__name__ == "BertForMaskedLM"
    assert (tiny_bert_folders / "bert-base-xfmr" / "model.safetensors").is_file()


def test_loading_existing_checkpoints_snippet(tiny_bert_folders):
    """Offline: the repo id names a local folder here (an existing path is never taken as a repo id), which
    holds a tiny BertForMaskedLM; loading by id from a Hub is tested in tests/hub/test_load_by_id.py."""
    from hf_xfmr.models.conversion import ConversionWarning

    with pytest.warns(ConversionWarning, match=r"randomly initialised: .*classifier\.weight"):
        namespace = run_checking_comments(snippet('mlm = hf_xfmr.from_transformers("google-bert', "README.md"))
    assert namespace["_checked"] == 1  # mlm is the XfmrBertForMaskedLM its comment says
    assert type(namespace["clf"]).__name__ == "XfmrBertForSequenceClassification"
    assert namespace["clf"].config.num_labels == 2


def test_drop_in_trainer_snippet(tiny_bert_folders):
    """The README's first snippet as written: a transformers BERT folder (its repo id names a local folder
    here) with its tokenizer, converted on load into our class, then one Trainer epoch on a CSV."""
    from hf_xfmr.data.tokenizers import train_tokenizer
    from hf_xfmr.models.conversion import ConversionWarning

    texts = [f"the film was {w} and the plot {v}" for w in ("good", "bad", "fine", "dull") for v in ("works", "fails")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small corpus supplies fewer tokens than asked for
        tokenizer = train_tokenizer("bert", corpus=texts, vocab_size=99)
    assert len(tokenizer) <= 99  # the tiny checkpoint's vocabulary
    tokenizer.save_pretrained(tiny_bert_folders / "google-bert/bert-base-uncased")
    (tiny_bert_folders / "train.csv").write_text(
        "text,label\n" + "".join(f"{t},{i % 2}\n" for i, t in enumerate(texts * 2)))
    with pytest.warns(ConversionWarning, match=r"randomly initialised: .*classifier\.weight"):
        namespace = run_checking_comments(snippet("trainer.train()", "README.md"))
    model, trainer = namespace["model"], namespace["trainer"]
    assert type(model).__name__ == "XfmrBertForSequenceClassification" and model.config.num_labels == 2
    assert trainer.state.global_step > 0 and trainer.state.epoch == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_data_snippet(monkeypatch):
    code = snippet("DataCollatorForMLM(tok", "docs/data.md")
    code = code.replace("default_corpus()", "default_corpus(40)").replace("load_corpus()", "load_corpus(max_documents=40)")
    assert "default_corpus(40)" in code and "load_corpus(max_documents=40)" in code
    with pytest.warns(UserWarning, match=r"asked for vocab_size=8000 but .* only \d+ tokens"):
        namespace = run_checking_comments(code)
    batch = next(iter(namespace["loader"]))
    assert batch["labels"].shape == batch["input_ids"].shape
    assert batch["input_ids"].max() < len(namespace["tok"])


@pytest.mark.slow  # two interpreter starts (the script and its forkserver): a few seconds
def test_benchmark_snippet_runs_as_a_script(tmp_path):
    # Saved as a file and run: the memory measurement's child processes import the script again.
    code = snippet("measure_case(", "docs/benchmarks.md")
    (module,) = re.findall(r"from (\S+) import .*make_case", code)
    tiny = (
        f"import {module} as _bench\n"
        "_make_case = _bench.make_case\n"
        "_bench.make_case = lambda name, **overrides: _make_case(name, tiny=True)\n"
    )
    script = tmp_path / "bench_readme.py"
    script.write_text(tiny + code.replace("repeats=5", "repeats=1"))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| bert-mlm-train |" in proc.stdout
