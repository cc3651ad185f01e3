import pytest
import torch

from hf_xfmr.layers.masks import (
    block_diagonal_mask,
    causal_mask,
    combine_masks,
    document_ids_from_cu_seqlens,
    document_ids_from_position_ids,
    padding_mask,
    sequence_starts_from_positions,
    sliding_window_mask,
    to_additive_mask,
)


def b(rows):
    return torch.tensor(rows, dtype=torch.bool)


@pytest.mark.parametrize("dtype", [torch.long, torch.float32, torch.bool])
def test_padding_mask(dtype):
    mask = padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]).to(dtype))
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 3)
    assert torch.equal(mask[:, 0, 0], b([[1, 1, 0], [1, 0, 0]]))


@pytest.mark.parametrize("shape", [(3,), (1, 1, 3)])
def test_padding_mask_rejects_non_2d(shape):
    with pytest.raises(ValueError, match="2-D"):
        padding_mask(torch.ones(shape))


def test_causal_mask_square():
    assert torch.equal(causal_mask(3), b([[1, 0, 0], [1, 1, 0], [1, 1, 1]]))


def test_causal_mask_with_cached_keys_in_front():
    # 2 cached keys: query i sits at absolute position i + 2.
    expected = b([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert torch.equal(causal_mask(3, 5), expected)
    assert torch.equal(causal_mask(1, 4), b([[1, 1, 1, 1]]))  # one new token sees the whole cache


def test_sliding_window_mask_window_2():
    expected = b(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0],
            [0, 0, 1, 1, 1],
            [0, 0, 0, 1, 1],
        ]
    )
    assert torch.equal(sliding_window_mask(5, 2), expected)
    assert torch.equal(sliding_window_mask(5, 3), expected)  # odd width rounds down: still +-1


def test_sliding_window_mask_window_4():
    expected = b(
        [
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1],
            [0, 1, 1, 1, 1],
            [0, 0, 1, 1, 1],
        ]
    )
    assert torch.equal(sliding_window_mask(5, 4), expected)


def test_sliding_window_mask_edges():
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))
    assert sliding_window_mask(4, 100).all()
    assert torch.equal(sliding_window_mask(2, 2, k_len=4), b([[1, 1, 0, 0], [1, 1, 1, 0]]))
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(4, 0)


def test_block_diagonal_mask_with_padding():
    ids = torch.tensor([[0, 0, 1, 1, -1], [0, 1, 1, 1, 2]])
    mask = block_diagonal_mask(ids)
    assert mask.shape == (2, 1, 5, 5) and mask.dtype == torch.bool
    expected_0 = b(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 0, 1],  # padding query sees only itself
        ]
    )
    expected_1 = b(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 1, 1, 0],
            [0, 1, 1, 1, 0],
            [0, 1, 1, 1, 0],
            [0, 0, 0, 0, 1],
        ]
    )
    assert torch.equal(mask[0, 0], expected_0)
    assert torch.equal(mask[1, 0], expected_1)


def test_block_diagonal_mask_padding_keys_never_seen_and_no_empty_row():
    ids = torch.tensor([[0, -1, 1, -1, -1]])
    mask = block_diagonal_mask(ids)[0, 0]
    pad = ids[0] < 0
    assert mask.any(-1).all()
    assert not mask[~pad][:, pad].any()  # real queries never see padding keys


def test_document_ids_from_position_ids():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 0]])
    expected = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 1, 2]])
    assert torch.equal(document_ids_from_position_ids(pos), expected)


def test_document_ids_from_position_ids_restart_at_the_rows_first_position():
    # Documents numbered from another first position (RoBERTa's pad_token_id + 1) split the same way.
    ids = document_ids_from_position_ids(torch.tensor([[2, 3, 4, 2, 3], [2, 2, 3, 4, 2]]))
    assert torch.equal(ids, torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 1, 2]]))


def test_document_ids_from_position_ids_other_orders_are_one_document():
    # Positions in another order (reversed, shifted) never return to the row's first one: one document, not
    # one per token (transformers' rule, a new sequence wherever a position is not the previous plus one,
    # would cut a reversed row into single tokens).
    for positions in ([[5, 4, 3, 2, 1, 0]], [[7, 8, 9, 10]]):
        assert document_ids_from_position_ids(torch.tensor(positions)).eq(0).all()


def test_sequence_starts_from_positions_reads_the_first_real_token():
    # Left padding (pads numbered 1, as transformers' generate does): the first real token sets the first position.
    positions = torch.tensor([[1, 1, 0, 1, 2, 0, 1]])
    keep = torch.tensor([[0, 0, 1, 1, 1, 1, 1]]).bool()
    assert sequence_starts_from_positions(positions, keep).tolist() == [[False, False, True, False, False, True, False]]


def test_document_ids_from_cu_seqlens():
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    assert torch.equal(document_ids_from_cu_seqlens(cu, 7), torch.tensor([0, 0, 1, 1, 1, -1, -1]))
    assert torch.equal(document_ids_from_cu_seqlens(cu, 5), torch.tensor([0, 0, 1, 1, 1]))


def test_document_ids_sources_agree():
    cu = torch.tensor([0, 3, 4, 8])
    pos = torch.tensor([[0, 1, 2, 0, 0, 1, 2, 3]])
    assert torch.equal(document_ids_from_cu_seqlens(cu, 8)[None], document_ids_from_position_ids(pos))


def test_combine_masks():
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    causal = causal_mask(3)
    assert combine_masks(None, causal) is causal
    pad = padding_mask(torch.tensor([[1, 1, 0]]))  # (1, 1, 1, 3)
    combined = combine_masks(pad, None, causal)
    assert combined.shape == (1, 1, 3, 3)
    assert torch.equal(combined[0, 0], b([[1, 0, 0], [1, 1, 0], [1, 1, 0]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_to_additive_mask(dtype):
    out = to_additive_mask(b([[1, 0], [0, 1]]), dtype)
    low = torch.finfo(dtype).min
    assert out.dtype == dtype
    assert torch.equal(out, torch.tensor([[0.0, low], [low, 0.0]], dtype=dtype))


def test_to_additive_mask_passthrough():
    assert to_additive_mask(None, torch.float32) is None
    bias = torch.tensor([[0.0, -3.0]])
    assert torch.equal(to_additive_mask(bias, torch.float64), bias.double())
