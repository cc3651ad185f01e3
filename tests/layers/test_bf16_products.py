"""bf16 autocast's products through the fp32 kernels (`layers.bf16_products`): the same bf16 results as the
product formula, close to torch's bf16 kernels, no bf16 matrix kernel left in forward, backward or a checkpointed
replay of an hf_xfmr model, and nothing changed outside CPU bf16 autocast or for models that are not ours."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from hf_xfmr.layers import bf16_products
from hf_xfmr.layers.bf16_products import BF16_PRODUCTS_ENV, Bf16ProductsInFp32

BF16 = torch.bfloat16
MATRIX_KERNELS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_flash_attention_for_cpu_backward")


class MatrixKernels(TorchDispatchMode):
    """Records the dtype of every matrix-product kernel that runs."""

    def __init__(self):
        super().__init__()
        self.dtypes: list[tuple[str, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATRIX_KERNELS:
            self.dtypes.append((name, args[0].dtype))
        return func(*args, **(kwargs or {}))


def _rounded(t):
    return t.to(BF16).float()


def _cases():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(3, 5, 16, generator=g), torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    a, c = torch.randn(4, 6, 8, generator=g), torch.randn(4, 8, 7, generator=g)
    q, k, v = (torch.randn(2, 3, 9, 8, generator=g) for _ in range(3))
    mask = torch.randn(2, 1, 9, 9, generator=g)
    bool_mask = torch.rand(2, 1, 9, 9, generator=g) > 0.3
    bool_mask[..., 0] = True
    return {
        "linear": (F.linear, (x, w, b), {}),
        "linear-no-bias": (F.linear, (x, w), {}),
        "linear-keywords": (F.linear, (x,), {"weight": w, "bias": b}),
        "matmul": (torch.matmul, (a, c), {}),
        "@": (lambda s, o: s @ o, (a, c), {}),
        "bmm": (torch.bmm, (a, c), {}),
        "baddbmm": (torch.baddbmm, (torch.randn(4, 6, 7, generator=g), a, c), {}),
        "einsum": (torch.einsum, ("bij,bjk->bik", a, c), {}),
        "sdpa": (F.scaled_dot_product_attention, (q, k, v), {"attn_mask": mask}),
        "sdpa-bool-causal": (F.scaled_dot_product_attention, (q, k, v), {"attn_mask": bool_mask}),
    }


def _leaves(args):
    return [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]


def _run(op, args, kwargs, mode):
    args = _leaves(args)
    with torch.autocast("cpu", dtype=BF16), mode:
        out = op(*args, **kwargs)
    grad_seed = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    out.float().backward(grad_seed)
    return out, [a.grad for a in args if isinstance(a, torch.Tensor)]


@pytest.mark.parametrize("name", list(_cases()))
def test_products_equal_the_bf16_formula_and_torch_bf16_kernels(name):
    op, args, kwargs = _cases()[name]
    ours, ours_grads = _run(op, args, kwargs, Bf16ProductsInFp32())
    assert ours.dtype == BF16
    # The formula: the fp32 kernel on bf16-rounded operands, rounded to bf16 (here with autograd's own backward).
    leaves = _leaves(args)
    expected = op(*[_rounded(a) if isinstance(a, torch.Tensor) else a for a in leaves],
                  **{k: _rounded(v) if v.is_floating_point() else v for k, v in kwargs.items()}).to(BF16)
    expected.float().backward(torch.linspace(-1, 1, expected.numel()).reshape(expected.shape))
    assert torch.equal(ours, expected)
    for got, want in zip(ours_grads, [a.grad for a in leaves if isinstance(a, torch.Tensor)]):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, _rounded(want), atol=0, rtol=2 ** -7)  # one bf16 rounding apart at most
    # torch's own bf16 kernels agree within bf16's precision (they round the same operands, sum in another order).
    native, native_grads = _run(op, args, kwargs, torch.autocast("cpu", dtype=BF16))
    torch.testing.assert_close(ours.float(), native.float(), atol=2e-2, rtol=2e-2)
    for got, want in zip(ours_grads, native_grads):
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)


def test_a_product_into_out_runs_in_its_dtype_as_under_autocast():
    """`torch.matmul(a, b, out=...)` is not autocast's: it runs in fp32, into `out` (the chunked loss relies on it)."""
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    out, expected = torch.zeros(5, 3), torch.zeros(5, 3)
    with torch.autocast("cpu", dtype=BF16):
        with Bf16ProductsInFp32():
            result = torch.matmul(a, b, out=out[:])
        torch.matmul(a, b, out=expected)
    assert result.data_ptr() == out.data_ptr() and torch.equal(out, expected) and torch.equal(out, a @ b)


def _gpt():
    from hf_xfmr.models.gpt import XfmrGPTConfig, XfmrGPTForCausalLM

    torch.manual_seed(0)
    config = XfmrGPTConfig(vocab_size=300, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
                           eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(5, 300, (3, 16))
    return XfmrGPTForCausalLM(config), dict(input_ids=ids, labels=ids)


def _bert():
    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    torch.manual_seed(0)
    config = XfmrBertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = XfmrBertForMaskedLM(config)
    ids = torch.randint(5, 300, (3, 16))
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    labels = torch.where(mask.bool() & (torch.arange(16) % 3 == 0), ids, -100)
    return model, dict(input_ids=ids, attention_mask=mask, labels=labels)


def _step(model, batch, autocast=True):
    model.zero_grad()
    kernels = MatrixKernels()
    with kernels:
        with torch.autocast("cpu", dtype=BF16, enabled=autocast):
            loss = model(**batch).loss
        loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, {d for _, d in kernels.dtypes}


@pytest.mark.parametrize("arch, checkpointing", [("bert", False), ("bert", True), ("gpt", False)])
def test_a_model_runs_no_bf16_kernel_and_stays_within_bf16_of_native(monkeypatch, arch, checkpointing):
    """BERT (sparse MLM head) and GPT (the chunked vocabulary loss, which computes its gradients in the forward)."""
    model, batch = _bert() if arch == "bert" else _gpt()
    if checkpointing:
        model.gradient_checkpointing_enable()
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "native")
    native_loss, native_grads, native_dtypes = _step(model, batch)
    assert BF16 in native_dtypes  # torch's bf16 kernels
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fp32")
    loss, grads, dtypes = _step(model, batch)
    assert dtypes == {torch.float32}  # forward, backward and the checkpointed replay: fp32 kernels only
    fp32_loss, fp32_grads, _ = _step(model, batch, autocast=False)
    torch.testing.assert_close(loss, native_loss, atol=2e-2, rtol=0)
    for name, grad in grads.items():
        # As close to the fp32 gradients as torch's bf16 kernels are (bf16 rounding of the same operands).
        scale = fp32_grads[name].norm()
        assert (grad - fp32_grads[name]).norm() <= 2 * (native_grads[name] - fp32_grads[name]).norm() + 1e-3 * scale
    if checkpointing:
        model.gradient_checkpointing_disable()
        plain_loss, plain_grads, _ = _step(model, batch)
        assert torch.equal(loss, plain_loss)
        for name, grad in grads.items():
            assert torch.equal(grad, plain_grads[name]), name


def test_auto_picks_the_fp32_kernels_without_amx_only(monkeypatch):
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "auto")
    monkeypatch.setattr(bf16_products, "_cpu_has_amx", lambda: False)
    assert bf16_products.products_in_fp32()
    with torch.autocast("cpu", dtype=BF16):
        assert isinstance(bf16_products.bf16_products(), Bf16ProductsInFp32)
    assert not isinstance(bf16_products.bf16_products(), Bf16ProductsInFp32)  # no autocast: nothing to do
    monkeypatch.setattr(bf16_products, "_cpu_has_amx", lambda: True)
    assert not bf16_products.products_in_fp32()
    monkeypatch.setattr(bf16_products, "_cpu_has_amx", lambda: None)  # the OS does not say: torch's kernels
    assert not bf16_products.products_in_fp32()
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fp32")
    assert bf16_products.products_in_fp32()
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fast")
    with pytest.raises(ValueError, match="HF_XFMR_BF16_PRODUCTS='fast' is not a choice: use auto"):
        bf16_products.products_in_fp32()


def test_fp32_runs_and_other_models_are_untouched(monkeypatch):
    """Without autocast an hf_xfmr model runs as before; a transformers model under autocast keeps torch's bf16
    kernels (the choice is hf_xfmr's, made in its models' forward, never process-wide)."""
    import transformers

    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fp32")
    model, batch = _bert()
    loss, _, dtypes = _step(model, batch, autocast=False)
    assert dtypes == {torch.float32}
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "native")
    assert torch.equal(loss, _step(model, batch, autocast=False)[0])
    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fp32")
    reference = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))
    assert BF16 in _step(reference, batch)[2]


def test_the_autocast_accelerate_puts_inside_the_forward_takes_the_fp32_kernels(monkeypatch):
    """Accelerate (`hf-xfmr pretrain --mixed_precision bf16`, Trainer's `bf16=True`) enters autocast inside the
    model's forward, not around the call: the choice is made there too."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    monkeypatch.setenv(BF16_PRODUCTS_ENV, "fp32")
    model, batch = _bert()
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    try:
        accelerator = Accelerator(cpu=True, mixed_precision="bf16")
        model = accelerator.prepare(model)
        kernels = MatrixKernels()
        with kernels:
            loss = model(**batch).loss
            accelerator.backward(loss)
    finally:
        AcceleratorState._reset_state(reset_partial_state=False)
        GradientState._reset_state()
    assert {d for _, d in kernels.dtypes} == {torch.float32}
    assert model.model.embeddings.word_embeddings.weight.grad is not None
