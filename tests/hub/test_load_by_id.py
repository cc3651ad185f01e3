"""Loading transformers checkpoints by Hub repo id, converted on the way in, against the test Hub server.

Tiny transformers checkpoints of BERT, RoBERTa, GPT-2, T5, BART and ModernBERT are uploaded with their
tokenizer, then loaded by id in a child process (HF_ENDPOINT and HF_HUB_OFFLINE are read when
huggingface_hub is imported) with `hf_xfmr.from_transformers(id)` and with `Xfmr*.from_pretrained(id)`;
the outputs must equal the transformers models'. The CLI finetunes, converts, distils and pretrains from
ids; a second child reloads everything with HF_HUB_OFFLINE=1 and the Hub unreachable. Bad input (a
missing or private repo, a missing revision, no network and no cache, pickled weights only, a model type
outside the nine families, another family's checkpoint) gets a clear error. The GPT-2 and ModernBERT
checkpoints keep transformers' default special ids, outside their small vocabularies (issue "Hardening 2",
point 2): converting them works, with a warning naming the ids.
"""

import json
import socket
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import hf_xfmr
from hf_xfmr.models.hub_loading import CheckpointSourceError, is_hub_repo_id

from .conftest import TOKEN, child_env, run_child
from .hub_server import HubServer

pytestmark = pytest.mark.xdist_group("hub_load_by_id")

VOCAB = 160  # above the test tokenizer's ~130 tokens
BRANCH = "v2"
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_models(seed: int = 0) -> dict:
    """One tiny randomly initialised transformers model per family, with transformers' own head class."""
    bert = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=64, **NO_DROPOUT)
    configs = {
        "bert": ("BertForMaskedLM", transformers.BertConfig(**bert)),
        "roberta": ("RobertaForMaskedLM", transformers.RobertaConfig(**{**bert, "max_position_embeddings": 66},
                                                                     pad_token_id=1)),
        # GPT2Config(vocab_size=...) keeps bos/eos = 50256, outside the vocabulary: transformers only warns.
        "gpt2": ("GPT2LMHeadModel", transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2,
                                                            n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                                            attn_pdrop=0.0)),
        "t5": ("T5ForConditionalGeneration", transformers.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
            relative_attention_max_distance=20, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
            eos_token_id=1)),
        "bart": ("BartForConditionalGeneration", transformers.BartConfig(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=40,
            dropout=0.0, attention_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
            decoder_start_token_id=2)),
        # ModernBERT's default bos/eos/cls/sep ids (50281/50282) with a small vocabulary; pad must fit.
        "modernbert": ("ModernBertForMaskedLM", transformers.ModernBertConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
            local_attention=8, max_position_embeddings=64, pad_token_id=0)),
    }
    models = {}
    for family, (class_name, config) in configs.items():
        torch.manual_seed(seed)
        models[family] = getattr(transformers, class_name)(config).eval()
    return models


def _inputs() -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(5, VOCAB, (2, 9), generator=generator),
            "attention_mask": torch.ones(2, 9, dtype=torch.long),
            "decoder_input_ids": torch.randint(5, VOCAB, (2, 4), generator=generator)}


def _logits(model, family: str, inputs: dict) -> torch.Tensor:
    batch = {k: v for k, v in inputs.items() if k != "decoder_input_ids" or family in ("t5", "bart")}
    with torch.no_grad():
        return model(**batch).logits


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, wordpiece_tokenizer):
    """The checkpoint folders to upload, the reference logits, and the child's settings."""
    root = tmp_path_factory.mktemp("load-by-id")
    inputs = _inputs()
    save_file(inputs, root / "inputs.safetensors")
    models, uploads, families, references = _tiny_models(), [], {}, {}
    for family, model in models.items():
        folder = root / family
        model.save_pretrained(folder)
        wordpiece_tokenizer.save_pretrained(folder)
        families[family] = {"repo": f"alice/tiny-{family}", "folder": str(folder)}
        uploads.append({"repo": f"alice/tiny-{family}", "folder": str(folder)})
        references[family] = _logits(model, family, inputs)
    v2 = _tiny_models(seed=1)["gpt2"]  # other weights on branch v2 of the GPT-2 repo
    v2.save_pretrained(root / "gpt2-v2")
    uploads.append({"repo": "alice/tiny-gpt2", "folder": str(root / "gpt2-v2"), "branch": BRANCH})
    references["revision"] = _logits(v2, "gpt2", inputs)
    uploads.append({"repo": "alice/private-bert", "folder": str(root / "bert"), "private": True})
    # Only pickled weights (written here, never read by anything under test).
    pickles = root / "pickles"
    models["bert"].config.save_pretrained(pickles)
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(VOCAB, 32)}, pickles / "pytorch_model.bin")
    uploads.append({"repo": "alice/pickles-only", "folder": str(pickles)})
    # A family outside the nine.
    opt = transformers.OPTForCausalLM(transformers.OPTConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                                                             num_attention_heads=2, ffn_dim=32, word_embed_proj_dim=16,
                                                             max_position_embeddings=32))
    opt.save_pretrained(root / "opt")
    uploads.append({"repo": "alice/tiny-opt", "folder": str(root / "opt")})

    rows = [("good great happy", "positive"), ("bad sad small", "negative")] * 8
    (root / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    (root / "text.txt").write_text("".join(f"the {w} cat is in the city .\n" for w in ("good", "bad", "red") * 6))
    settings = {"families": families, "uploads": uploads, "branch": BRANCH, "private": "alice/private-bert",
                "pickles": "alice/pickles-only", "unsupported": "alice/tiny-opt", "inputs": str(root / "inputs.safetensors"),
                "csv": str(root / "train.csv"), "text": str(root / "text.txt")}
    return {"root": root, "settings": settings, "references": references, "tokenizer": wordpiece_tokenizer}


def _child(mode: str, checkpoints, env: dict) -> dict:
    work = checkpoints["root"] / mode
    work.mkdir(exist_ok=True)
    settings = {**checkpoints["settings"], "mode": mode, "work": str(work), "report": str(work / "report.json"),
                "outputs": str(work / "outputs.safetensors")}
    run_child("load_by_id_scenarios.py", settings, work / "config.json", env)
    report = json.loads((work / "report.json").read_text())
    report["outputs"] = load_file(work / "outputs.safetensors")
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def online(tmp_path_factory, checkpoints):
    home = checkpoints["root"] / "hf_home"
    with HubServer(tmp_path_factory.mktemp("hub-storage"), tokens={TOKEN: "alice"}) as hub:
        env = child_env(home, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1")
        report = _child("online", checkpoints, env)
    report["home"] = home
    return report


@pytest.fixture(scope="module")
def offline(online, checkpoints):
    """The same cache, HF_HUB_OFFLINE=1, and the Hub gone (its port is closed)."""
    env = child_env(online["home"], HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HUB_OFFLINE="1")
    return _child("offline", checkpoints, env)


def _ok(report, name):
    entry = report["steps"][name]
    assert entry["ok"], f"{report['mode']} {name} failed: {entry.get('traceback')}\n{entry.get('stderr')}"
    return entry


def _error(report, name, error_type="CheckpointSourceError"):
    entry = report["steps"][name]
    assert not entry["ok"], f"{report['mode']} {name} should have failed"
    assert entry["error_type"] == error_type, entry["traceback"]
    return entry["error"]


FAMILIES = ("bert", "roberta", "gpt2", "t5", "bart", "modernbert")
CLASSES = {"bert": "XfmrBertForMaskedLM", "roberta": "XfmrRobertaForMaskedLM", "gpt2": "XfmrGPTForCausalLM",
           "t5": "XfmrT5ForConditionalGeneration", "bart": "XfmrBartForConditionalGeneration",
           "modernbert": "XfmrModernBertForMaskedLM"}


@pytest.mark.parametrize("mode", ["online", "offline"])
@pytest.mark.parametrize("family", FAMILIES)
def test_load_by_repo_id_gives_the_transformers_outputs(mode, family, request, checkpoints):
    report = request.getfixturevalue(mode)
    expected = checkpoints["references"][family]
    for how in ("from_transformers", "from_pretrained"):
        entry = _ok(report, f"{how}/{family}")
        assert entry["type"] == CLASSES[family] and entry["model_type"].startswith("xfmr-")
        torch.testing.assert_close(report["outputs"][f"{how}/{family}"], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_revision_picks_the_branch(mode, request, checkpoints):
    report = request.getfixturevalue(mode)
    _ok(report, "revision")
    torch.testing.assert_close(report["outputs"]["revision"], checkpoints["references"]["revision"], atol=1e-5, rtol=0)
    assert not torch.allclose(checkpoints["references"]["revision"], checkpoints["references"]["gpt2"])


@pytest.mark.parametrize("family, ids", [
    ("gpt2", "bos_token_id=50256, eos_token_id=50256"),
    ("modernbert", "bos_token_id=50281, eos_token_id=50282"),
])
def test_special_ids_outside_the_vocabulary_convert_with_a_warning(online, family, ids):
    """Hardening 2, point 2: transformers' defaults with a smaller vocabulary convert; the ids are kept."""
    for how in ("from_transformers", "from_pretrained"):
        entry = _ok(online, f"{how}/{family}")
        assert any("outside its vocabulary" in w and ids in w for w in entry["warnings"]), entry["warnings"]
    assert _ok(online, "from_transformers/gpt2")["bos_token_id"] == 50256


def test_converted_outside_vocab_ids_round_trip(online, checkpoints):
    """`hf-xfmr convert` of the GPT-2 repo warns (naming the ids) and writes a checkpoint that loads back
    through AutoModel and to_transformers with the same ids and outputs."""
    assert _ok(online, "cli_convert")["value"] == 0
    assert "warning: The gpt2 config has special-token ids outside its vocabulary" in online["steps"]["cli_convert"][
        "stderr"]
    out = online["work"] / "converted-gpt2"
    assert {"tokenizer.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(model).__name__ == "XfmrGPTForCausalLM" and model.config.eos_token_id == 50256
    inputs = _inputs()
    torch.testing.assert_close(_logits(model, "gpt2", inputs), checkpoints["references"]["gpt2"], atol=1e-5, rtol=0)
    back = hf_xfmr.to_transformers(model)
    assert (back.config.bos_token_id, back.config.eos_token_id) == (50256, 50256)
    torch.testing.assert_close(_logits(back, "gpt2", inputs), checkpoints["references"]["gpt2"], atol=1e-5, rtol=0)
    assert _ok(online, "cli_convert_revision")["value"] == 0
    v2 = transformers.AutoModelForCausalLM.from_pretrained(online["work"] / "converted-gpt2-v2").eval()
    torch.testing.assert_close(_logits(v2, "gpt2", inputs), checkpoints["references"]["revision"], atol=1e-5, rtol=0)


def test_a_new_head_is_initialised_and_named(online):
    entry = _ok(online, "new_head")
    assert entry["type"] == "XfmrBertForSequenceClassification" and entry["num_labels"] == 2
    assert any("randomly initialised: " in w and "classifier.weight" in w for w in entry["warnings"]), entry["warnings"]


def test_finetune_from_a_repo_id(online, checkpoints):
    """`hf-xfmr finetune --model_name_or_path <id>` trains from the converted checkpoint with the repo's tokenizer."""
    assert _ok(online, "cli_finetune")["value"] == 0
    out = online["work"] / "finetune"
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["model_type"] == "xfmr-bert" and saved["architectures"] == ["XfmrBertForSequenceClassification"]
    assert json.loads((out / "finetune_args.json").read_text())["model_name_or_path"] == "alice/tiny-bert"
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "model")
    assert tokenizer.get_vocab() == checkpoints["tokenizer"].get_vocab()


def test_distill_and_pretrain_start_from_a_repo_id(online):
    assert _ok(online, "cli_distill")["value"] == 0
    assert json.loads((online["work"] / "distill" / "config.json").read_text())["model_type"] == "xfmr-roberta"
    assert _ok(online, "cli_pretrain")["value"] == 0, online["steps"]["cli_pretrain"]["stderr"]


def test_private_repo_needs_a_token(online, checkpoints):
    _ok(online, "private_with_token")  # HF_TOKEN, read by huggingface_hub itself
    torch.testing.assert_close(online["outputs"]["private_with_token"], checkpoints["references"]["bert"], atol=1e-5,
                               rtol=0)
    message = _error(online, "private_without_token")
    assert "'alice/private-bert' is not a local folder" in message and "HF_TOKEN" in message


def test_clear_errors_for_bad_sources(online):
    message = _error(online, "missing_repo")
    assert "'alice/no-such-model' is not a local folder" in message and "check the id" in message
    message = _error(online, "missing_revision")
    assert "has no revision 'no-such-branch'" in message
    for step in ("pickles_only", "pickles_only_from_pretrained"):
        message = _error(online, step)
        assert "pytorch_model.bin" in message and "never loads pickles" in message, message
        assert ("transformers.BertForMaskedLM.from_pretrained('alice/pickles-only', use_safetensors=False)"
                ".save_pretrained(FOLDER)") in message
    message = _error(online, "unsupported_type", "ValueError")
    assert "'opt'" in message and "supported: albert, bart, bert, big_bird, bigbird_pegasus, distilbert, electra, gpt2" in message
    message = _error(online, "wrong_family", "ValueError")
    assert "XfmrGPTForCausalLM cannot load alice/tiny-bert: it is a 'bert' checkpoint" in message
    assert "hf_xfmr.from_transformers" in message
    entry = online["steps"]["cli_finetune_missing"]
    assert entry["value"] == 2 and "--model_name_or_path alice/no-such-model: 'alice/no-such-model' is not a local" \
        in entry["stderr"]


def test_pickled_weights_were_never_downloaded(online):
    assert not [p for p in Path(online["home"]).rglob("*") if p.suffix in (".bin", ".pt", ".pth")]


def test_offline_without_a_cached_copy(offline):
    message = _error(offline, "not_cached_offline")
    assert "'alice/never-downloaded' is not a local folder; as a Hub repo it is not in the local Hugging Face cache" \
        in message and "HF_HUB_OFFLINE=1 forbids downloading" in message
    message = _error(offline, "not_cached_network_down")
    assert "could not be reached" in message and "HF_ENDPOINT" in message


@pytest.mark.parametrize("src, expected", [
    ("google-bert/bert-base-uncased", True), ("gpt2", True), ("./model", False), ("/abs/model", False),
    ("~/model", False), ("a/b/c", False), ("not a repo", False),
])
def test_what_counts_as_a_repo_id(src, expected):
    assert is_hub_repo_id(src) is expected


def test_an_existing_folder_is_never_a_repo_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert not is_hub_repo_id("org/name")
    with pytest.raises(FileNotFoundError, match="is not a checkpoint: it has no config.json"):
        hf_xfmr.from_transformers("org/name")
    assert issubclass(CheckpointSourceError, FileNotFoundError) and issubclass(CheckpointSourceError, ValueError)


# -- `Xfmr*.from_pretrained` of a transformers folder: the usual keywords ------------------------------------

def _bert_classifier(folder, num_labels=3):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64, num_labels=num_labels,
                                     **NO_DROPOUT)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    return model


def test_from_pretrained_keywords_reach_the_converted_model(tmp_path):
    from hf_xfmr.models.bert import XfmrBertForSequenceClassification

    ref = _bert_classifier(tmp_path / "clf")
    labels = {0: "neg", 1: "neutral", 2: "pos"}
    model, info = XfmrBertForSequenceClassification.from_pretrained(
        tmp_path / "clf", id2label=labels, attn_implementation="eager", unpad_inputs=False, dtype=torch.float64,
        output_loading_info=True)
    assert not info["missing_keys"] and model.config.id2label == labels and not model.training
    assert model.config._attn_implementation == "eager" and model.config.unpad_inputs is False
    assert model.dtype == torch.float64
    inputs = _inputs()
    inputs["attention_mask"][1, -3:] = 0
    batch = {k: v for k, v in inputs.items() if k != "decoder_input_ids"}
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits.float(), ref(**batch).logits, atol=1e-5, rtol=0)
    # A config of ours is converted to transformers' for loading; the fields only ours has are kept.
    again = XfmrBertForSequenceClassification.from_pretrained(tmp_path / "clf", config=model.config)
    assert again.config.unpad_inputs is False and again.config.id2label == labels
    assert torch.equal(again.classifier.weight, model.classifier.weight.float())


def test_from_pretrained_new_sizes_need_ignore_mismatched_sizes(tmp_path):
    from hf_xfmr.models.bert import XfmrBertForSequenceClassification
    from hf_xfmr.models.conversion import ConversionWarning

    _bert_classifier(tmp_path / "clf", num_labels=3)
    with pytest.raises(ValueError, match=r"classifier.weight: \(3, 32\) in the weights.*ignore_mismatched_sizes=True"):
        XfmrBertForSequenceClassification.from_pretrained(tmp_path / "clf", num_labels=2)
    with pytest.warns(ConversionWarning, match=r"randomly initialised: .*classifier\.weight"):
        model = XfmrBertForSequenceClassification.from_pretrained(tmp_path / "clf", num_labels=2,
                                                                  ignore_mismatched_sizes=True)
    assert model.classifier.weight.shape == (2, 32)


def test_from_pretrained_refuses_what_it_cannot_convert(tmp_path):
    from hf_xfmr.models.bert import XfmrBertForSequenceClassification, XfmrBertModel
    from hf_xfmr.models.gpt import XfmrGPTConfig, XfmrGPTModel

    _bert_classifier(tmp_path / "clf")
    with pytest.raises(TypeError, match="positional model arguments"):
        XfmrBertForSequenceClassification.from_pretrained(tmp_path / "clf", "extra")
    with pytest.raises(ValueError, match="safetensors weights only"):
        XfmrBertForSequenceClassification.from_pretrained(tmp_path / "clf", use_safetensors=False)
    XfmrGPTModel(XfmrGPTConfig.from_preset("tiny")).save_pretrained(tmp_path / "ours-gpt")
    with pytest.raises(ValueError, match="XfmrBertModel cannot load .*ours-gpt: it holds an hf_xfmr 'xfmr-gpt' model"):
        XfmrBertModel.from_pretrained(tmp_path / "ours-gpt")
