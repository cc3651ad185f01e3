"""Loading checkpoint folders for conversion: broken weights, mis-sized configs and missing parameters are
reported clearly (the `hf-xfmr convert` command shows the same messages)."""

import warnings

import pytest
import torch
import transformers

import hf_xfmr
from hf_xfmr.models.conversion import ConversionWarning, load_checkpoint

from .conftest import tiny_hf_config


@pytest.fixture
def mlm_checkpoint(tmp_path):
    transformers.BertForMaskedLM(tiny_hf_config("bert")).save_pretrained(tmp_path / "mlm")
    return tmp_path / "mlm"


def test_base_from_an_mlm_checkpoint_warns_about_the_pooler(mlm_checkpoint):
    with pytest.warns(ConversionWarning, match=r"randomly initialised: pooler\.dense\.bias, pooler\.dense\.weight"):
        model = hf_xfmr.from_transformers(mlm_checkpoint, task="base")
    assert type(model).__name__ == "XfmrBertModel" and model.pooler is not None
    # The head of the checkpoint itself loads every weight: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConversionWarning)
        hf_xfmr.from_transformers(mlm_checkpoint)


def test_a_new_head_is_named_in_the_warning(mlm_checkpoint):
    with pytest.warns(ConversionWarning, match=r"classifier\.weight"):
        hf_xfmr.from_transformers(mlm_checkpoint, task="sequence-classification")


@pytest.mark.parametrize("damage", ["truncate", "empty"])
def test_broken_weights(mlm_checkpoint, damage):
    weights = mlm_checkpoint / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-100] if damage == "truncate" else b"")
    with pytest.raises(ValueError, match="not a valid safetensors file .* probably truncated or empty"):
        hf_xfmr.from_transformers(mlm_checkpoint)
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        load_checkpoint(mlm_checkpoint)


def test_pickled_weights_are_never_loaded(mlm_checkpoint):
    (mlm_checkpoint / "model.safetensors").unlink()
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(99, 32)}, mlm_checkpoint / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="safetensors weights only"):
        hf_xfmr.from_transformers(mlm_checkpoint)


def test_config_that_does_not_match_the_weights(mlm_checkpoint):
    config = transformers.BertConfig.from_pretrained(mlm_checkpoint)
    config.intermediate_size = 40
    config.save_pretrained(mlm_checkpoint)
    with pytest.raises(ValueError, match=r"do not match the sizes in its config.json \(6 tensors\).*\(37, 32\) in the "
                                         r"weights, \(40, 32\) from config.json"):
        hf_xfmr.from_transformers(mlm_checkpoint)
