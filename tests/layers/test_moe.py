"""The sparse MoE layer against transformers' Mixtral block and load-balancing loss, plus its invariants."""

import pytest
import torch
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock, load_balancing_loss_func

from hf_xfmr.layers.moe import (
    GroupedExperts,
    SparseMoeBlock,
    grouped_mm,
    load_balancing_loss,
    padded_grouped_mm,
    route_top_k,
)

HIDDEN, INTER, EXPERTS, TOP_K = 16, 24, 6, 2


def reference_block(implementation="eager", hidden=HIDDEN, inter=INTER, top_k=TOP_K, jitter=0.0):
    config = MixtralConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=EXPERTS,
                           num_experts_per_tok=top_k, router_jitter_noise=jitter)
    config._experts_implementation = implementation
    torch.manual_seed(0)
    block = MixtralSparseMoeBlock(config)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return block


def our_copy(reference, hidden=HIDDEN, inter=INTER, top_k=TOP_K, jitter=0.0):
    ours = SparseMoeBlock(hidden, inter, EXPERTS, top_k, jitter_noise=jitter)
    missing, unexpected = ours.load_state_dict(reference.state_dict(), strict=True)  # same names and shapes
    assert not missing and not unexpected
    return ours


def reference_router_logits(reference, x):
    return reference.gate(x.reshape(-1, x.shape[-1]))[0]


@pytest.mark.parametrize("implementation, hidden, inter, top_k", [
    ("eager", 16, 24, 2), ("grouped_mm", 16, 24, 2), ("batched_mm", 16, 24, 2),
    ("eager", 13, 7, 2),  # sizes the grouped_mm kernel refuses (strides not multiples of 16 bytes)
    ("eager", 16, 24, 1), ("eager", 16, 24, 3),
])
def test_parity_with_mixtral_block(implementation, hidden, inter, top_k):
    """Outputs, router logits and every gradient equal transformers' (odd sizes take the padded-bmm path)."""
    reference = reference_block(implementation, hidden, inter, top_k)
    ours = our_copy(reference, hidden, inter, top_k)
    x = torch.randn(3, 11, hidden)
    x_ref, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = reference(x_ref.clone())  # the reference scales its input in place with jitter: give it a copy
    logits = []
    ours.gate.register_forward_hook(lambda module, args, output: logits.append(output))
    out = ours(x_ours)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[0], reference_router_logits(reference, x), atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(expected)
    (expected * grad).sum().backward()
    (out * grad).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    reference_grads = dict(reference.named_parameters())
    for name, param in ours.named_parameters():
        torch.testing.assert_close(param.grad, reference_grads[name].grad, atol=1e-5, rtol=1e-5, msg=name)


def test_parameter_layout_matches_transformers():
    ours = SparseMoeBlock(HIDDEN, INTER, EXPERTS, TOP_K)
    shapes = {name: tuple(p.shape) for name, p in ours.named_parameters()}
    assert shapes == {
        "gate.weight": (EXPERTS, HIDDEN),
        "experts.gate_up_proj": (EXPERTS, 2 * INTER, HIDDEN),
        "experts.down_proj": (EXPERTS, HIDDEN, INTER),
    }


def test_routing_weights_renormalised_top_k():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [5.0, -1.0, 5.0, 0.0]])
    weights, experts = route_top_k(logits, 2)
    assert experts[0].tolist() == [3, 2] and sorted(experts[1].tolist()) == [0, 2]
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    torch.testing.assert_close(weights[0], torch.softmax(torch.tensor([3.0, 2.0]), -1))
    assert weights.dtype == torch.float32 and route_top_k(logits.bfloat16(), 2)[0].dtype == torch.float32


def hand_experts(experts, x, ids, weights):
    """Each token's experts one by one: the definition."""
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for slot in range(ids.shape[1]):
            e = ids[n, slot]
            gate, up = (experts.gate_up_proj[e] @ x[n]).chunk(2)
            out[n] += weights[n, slot] * (experts.down_proj[e] @ (torch.nn.functional.silu(gate) * up))
    return out


@pytest.mark.parametrize("hidden", [16, 13])
def test_empty_experts_run_and_get_zero_gradient(hidden):
    """Every token routed to experts 0 and 3: the other experts run on empty groups; their gradient is 0."""
    torch.manual_seed(1)
    experts = GroupedExperts(EXPERTS, hidden, INTER)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(5, hidden)
    ids = torch.tensor([[3, 0]] * 5)
    weights = torch.rand(5, 2)
    out = experts(x, ids, weights)
    torch.testing.assert_close(out, hand_experts(experts, x, ids, weights), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    idle = [e for e in range(EXPERTS) if e not in (0, 3)]
    assert experts.gate_up_proj.grad[idle].abs().max() == 0 and experts.down_proj.grad[idle].abs().max() == 0
    assert experts.gate_up_proj.grad[[0, 3]].abs().min() > 0


def test_no_tokens_at_all():
    """A batch with no tokens still runs every expert's weights (zero gradient), so the module order holds."""
    experts = GroupedExperts(EXPERTS, HIDDEN, INTER)
    torch.nn.init.normal_(experts.gate_up_proj)
    torch.nn.init.normal_(experts.down_proj)
    out = experts(torch.zeros(0, HIDDEN), torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 2))
    assert out.shape == (0, HIDDEN)
    out.sum().backward()
    assert experts.gate_up_proj.grad is not None and experts.gate_up_proj.grad.abs().max() == 0
    assert experts.down_proj.grad is not None and experts.down_proj.grad.abs().max() == 0


@pytest.mark.parametrize("dtype, k_size", [(torch.float32, 8), (torch.float32, 5), (torch.bfloat16, 16)])
@pytest.mark.parametrize("kernel", ["kernel", "padded"])
def test_grouped_mm_against_per_group_matmul(dtype, k_size, kernel):
    """Both formulations (torch's grouped_mm where the sizes allow it, the padded bmm) against plain matmuls."""
    if kernel == "kernel" and k_size % (16 // torch.tensor([], dtype=dtype).element_size()):
        multiply = grouped_mm  # the public entry point falls back to the padded bmm for these sizes
    else:
        multiply = (lambda x, w, o: torch.nn.functional.grouped_mm(x, w, offs=o)) if kernel == "kernel" \
            else padded_grouped_mm
    torch.manual_seed(2)
    x = torch.randn(10, k_size, dtype=dtype, requires_grad=True)
    w = torch.randn(4, k_size, 16, dtype=dtype, requires_grad=True)
    offsets = torch.tensor([3, 3, 7, 10], dtype=torch.int32)  # group 1 is empty
    out = multiply(x, w, offsets)
    expected = torch.cat([x[0:3] @ w[0], x[3:7] @ w[2], x[7:10] @ w[3]])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)
    grad = torch.randn_like(out)  # torch's kernel needs a contiguous output gradient (the experts give it one)
    (out * grad).sum().backward()
    grads = (x.grad, w.grad)
    x.grad = w.grad = None
    (expected * grad).sum().backward()
    torch.testing.assert_close(grads[0], x.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(grads[1], w.grad, atol=tol, rtol=tol)
    assert grads[1][1].abs().max() == 0


def test_jitter_only_in_training():
    reference = reference_block(jitter=0.1)
    ours = our_copy(reference, jitter=0.1)
    logits = []
    ours.gate.register_forward_hook(lambda module, args, output: logits.append(output))
    x = torch.randn(2, 5, HIDDEN)
    ours.eval()
    out_a, out_b = ours(x), ours(x)
    assert torch.equal(out_a, out_b)
    torch.testing.assert_close(out_a, reference.eval()(x.clone()), atol=1e-5, rtol=1e-5)
    ours.train()
    torch.manual_seed(3)
    out_t = ours(x)
    assert not torch.allclose(logits[-1], logits[0])  # the router saw noisy inputs
    assert not torch.allclose(out_t, out_a)
    torch.manual_seed(3)
    expected = reference.train()(x.clone())  # the same draw of noise, as transformers draws it
    torch.testing.assert_close(out_t, expected, atol=1e-5, rtol=1e-5)


def test_no_jitter_in_training_when_zero():
    ours = our_copy(reference_block())
    x = torch.randn(2, 5, HIDDEN)
    torch.testing.assert_close(ours.train()(x), ours.eval()(x), atol=0, rtol=0)


def test_top_k_checked():
    with pytest.raises(ValueError, match="top_k must be between 1 and num_experts"):
        SparseMoeBlock(HIDDEN, INTER, 4, 5)


@pytest.mark.parametrize("layers, top_k", [(1, 2), (3, 2), (2, 1), (2, 4)])
def test_load_balancing_loss_matches_transformers(layers, top_k):
    torch.manual_seed(4)
    logits = tuple(torch.randn(2 * 6, EXPERTS) for _ in range(layers))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    for attention_mask in (None, mask):
        expected = load_balancing_loss_func(logits, EXPERTS, top_k, attention_mask)
        torch.testing.assert_close(load_balancing_loss(logits, top_k, EXPERTS, attention_mask), expected,
                                   atol=1e-6, rtol=1e-6)


def test_load_balancing_loss_gradient_matches_transformers():
    torch.manual_seed(5)
    logits = [torch.randn(12, EXPERTS, requires_grad=True) for _ in range(2)]
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]])
    load_balancing_loss(tuple(logits), TOP_K, EXPERTS, mask).backward()
    ours = [t.grad.clone() for t in logits]
    for t in logits:
        t.grad = None
    load_balancing_loss_func(tuple(logits), EXPERTS, TOP_K, mask).backward()
    for a, t in zip(ours, logits):
        torch.testing.assert_close(a, t.grad, atol=1e-6, rtol=1e-6)


def test_load_balancing_loss_ignores_padding_and_hand_value():
    """Perfectly balanced routing gives k (E * sum_e (k/E) * (1/E)); padded rows change nothing when masked."""
    logits = torch.full((4, 4), 0.0)
    logits[0, :2] = logits[1, 2:] = logits[2, :2] = logits[3, 2:] = 5.0  # balanced over real rows
    torch.testing.assert_close(load_balancing_loss(logits, 2, 4), torch.tensor(2.0))
    padded = torch.cat([logits, torch.tensor([[9.0, 0.0, 0.0, 0.0]] * 2)])  # two padding rows pick expert 0
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    torch.testing.assert_close(load_balancing_loss(padded, 2, 4, mask), torch.tensor(2.0))
    assert load_balancing_loss(padded, 2, 4) > 2.0


def test_load_balancing_loss_edge_cases():
    assert load_balancing_loss(None, 2, 4) == 0.0 and load_balancing_loss((), 2, 4) == 0.0
    with pytest.raises(ValueError, match="attention_mask has 3 positions but the router saw 4 tokens"):
        load_balancing_loss(torch.zeros(4, 4), 2, 4, torch.ones(1, 3))
