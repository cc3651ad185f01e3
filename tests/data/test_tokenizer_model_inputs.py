"""A saved tokenizer emits exactly what its model takes, for all nine architectures (Hardening 2, point 1).

DistilBERT shares BERT's WordPiece recipe but takes no `token_type_ids`: its tokenizer used to emit them, so
the folders `hf-xfmr pretrain --arch distilbert` and `hf-xfmr distill` wrote failed in `pipeline("fill-mask")`,
in `hf-xfmr finetune` and in the exported card's snippet. Each test builds what hf_xfmr builds (its tokenizer
recipe, a tiny model), saves both to one folder and uses that folder the way a user would.
"""

import copy
import inspect
import json
import warnings

import pytest
import torch
import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline

from hf_xfmr.data import default_corpus
from hf_xfmr.data.tokenizers import fit_tokenizer_to_model, model_input_names, train_tokenizer
from hf_xfmr.models import get_architecture

from tests.cli_run import run_cli

ARCHS = ("bert", "roberta", "albert", "distilbert", "gpt", "xlnet", "modernbert", "t5", "bart")
# Segment-aware architectures (their base model takes token types and their recipe marks the second segment).
WITH_TOKEN_TYPES = {"bert", "albert", "xlnet"}
# The pipeline of each architecture's natural task; every one also gets `text-classification` (the finetune
# head). transformers 5.24 has no text2text-generation pipeline, so T5 and BART are checked through that one.
NATURAL = {"bert": ("masked-lm", "fill-mask"), "roberta": ("masked-lm", "fill-mask"),
           "albert": ("masked-lm", "fill-mask"), "distilbert": ("masked-lm", "fill-mask"),
           "modernbert": ("masked-lm", "fill-mask"), "gpt": ("causal-lm", "text-generation"),
           "xlnet": ("causal-lm", "text-generation")}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "mask_token_id")


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    """The suite's `one_thread` (tests/conftest.py), for every test here."""
    yield


@pytest.fixture(scope="module")
def documents():
    return default_corpus(max_documents=40)


@pytest.fixture(scope="module")
def tokenizers(documents):
    """Each architecture's tokenizer, trained as `hf-xfmr pretrain` trains it (`train_tokenizer(arch)`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the small corpus gives fewer tokens than asked
        return {arch: train_tokenizer(arch, documents, vocab_size=500) for arch in ARCHS}


def base_forward_parameters(arch: str) -> set[str]:
    return set(inspect.signature(get_architecture(arch).model_class("base").forward).parameters)


def tiny_model(arch: str, task: str, tokenizer):
    """A tiny `task` model of `arch` sized and wired to `tokenizer`, as `hf-xfmr pretrain` builds its config."""
    spec = get_architecture(arch)
    fields = spec.config_class().to_dict()
    ids = {name: getattr(tokenizer, name) for name in TOKEN_IDS
           if name in fields and getattr(tokenizer, name, None) is not None}
    config = spec.config_class.from_preset("tiny", vocab_size=len(tokenizer), **ids)
    torch.manual_seed(0)
    return spec.model_class(task)(config).eval()


def test_model_input_names_follow_each_model(tokenizers, documents):
    for arch in ARCHS:
        expected = ["input_ids", "token_type_ids", "attention_mask"] if arch in WITH_TOKEN_TYPES else \
            ["input_ids", "attention_mask"]
        assert model_input_names(arch) == expected, arch
        assert set(expected) <= base_forward_parameters(arch), arch
        assert tokenizers[arch].model_input_names == expected, arch
        assert sorted(tokenizers[arch]("a short text", "and its pair")) == sorted(expected), arch
    # The same answer from a config or a model as from the name.
    config = get_architecture("distilbert").config_class.from_preset("tiny")
    assert model_input_names(config) == model_input_names("distilbert") == ["input_ids", "attention_mask"]
    # A bare kind keeps its style's segments: "wordpiece" is BERT's recipe without an architecture.
    assert train_tokenizer("wordpiece", documents, vocab_size=200).model_input_names == \
        ["input_ids", "token_type_ids", "attention_mask"]


@pytest.mark.parametrize("arch", ARCHS)
def test_saved_tokenizer_and_model_run_in_a_pipeline(arch, tokenizers, tmp_path):
    tokenizer = tokenizers[arch]
    tasks = [NATURAL[arch]] if arch in NATURAL else []
    tasks.append(("sequence-classification", "text-classification"))
    for task, pipeline_task in tasks:
        folder = tmp_path / task
        tiny_model(arch, task, tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        saved = json.loads((folder / "tokenizer_config.json").read_text())["model_input_names"]
        assert saved == model_input_names(arch)
        loaded = AutoTokenizer.from_pretrained(folder)
        assert set(loaded("some text")) == set(saved) <= base_forward_parameters(arch)

        pipe = pipeline(pipeline_task, model=str(folder), device="cpu")
        if pipeline_task == "fill-mask":
            out = pipe(f"the {tokenizer.mask_token} of a list", top_k=2)
            assert len(out) == 2 and all(isinstance(o["token_str"], str) for o in out)
        elif pipeline_task == "text-generation":
            out = pipe("the value of", max_new_tokens=3, do_sample=False)
            assert out[0]["generated_text"].startswith("the value of")
        else:
            out = pipe("the value of a list")
            assert out[0]["label"] in pipe.model.config.id2label.values() and 0 <= out[0]["score"] <= 1


def test_fit_tokenizer_to_model_survives_saving_and_leaves_other_models_alone(documents, tmp_path):
    bert_tok = train_tokenizer("bert", documents, vocab_size=200)
    student = tiny_model("distilbert", "masked-lm", bert_tok)
    assert fit_tokenizer_to_model(bert_tok, student) is bert_tok
    assert bert_tok.model_input_names == ["input_ids", "attention_mask"]
    bert_tok.save_pretrained(tmp_path / "tok")
    assert set(AutoTokenizer.from_pretrained(tmp_path / "tok")("a", "b")) == {"input_ids", "attention_mask"}
    # A tokenizer built directly (transformers 5's default inputs, none named in its init_kwargs) fitted to a
    # BERT model emits token types, also once saved and loaded; the tokenizer it was copied from is unchanged.
    built = PreTrainedTokenizerFast(tokenizer_object=bert_tok.backend_tokenizer, pad_token="[PAD]", unk_token="[UNK]")
    assert built.model_input_names == ["input_ids", "attention_mask"]
    fitted = fit_tokenizer_to_model(copy.copy(built), tiny_model("bert", "base", bert_tok))
    fitted.save_pretrained(tmp_path / "built")
    assert set(AutoTokenizer.from_pretrained(tmp_path / "built")("a", "b")) == \
        {"input_ids", "token_type_ids", "attention_mask"}
    assert built.model_input_names == ["input_ids", "attention_mask"] and "model_input_names" not in built.init_kwargs
    # A model of another library: nothing known about it, nothing changed.
    other = train_tokenizer("bert", documents, vocab_size=200)
    reference = transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
        vocab_size=len(other), dim=16, n_layers=1, n_heads=2, hidden_dim=32))
    fit_tokenizer_to_model(other, reference)
    assert other.model_input_names == ["input_ids", "token_type_ids", "attention_mask"]


def test_export_saves_a_tokenizer_the_model_takes(tmp_path, tokenizers):
    """`hub.export` of a DistilBERT given a BERT tokenizer: the folder's tokenizer emits no token types, the
    card's `pipeline("fill-mask", ..., trust_remote_code=True)` works, and the caller's tokenizer is unchanged."""
    from hf_xfmr.hub import export

    bert_tok = tokenizers["bert"]
    model = tiny_model("distilbert", "masked-lm", bert_tok)
    folder = export(model, bert_tok, tmp_path / "export")
    assert bert_tok.model_input_names == ["input_ids", "token_type_ids", "attention_mask"]
    saved = json.loads((folder / "tokenizer_config.json").read_text())["model_input_names"]
    assert saved == ["input_ids", "attention_mask"]
    pipe = pipeline("fill-mask", model=str(folder), trust_remote_code=True, device="cpu")
    assert len(pipe(f"the {bert_tok.mask_token} of a list", top_k=2)) == 2


def test_pretrained_distilbert_folder_fills_masks_and_finetunes(tmp_path, capsys, documents):
    """The folder `hf-xfmr pretrain --arch distilbert` writes (tokenizer trained on the fly) works in
    `pipeline("fill-mask")` and in `hf-xfmr finetune`, full and with --lora; the LoRA run is given a tokenizer
    that still emits token types (a BERT teacher's, or one saved by an earlier hf_xfmr), which finetune fits."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(doc) for doc in documents[:30]) + "\n")
    pretrained = tmp_path / "pretrained"
    status, _, err = run_cli(["pretrain", "--arch", "distilbert", "--dataset", str(corpus), "--vocab_size", "300",
                              "--max_steps", "2", "--per_device_train_batch_size", "4", "--max_seq_length", "32",
                              "--eval_fraction", "0", "--save_steps", "0", "--no_progress_bar",
                              "--no_report_to_tensorboard", "--output_dir", str(pretrained)], capsys)
    assert status == 0, err
    assert json.loads((pretrained / "tokenizer_config.json").read_text())["model_input_names"] == \
        ["input_ids", "attention_mask"]
    mask = AutoTokenizer.from_pretrained(pretrained).mask_token
    assert len(pipeline("fill-mask", model=str(pretrained), device="cpu")(f"the {mask} of a list", top_k=2)) == 2

    old_style = AutoTokenizer.from_pretrained(pretrained)
    old_style.model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    old_style.save_pretrained(tmp_path / "old-style-tokenizer")

    rows = [("good great happy", "positive"), ("bad sad small", "negative")] * 8
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in rows))
    for lora in ([], ["--lora", "--tokenizer_name_or_path", str(tmp_path / "old-style-tokenizer")]):
        out = tmp_path / ("lora" if lora else "full")
        status, printed, err = run_cli(
            ["finetune", "--model_name_or_path", str(pretrained), "--train_file", str(train), "--validation_file",
             str(train), "--max_steps", "2", "--max_seq_length", "16", "--use_cpu", "--disable_tqdm", "true",
             "--output_dir", str(out), *lora], capsys)
        assert status == 0, err
        assert "eval_accuracy:" in printed
        saved = out / ("adapter" if lora else "model") / "tokenizer_config.json"
        assert json.loads(saved.read_text())["model_input_names"] == ["input_ids", "attention_mask"]


def test_tokenizer_command_line_takes_both_spellings_and_the_architecture(tmp_path, documents):
    """`python -m hf_xfmr.data.tokenizers --kind distilbert` saves a tokenizer without token types; its options
    take underscores as well as dashes, as `hf-xfmr` options do."""
    from hf_xfmr.data.tokenizers import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"content": " ".join(doc)}) + "\n" for doc in documents[:20]))
    main(["--kind", "distilbert", "--corpus", str(corpus), "--text_column", "content", "--vocab_size", "300",
          "--min-frequency", "2", "--out", str(tmp_path / "tok")])
    saved = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert saved["model_input_names"] == ["input_ids", "attention_mask"]
