import pytest
import torch
import torch.nn as nn

from hf_xfmr.layers.init import normal_init_, truncated_normal_init_
from hf_xfmr.layers.norms import RMSNorm

STD = 0.02


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def test_normal_init_linear():
    linear = nn.Linear(256, 512)
    normal_init_(linear, STD)
    assert abs(linear.weight.std().item() - STD) < 0.02 * STD * 5
    assert abs(linear.weight.mean().item()) < 1e-3
    assert (linear.bias == 0).all()


def test_normal_init_embedding_zeroes_padding_row():
    emb = nn.Embedding(1000, 64, padding_idx=3)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    normal_init_(emb, STD)
    assert (emb.weight[3] == 0).all()
    others = torch.cat([emb.weight[:3], emb.weight[4:]])
    assert abs(others.std().item() - STD) < 0.05 * STD
    assert (others != 0).all()


@pytest.mark.parametrize("init_fn", [normal_init_, truncated_normal_init_])
def test_norms_reset_to_identity(init_fn):
    for norm in (nn.LayerNorm(8), nn.LayerNorm(8, bias=False), RMSNorm(8)):
        with torch.no_grad():
            for p in norm.parameters():
                p.uniform_(2, 3)
        init_fn(norm, STD)
        assert (norm.weight == 1).all()
        assert getattr(norm, "bias", None) is None or (norm.bias == 0).all()


def test_truncated_normal_init():
    linear = nn.Linear(256, 512)
    truncated_normal_init_(linear, STD, cutoff_factor=2.0)
    w = linear.weight
    assert w.abs().max().item() <= 2.0 * STD
    assert w.abs().max().item() > 1.9 * STD  # the cut-off is reached, not a narrower one
    assert abs(w.std().item() - 0.88 * STD) < 0.05 * STD  # std of N(0, 1) truncated at +-2 is ~0.88
    assert (linear.bias == 0).all()
    emb = nn.Embedding(100, 16, padding_idx=0)
    truncated_normal_init_(emb, STD, cutoff_factor=3.0)
    assert (emb.weight[0] == 0).all() and emb.weight.abs().max().item() <= 3.0 * STD


@pytest.mark.parametrize("init_fn", [normal_init_, truncated_normal_init_])
def test_loaded_weights_are_not_overwritten(init_fn):
    # transformers flags tensors loaded from a checkpoint; init must leave them alone.
    emb, linear = nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 4)
    for p in (emb.weight, linear.weight, linear.bias):
        with torch.no_grad():
            p.fill_(5.0)
        p._is_hf_initialized = True
    init_fn(emb, STD)
    init_fn(linear, STD)
    assert (emb.weight == 5).all() and (linear.weight == 5).all() and (linear.bias == 5).all()
