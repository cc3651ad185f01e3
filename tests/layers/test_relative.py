"""layers/relative_xl.py: the relative shift (strided view) and its gather form against the definition,
the folded segment term against the plain one, permutation masks from ranks, causal masks."""

import torch
from torch.testing import assert_close

from hf_xfmr.layers.relative_xl import (
    causal_hidden,
    permutation_hidden,
    rel_gather,
    rel_shift,
    relative_distances,
    segment_bias,
    segment_query_features,
)


def test_rel_shift_and_gather_follow_the_definition():
    qlen, mlen = 5, 3
    klen = qlen + mlen
    scores = torch.randn(2, 3, qlen, klen + qlen)  # "bi" table: J = K + L
    shifted = rel_shift(scores, klen)
    assert shifted.shape == (2, 3, qlen, klen)
    for i in range(qlen):
        for j in range(klen):
            assert torch.equal(shifted[..., i, j], scores[..., i, j + qlen - i])
    positions = torch.tensor([[4, 0], [2, 2]])  # (B, R) arbitrary rows
    rows = torch.stack([scores[b, :, positions[b]] for b in range(2)])  # (B, H, R, J)
    gathered = rel_gather(rows, positions, qlen, klen)
    for b in range(2):
        for r in range(2):
            assert torch.equal(gathered[b, :, r], shifted[b, :, positions[b, r]])


def test_relative_distances():
    assert relative_distances(3, 5, "bi", None).tolist() == [5, 4, 3, 2, 1, 0, -1, -2]
    assert relative_distances(3, 5, "uni", None).tolist() == [5, 4, 3, 2, 1, 0]
    assert relative_distances(3, 5, "bi", 2).tolist() == [2, 2, 2, 2, 1, 0, -1, -2]


def test_folded_segment_term_equals_the_plain_one_up_to_a_row_constant():
    torch.manual_seed(0)
    q_s, seg_embed = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 8)
    query_types, key_types = torch.tensor([[0, 1, 2, 1], [0, 0, 1, 1]]), torch.randint(0, 3, (2, 6))
    plain = segment_bias(q_s, seg_embed, query_types, key_types)  # (B, H, R, K)
    features = segment_query_features(q_s, seg_embed, query_types, 3)
    folded = features @ torch.nn.functional.one_hot(key_types, 3).float()[:, None].transpose(-1, -2)
    difference = plain - folded
    assert_close(difference, difference[..., :1].expand_as(difference))  # constant along each row
    assert_close(plain.softmax(-1), folded.softmax(-1))


def test_permutation_and_causal_masks():
    ranks = torch.tensor([[-1, 1, -1, 0]])  # two targets: position 3 first, then position 1
    hidden = permutation_hidden(ranks, ranks)[0]
    expected = torch.tensor([[0, 1, 0, 1],   # non-targets see non-targets only
                             [0, 1, 0, 0],   # target of rank 1 sees rank 0, not itself
                             [0, 1, 0, 1],
                             [0, 1, 0, 1]], dtype=torch.bool)  # rank 0 sees no target
    assert torch.equal(hidden, expected)
    causal = causal_hidden(torch.arange(3), klen=5, mlen=2, same_length=False)
    assert causal.tolist() == [[False, False, False, True, True], [False] * 4 + [True], [False] * 5]
    same = causal_hidden(torch.arange(3), klen=5, mlen=2, same_length=True)
    assert same.sum(1).tolist() == [2, 2, 2]  # every query sees mlen + 1 keys
