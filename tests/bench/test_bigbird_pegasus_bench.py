"""The BigBird-Pegasus generation case: the headline sizes (built cheaply, no timing) and, at the tiny size, both
sides generating the same tokens through the block-sparse encoder."""

import torch

from hf_xfmr.bench import make_case
from hf_xfmr.bench.bigbird_pegasus import bigbird_pegasus_generate  # noqa: F401  (registers the case)


def test_headline_case_defaults():
    case = make_case("bigbird-pegasus-generate")
    assert case.mode == "infer"
    assert "64 new tokens, input 4 x 4096; d_model 256, 4+4 layers, vocab 32000" in case.description
    assert case.make_batch()["input_ids"].shape == (4, 4096)


def test_tiny_case_generates_the_same_tokens_on_both_sides():
    case = make_case("bigbird-pegasus-generate", tiny=True)
    torch.manual_seed(0)
    ours, ref = case.build_pair()
    assert ours.wrapped.config.attention_type == "block_sparse" and ours.wrapped.config.block_size == 8
    batch = case.make_batch()
    assert batch["input_ids"].shape == (2, 72)  # past the 56 tokens that would run full attention
    with torch.no_grad():
        expected = ref(**batch)
        assert expected.shape == (2, 5)
        assert torch.equal(ours(**batch), expected)
