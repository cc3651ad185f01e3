import torch

from hf_xfmr.layers.norms import RMSNorm, layer_norm


def test_rmsnorm_matches_formula():
    torch.manual_seed(0)
    norm = RMSNorm(16, eps=1e-5)
    assert torch.equal(norm.weight, torch.ones(16))
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 4, 16) * 3
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), expected)


def test_rmsnorm_bf16_computed_in_float32():
    torch.manual_seed(0)
    norm = RMSNorm(64)
    x = (torch.randn(8, 64) * 100).bfloat16()
    out = norm(x)
    assert out.dtype == torch.bfloat16
    # Identical to the float32 computation rounded once at the end.
    assert torch.equal(out, norm(x.float()).bfloat16())


def test_layer_norm_helper():
    ln = layer_norm(16, eps=1e-12, bias=False)
    assert isinstance(ln, torch.nn.LayerNorm) and ln.bias is None and ln.eps == 1e-12
    assert layer_norm(16).bias is not None
    x = torch.randn(2, 16)
    var = x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(ln(x), (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-12))
