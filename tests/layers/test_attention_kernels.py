import pytest
import torch
import torch.nn as nn

from hf_xfmr.layers.attention import (
    attention_kernel,
    eager_attention_forward,
    flash_varlen_attention,
    resolve_kernel,
    resolve_varlen_kernel,
    sdpa_attention_forward,
    sdpa_unchecked_forward,
    varlen_attention_reference,
)
from hf_xfmr.layers.fused_dropout import attention_with_dropout
from hf_xfmr.layers.masks import (
    block_diagonal_mask,
    causal_mask,
    padding_mask,
    sliding_window_mask,
    to_additive_mask,
)

B, H, T, D = 2, 3, 5, 8


def make_qkv(tq=T, tk=T, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(B, H, t, D, generator=g, dtype=dtype).requires_grad_(requires_grad) for t in (tq, tk, tk)
    )
    return q, k, v


def naive_attention(q, k, v, mask, scaling):
    """softmax(q k^T * scaling) v written out in float64, masked keys removed; empty rows -> 0."""
    q, k, v = q.double(), k.double(), v.double()
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scaling
    keep = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    weights = torch.exp(scores - scores.max(-1, keepdim=True).values) * keep
    denom = weights.sum(-1, keepdim=True)
    weights = torch.where(denom > 0, weights / denom.clamp_min(1e-300), torch.zeros_like(weights))
    return torch.einsum("bhij,bhjd->bihd", weights, v), weights


def fully_masked_rows_mask():
    mask = causal_mask(T).expand(B, 1, T, T).clone()
    mask[0, 0, 2] = False  # batch 0, query 2 sees nothing
    mask[1, 0, 0] = False
    return mask


MASKS = {
    "none": lambda: None,
    "padding": lambda: padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])),
    "causal": lambda: causal_mask(T),
    "block_diagonal": lambda: block_diagonal_mask(torch.tensor([[0, 0, 1, 1, -1], [0, 1, 1, 2, 2]])),
    "fully_masked_rows": fully_masked_rows_mask,
}


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_kernels_match_naive_formula(kernel, mask_name):
    q, k, v = make_qkv()
    mask = MASKS[mask_name]()
    out, _ = kernel(None, q, k, v, mask)
    expected, _ = naive_attention(q, k, v, mask, D**-0.5)
    assert out.shape == (B, T, H, D) and out.is_contiguous()
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mask_name", list(MASKS))
def test_eager_matches_sdpa(mask_name):
    q, k, v = make_qkv()
    mask = MASKS[mask_name]()
    eager, weights = eager_attention_forward(None, q, k, v, mask)
    sdpa, none = sdpa_attention_forward(None, q, k, v, mask)
    assert none is None and weights.shape == (B, H, T, T)
    torch.testing.assert_close(eager, sdpa, atol=1e-6, rtol=0)


def test_eager_weights_are_the_probabilities():
    q, k, v = make_qkv()
    mask = MASKS["block_diagonal"]()
    _, weights = eager_attention_forward(None, q, k, v, mask)
    _, expected = naive_attention(q, k, v, mask, D**-0.5)
    torch.testing.assert_close(weights.double(), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_fully_masked_rows_give_zeros(kernel):
    q, k, v = make_qkv()
    for mask in (fully_masked_rows_mask(), to_additive_mask(fully_masked_rows_mask(), torch.float32)):
        out, _ = kernel(None, q, k, v, mask)
        assert not out.isnan().any()
        assert (out[0, 2] == 0).all() and (out[1, 0] == 0).all()
        assert (out[0, 3].abs() > 0).any()


@pytest.mark.parametrize("mask_name", ["padding", "causal", "block_diagonal", "fully_masked_rows"])
@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_bool_and_additive_masks_agree(kernel, mask_name):
    q, k, v = make_qkv()
    mask = MASKS[mask_name]()
    out_bool, _ = kernel(None, q, k, v, mask)
    out_float, _ = kernel(None, q, k, v, to_additive_mask(mask, torch.float32))
    out_inf, _ = kernel(None, q, k, v, torch.zeros(mask.shape).masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(out_bool, out_float, atol=1e-6, rtol=0)
    torch.testing.assert_close(out_bool, out_inf, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_dropout_only_in_training(kernel):
    q, k, v = make_qkv()
    module = nn.Module()
    reference, _ = kernel(module.eval(), q, k, v, None)
    evaluated, _ = kernel(module.eval(), q, k, v, None, dropout=0.5)
    assert torch.equal(evaluated, reference)
    torch.manual_seed(0)
    trained, _ = kernel(module.train(), q, k, v, None, dropout=0.5)
    assert not torch.allclose(trained, reference)
    torch.manual_seed(0)
    bare, _ = kernel(None, q, k, v, None, dropout=0.5)  # no module: treated as training
    assert not torch.allclose(bare, reference)


@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_custom_scaling_and_different_key_length(kernel):
    q, k, v = make_qkv(tq=3, tk=6)
    mask = causal_mask(3, 6)
    out, _ = kernel(None, q, k, v, mask, scaling=0.3)
    expected, _ = naive_attention(q, k, v, mask, 0.3)
    assert out.shape == (B, 3, H, D)
    torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
def test_is_causal_flag(kernel):
    q, k, v = make_qkv()
    plain, _ = kernel(None, q, k, v, None)
    flagged, _ = kernel(None, q, k, v, None, is_causal=True)
    masked, _ = kernel(None, q, k, v, causal_mask(T))
    assert not torch.allclose(plain, masked)  # never causal by default
    torch.testing.assert_close(flagged, masked, atol=1e-6, rtol=0)
    pad = MASKS["padding"]()  # is_causal combines with an explicit bool or additive mask
    expected, _ = kernel(None, q, k, v, pad & causal_mask(T))
    for mask in (pad, to_additive_mask(pad, torch.float32)):
        both, _ = kernel(None, q, k, v, mask, is_causal=True)
        torch.testing.assert_close(both, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("mask_name", ["padding", "block_diagonal", "fully_masked_rows"])
def test_gradients_eager_match_sdpa(mask_name):
    mask = MASKS[mask_name]()
    grads = []
    for kernel in (eager_attention_forward, sdpa_attention_forward):
        q, k, v = make_qkv(requires_grad=True)
        out, _ = kernel(None, q, k, v, mask)
        (out * torch.linspace(-1, 1, D)).sum().backward()
        grads.append((q.grad, k.grad, v.grad))
    for eager_grad, sdpa_grad in zip(*grads):
        assert torch.isfinite(eager_grad).all() and torch.isfinite(sdpa_grad).all()
        torch.testing.assert_close(eager_grad, sdpa_grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", [eager_attention_forward, sdpa_attention_forward])
@pytest.mark.parametrize("fill", [float("-inf"), torch.finfo(torch.float32).min])
def test_fully_masked_rows_have_finite_gradients_with_additive_masks(kernel, fill):
    q, k, v = make_qkv(requires_grad=True)
    mask = fully_masked_rows_mask()
    out, _ = kernel(None, q, k, v, torch.zeros(mask.shape).masked_fill(~mask, fill))
    out.sum().backward()
    for grad in (q.grad, k.grad, v.grad):
        assert torch.isfinite(grad).all()
    assert (q.grad[0, :, 2] == 0).all()  # a query that sees nothing gets no gradient


def test_eager_bf16_returns_input_dtype():
    q, k, v = make_qkv(dtype=torch.bfloat16)
    out, weights = eager_attention_forward(None, q, k, v, MASKS["padding"]())
    assert out.dtype == torch.bfloat16 and weights.dtype == torch.bfloat16
    reference, _ = eager_attention_forward(None, q.float(), k.float(), v.float(), MASKS["padding"]())
    torch.testing.assert_close(out.float(), reference, atol=3e-2, rtol=3e-2)


CU_SEQLENS = torch.tensor([0, 3, 7, 8, 13], dtype=torch.int32)


def per_sequence_attention(q, k, v, cu_seqlens, window=None):
    outs = []
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))  # (1, H, L, D)
        mask = None if window is None else sliding_window_mask(end - start, window)
        out, _ = naive_attention(qs, ks, vs, mask, D**-0.5)
        outs.append(out[0])  # (L, H, D)
    return torch.cat(outs)


@pytest.mark.parametrize("window", [None, 2, 4])
def test_varlen_reference_equals_separate_sequences(window):
    g = torch.Generator().manual_seed(1)
    n = int(CU_SEQLENS[-1])
    q, k, v = (torch.randn(n, H, D, generator=g) for _ in range(3))
    out = varlen_attention_reference(q, k, v, CU_SEQLENS, window=window)
    assert out.shape == (n, H, D)
    expected = per_sequence_attention(q, k, v, CU_SEQLENS, window)
    torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=1e-5)


def test_varlen_reference_matches_padded_attention():
    from hf_xfmr.layers.padding import unpad_input

    attention_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    q, k, v = make_qkv(seed=3)
    padded, _ = sdpa_attention_forward(None, q, k, v, padding_mask(attention_mask))  # (B, T, H, D)
    unpadded = [unpad_input(t.transpose(1, 2), attention_mask) for t in (q, k, v)]  # (N, H, D) each
    (qu, indices, cu_seqlens, _), (ku, *_), (vu, *_) = unpadded
    out = varlen_attention_reference(qu, ku, vu, cu_seqlens)
    torch.testing.assert_close(out, padded.reshape(B * T, H, D)[indices], atol=1e-6, rtol=0)


def test_varlen_reference_dropout_only_when_training():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(8, H, D, generator=g) for _ in range(3))
    cu = CU_SEQLENS[:4]
    reference = varlen_attention_reference(q, k, v, cu)
    assert torch.equal(varlen_attention_reference(q, k, v, cu, dropout=0.5), reference)
    torch.manual_seed(0)
    assert not torch.allclose(varlen_attention_reference(q, k, v, cu, dropout=0.5, training=True), reference)


def test_attention_kernel_lookup():
    assert attention_kernel("eager") is eager_attention_forward
    assert attention_kernel("sdpa") is sdpa_attention_forward
    with pytest.raises(ValueError) as err:
        attention_kernel("nope")
    for name in ("'nope'", "eager", "sdpa", "flash_attention_2"):
        assert name in str(err.value)


def test_models_resolve_ours_first_then_transformers_registry():
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert resolve_kernel("eager") is eager_attention_forward
    assert resolve_kernel("sdpa") is sdpa_attention_forward
    assert resolve_kernel("flex_attention") is ALL_ATTENTION_FUNCTIONS["flex_attention"]

    def custom(module, query, key, value, attention_mask, **kwargs):
        return eager_attention_forward(module, query, key, value, attention_mask, **kwargs)
    AttentionInterface.register("hf_xfmr_test_custom", custom)
    assert resolve_kernel("hf_xfmr_test_custom") is custom


def test_every_kernel_decision_of_the_models_is_a_resolve_kernel_option():
    """The choices the models used to make themselves: eager for the weights, torch's sdpa unchecked for
    masks that leave no row empty, the fused-dropout kernel in fp32 CPU training, flash-attn's varlen kernel."""
    assert resolve_kernel("sdpa", output_attentions=True) is eager_attention_forward
    assert resolve_kernel("sdpa", finite_masks=True) is sdpa_unchecked_forward
    assert resolve_kernel("eager", finite_masks=True) is eager_attention_forward
    assert resolve_varlen_kernel("flash_attention_2") is flash_varlen_attention
    assert resolve_varlen_kernel("sdpa") is None and resolve_varlen_kernel("eager") is None

    q, k, v = make_qkv()
    bias = torch.randn(B, H, T, T, generator=torch.Generator().manual_seed(1))  # finite: every row sees keys
    out, weights = sdpa_unchecked_forward(None, q, k, v, bias, scaling=0.5)
    assert weights is None
    torch.testing.assert_close(out, sdpa_attention_forward(None, q, k, v, bias, scaling=0.5)[0])

    module = nn.Module().train()
    for name in ("eager", "sdpa"):
        kernel = resolve_kernel(name, fused_cpu_dropout_from=0)
        torch.manual_seed(3)
        out, _ = kernel(module, q, k, v, None, scaling=0.5, dropout=0.2, is_causal=True)
        torch.manual_seed(3)
        expected = attention_with_dropout(q, k, v, causal_mask(T, T), scaling=0.5, p=0.2)
        assert torch.equal(out, expected), name
        # no dropout (eval): the kernel itself
        plain = resolve_kernel(name)(module, q, k, v, None, scaling=0.5, dropout=0.0, is_causal=True)[0]
        assert torch.equal(kernel(module.eval(), q, k, v, None, scaling=0.5, dropout=0.0, is_causal=True)[0], plain)
        module.train()
        # From a number of scores on (the BERT family and GPT): below it the plain kernel with torch's dropout.
        scores = q.shape[:-1].numel() * k.shape[-2]
        for threshold, fused in ((scores, True), (scores + 1, False)):
            kernel = resolve_kernel(name, fused_cpu_dropout_from=threshold)
            torch.manual_seed(3)
            out, _ = kernel(module, q, k, v, None, scaling=0.5, dropout=0.2, is_causal=True)
            torch.manual_seed(3)
            expected = attention_with_dropout(q, k, v, causal_mask(T, T), scaling=0.5, p=0.2) if fused else \
                resolve_kernel(name)(module, q, k, v, None, scaling=0.5, dropout=0.2, is_causal=True)[0]
            assert torch.equal(out, expected), (name, threshold)


def test_flash_attention_missing_gives_install_hint():
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("flash_attn is installed")
    with pytest.raises(ImportError, match="pip install flash-attn"):
        attention_kernel("flash_attention_2")
    q = torch.zeros(4, H, D)
    with pytest.raises(ImportError, match="CUDA"):
        flash_varlen_attention(q, q, q, torch.tensor([0, 4]), 4)
