"""Mixtral generation: greedy and beam search token-identical to transformers' (left-padded prompts, a sliding
window shorter than prompt + generation), cache == no cache, incremental decoding == one full forward."""

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache

from ._llama import padded_batch
from ._mixtral import VARIANTS, pair

NEW = 10


@pytest.mark.parametrize("left", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_generation_is_token_identical(variant, left):
    ref, ours = pair(variant)
    ids, mask = padded_batch(left=True) if left else (padded_batch()[0][:, :9].clamp(min=3), None)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    if mask is not None:
        kwargs["attention_mask"] = mask
    for model in (ref, ours):  # as generation runs by default (transformers' cache steps cannot pair mask / logits)
        model.config.output_router_logits = False
    expected = ref.generate(ids, **kwargs)
    assert torch.equal(ours.generate(ids, **kwargs), expected)
    assert expected.shape[1] == ids.shape[1] + NEW


def test_beam_search_matches():
    ref, ours = pair("gqa", output_router_logits=False)
    ids, mask = padded_batch(left=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2,
                  return_dict_in_generate=True, output_scores=True)
    expected, got = ref.generate(ids, **kwargs), ours.generate(ids, **kwargs)
    assert torch.equal(got.sequences, expected.sequences)
    assert_close(got.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)


def test_cached_equals_uncached_with_router_logits_on():
    """With `output_router_logits` on, generation still runs (the aux loss takes the new tokens' mask)."""
    _, ours = pair("gqa")
    assert ours.config.output_router_logits
    ids, mask = padded_batch(left=True)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    cached = ours.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(ours.generate(ids, attention_mask=mask, use_cache=False, **kwargs), cached)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_with_a_cache_step_by_step_equals_one_full_forward(variant, unpad):
    _, ours = pair(variant)
    ours.config.unpad_inputs = unpad
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask)
        out = ours(input_ids=ids[:, :6], attention_mask=mask[:, :6], use_cache=True)
        assert isinstance(out.past_key_values, DynamicCache) and out.past_key_values.get_seq_length() == 6
        steps, routers, cache = [out.logits], [out.router_logits[0].view(3, 6, -1)], out.past_key_values
        for t in range(6, ids.shape[1]):
            out = ours(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], past_key_values=cache)
            steps.append(out.logits)
            routers.append(out.router_logits[0].view(3, 1, -1))
    real = mask.bool()
    assert_close(torch.cat(steps, dim=1)[real], full.logits[real], atol=1e-5, rtol=1e-5)
    assert_close(torch.cat(routers, dim=1)[real], full.router_logits[0].view(3, 11, -1)[real], atol=1e-5, rtol=1e-5)
