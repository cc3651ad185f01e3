"""The ELECTRA page's snippets run as written (tiny sizes swapped in; the Hub ids name local folders of tiny
transformers checkpoints) and produce the classes they name."""

import warnings

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet



def test_electra_drop_in_snippet(tmp_path, monkeypatch):
    """Offline: an existing path is never taken as a repo id, so the ids name tiny checkpoints saved here; loading
    by id from a Hub is tested in tests/hub/test_load_by_id.py."""
    torch.manual_seed(0)
    config = transformers.ElectraConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    disc = transformers.ElectraForPreTraining(config)
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**{**config.to_dict(), "hidden_size": 8,
                                                                         "num_attention_heads": 2}))
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())  # the published pairs share them
    disc.save_pretrained(tmp_path / "google/electra-small-discriminator")
    gen.save_pretrained(tmp_path / "google/electra-small-generator")
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # from_parts: the embeddings are equal, no warning
        warnings.filterwarnings("ignore", message=".*randomly initialised")  # the new classifier's
        code = snippet('from_pretrained("google/electra-small-discriminator")', "docs/models/electra.md")
        namespace = run_checking_comments(code)
    assert namespace["_checked"] == 3
    assert namespace["clf"].config.num_labels == 2
    assert type(namespace["ref"]) is transformers.ElectraForPreTraining
    rtd = namespace["rtd"]
    assert rtd.generator.model.embeddings.word_embeddings is rtd.discriminator.model.embeddings.word_embeddings
    assert torch.equal(rtd.generator.model.embeddings.hidden_proj.weight, gen.electra.embeddings_project.weight)


def test_electra_rtd_pretraining_snippet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = snippet("XfmrElectraForReplacedTokenDetection(config)", "docs/models/electra.md")
    code = code.replace("default_corpus()", "default_corpus(30)").replace("vocab_size=8000", "vocab_size=600")
    code = code.replace('"small"', '"tiny"')
    assert "default_corpus(30)" in code and '"tiny"' in code
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny corpus holds fewer tokens than vocab_size; the new classifier
        namespace = run_checking_comments(code)
    out = namespace["out"]
    assert torch.isfinite(out.loss) and 0 <= out.original_accuracy <= 1
    assert namespace["model"].discriminator.model.embeddings.word_embeddings.weight.grad is not None
    assert (tmp_path / "electra-rtd" / "generator" / "model.safetensors").is_file()
    assert type(namespace["clf"]).__name__ == "XfmrElectraForSequenceClassification"
    assert torch.equal(namespace["clf"].model.embeddings.word_embeddings.weight,
                       namespace["model"].discriminator.model.embeddings.word_embeddings.weight)
