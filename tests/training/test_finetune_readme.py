"""The finetuning page's finetuning and VADER snippets run as written (a tiny checkpoint, a small stand-in for the
VADER archive, and a couple of steps instead of two epochs)."""

from hf_xfmr.data import labelled

from ..data.test_labelled import write_fake_vader_sdist
from ..doc_snippets import snippet
from .finetune_helpers import one_thread, save_mlm_checkpoint  # noqa: F401


def test_finetune_and_vader_snippets(tmp_path, monkeypatch, wordpiece_tokenizer):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(labelled.VADER_ENV, str(write_fake_vader_sdist(tmp_path / "vader.tar.gz", per_source=40)))
    save_mlm_checkpoint(tmp_path / "ckpt", wordpiece_tokenizer)

    code = snippet("load_adapter_model(result.adapter_dir)", "docs/finetuning.md")
    quick = "max_steps=2, eval_steps=1, use_cpu=True, disable_tqdm=True"
    assert "num_train_epochs=2" in code
    namespace = {}
    exec(code.replace("num_train_epochs=2", quick), namespace)
    result = namespace["result"]
    assert (tmp_path / "out" / "merged" / "model.safetensors").is_file()
    assert 0 <= result.metrics["test"]["test_accuracy"] <= 1
    assert type(namespace["model"]).__name__ == "PeftModelForSequenceClassification"

    namespace = {}
    exec(snippet("load_vader_sentiment()", "docs/finetuning.md"), namespace)
    assert set(namespace["data"]) == {"train", "validation", "test"}
    assert namespace["data"]["train"].features["label"].names == ["negative", "neutral", "positive"]
