import torch

from hf_xfmr.layers.masks import document_ids_from_cu_seqlens
from hf_xfmr.layers.padding import pad_input, unpad_input, unpad_input_ids

MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])


def test_unpad_hand_checked():
    hidden = torch.arange(18.0).view(3, 3, 2)
    unpadded, indices, cu_seqlens, max_seqlen = unpad_input(hidden, MASK)
    assert torch.equal(indices, torch.tensor([0, 1, 3, 4, 5, 6]))
    assert torch.equal(cu_seqlens, torch.tensor([0, 2, 5, 6], dtype=torch.int32))
    assert max_seqlen == 3 and isinstance(max_seqlen, int)
    assert torch.equal(unpadded, torch.tensor([[0.0, 1], [2, 3], [6, 7], [8, 9], [10, 11], [12, 13]]))


def test_round_trip_is_exact():
    torch.manual_seed(0)
    hidden = torch.randn(3, 3, 4, 5)  # extra trailing dims (e.g. heads, head dim) ride along
    unpadded, indices, _, _ = unpad_input(hidden, MASK.bool())
    restored = pad_input(unpadded, indices, 3, 3)
    assert restored.shape == hidden.shape
    assert torch.equal(restored, hidden * MASK[:, :, None, None])


def test_gradient_flows_through_unpad_and_pad():
    hidden = torch.randn(3, 3, 4, requires_grad=True)
    unpadded, indices, _, _ = unpad_input(hidden, MASK)
    (pad_input(unpadded * 2, indices, 3, 3)).sum().backward()
    assert torch.equal(hidden.grad, 2.0 * MASK[:, :, None].expand(3, 3, 4))

    leaf = torch.randn(6, 4, requires_grad=True)  # pad_input on a leaf: out-of-place
    (pad_input(leaf, indices, 3, 3) * 3).sum().backward()
    assert torch.equal(leaf.grad, torch.full((6, 4), 3.0))


def test_unpad_input_ids_positions_restart_per_sequence():
    input_ids = torch.tensor([[5, 6, 0], [7, 8, 9], [0, 0, 4]])  # last row is left-padded
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 1]])
    ids, indices, cu_seqlens, max_seqlen, position_ids = unpad_input_ids(input_ids, mask)
    assert torch.equal(ids, torch.tensor([5, 6, 7, 8, 9, 4]))
    assert torch.equal(indices, torch.tensor([0, 1, 3, 4, 5, 8]))
    assert torch.equal(cu_seqlens, torch.tensor([0, 2, 5, 6], dtype=torch.int32))
    assert max_seqlen == 3
    assert torch.equal(position_ids, torch.tensor([0, 1, 0, 1, 2, 0]))


def test_cu_seqlens_delimit_documents():
    _, _, cu_seqlens, _ = unpad_input(torch.zeros(3, 3), MASK)
    assert torch.equal(document_ids_from_cu_seqlens(cu_seqlens, 6), torch.tensor([0, 0, 1, 1, 1, 2]))
