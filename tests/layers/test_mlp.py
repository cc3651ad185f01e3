import math

import pytest
import torch
import torch.nn.functional as F

from hf_xfmr.layers.mlp import ACTIVATIONS, GLU, MLP, get_activation

X = torch.linspace(-5, 5, 101)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    "name, reference",
    [
        ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
        ("gelu_new", gelu_tanh),
        ("gelu_pytorch_tanh", gelu_tanh),
        ("relu", F.relu),
        ("silu", lambda x: x * torch.sigmoid(x)),
        ("swish", lambda x: x * torch.sigmoid(x)),
    ],
)
def test_activation_values(name, reference):
    torch.testing.assert_close(get_activation(name)(X), reference(X), atol=1e-6, rtol=1e-6)


def test_gelu_is_exact_not_tanh():
    x = torch.tensor([-3.0, -1.5, 1.0])
    assert not torch.allclose(get_activation("gelu")(x), gelu_tanh(x), atol=1e-5, rtol=0)


def test_every_listed_activation_resolves():
    assert set(ACTIVATIONS) == {"gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish"}
    for name in ACTIVATIONS:
        assert isinstance(get_activation(name), torch.nn.Module)


def test_unknown_activation_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_activation("tanhh")
    assert "'tanhh'" in str(err.value)
    assert all(name in str(err.value) for name in ACTIVATIONS)


def test_mlp_shapes_and_formula():
    torch.manual_seed(0)
    mlp = MLP(8, 32, activation="relu").eval()
    assert mlp.up_proj.weight.shape == (32, 8) and mlp.down_proj.weight.shape == (8, 32)
    assert mlp.up_proj.bias is not None and MLP(8, 32, bias=False).up_proj.bias is None
    x = torch.randn(2, 5, 8)
    out = mlp(x)
    assert out.shape == (2, 5, 8)
    hidden = F.relu(x @ mlp.up_proj.weight.T + mlp.up_proj.bias)
    torch.testing.assert_close(out, hidden @ mlp.down_proj.weight.T + mlp.down_proj.bias)


def test_mlp_dropout_on_output_only_in_training():
    mlp = MLP(8, 16, dropout=0.5)
    x = torch.randn(4, 8)
    assert torch.equal(mlp.eval()(x), mlp.eval()(x))
    torch.manual_seed(0)
    out = mlp.train()(x)
    assert (out == 0).any() and not torch.allclose(out, mlp.eval()(x))


def test_glu_shapes():
    glu = GLU(8, 16)
    assert glu.up_proj.weight.shape == (32, 8) and glu.down_proj.weight.shape == (8, 16)
    assert glu.up_proj.bias is None and glu.down_proj.bias is None  # ModernBERT default
    assert glu(torch.randn(2, 3, 8)).shape == (2, 3, 8)


def test_glu_hand_computed_activation_on_first_half():
    glu = GLU(2, 1, activation="gelu").eval()
    with torch.no_grad():
        glu.up_proj.weight.copy_(torch.eye(2))  # x_in = x[0], gate = x[1]
        glu.down_proj.weight.copy_(torch.tensor([[2.0], [3.0]]))
    gelu_1 = 0.8413447460685429  # Phi(1)
    out = glu(torch.tensor([[1.0, 3.0]]))
    torch.testing.assert_close(out, torch.tensor([[2 * 3 * gelu_1, 3 * 3 * gelu_1]]))
    gelu_3 = 3 * 0.9986501019683699  # swapped halves give a different value: order matters
    torch.testing.assert_close(glu(torch.tensor([[3.0, 1.0]])), torch.tensor([[2 * gelu_3, 3 * gelu_3]]))


def test_glu_dropout_before_down_proj():
    glu = GLU(4, 64, bias=True, dropout=1.0)
    torch.manual_seed(0)
    # everything dropped: only the down_proj bias is left
    torch.testing.assert_close(glu.train()(torch.randn(3, 4)), glu.down_proj.bias.expand(3, 4))
