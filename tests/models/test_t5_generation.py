"""T5 generation: greedy token-identical to T5ForConditionalGeneration.generate on a padded batch (v1.0 and
v1.1), beam search and sampling equal to the reference, cache == no cache, a padded encoder batch == its rows
alone, the encoder runs once and the cross-attention keys/values are projected once, clear errors."""

import pytest
import torch

from ._seq2seq import (assert_cached_equals_uncached_and_rows_alone, assert_encoder_and_cross_keys_run_once,
                       assert_step_by_step_equals_full_forward)
from ._t5 import PAD, VARIANTS, pair, padded_batch

NEW = 12


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_generation_is_token_identical_to_t5(variant, attn):
    ref, ours = pair("T5ForConditionalGeneration", variant, attn)
    ids, mask = padded_batch()
    kwargs = dict(attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    expected = ref.generate(ids, **kwargs)
    assert expected.shape == (3, NEW + 1)
    assert torch.equal(ours.generate(ids, **kwargs), expected)


@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_search_and_sampling_match_the_reference(variant):
    ref, ours = pair("T5ForConditionalGeneration", variant)
    ids, mask = padded_batch()
    beams = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2, do_sample=False)
    assert torch.equal(ours.generate(ids, **beams), ref.generate(ids, **beams))
    sampling = dict(attention_mask=mask, max_new_tokens=8, do_sample=True, top_k=0, temperature=1.3)
    torch.manual_seed(7)
    expected = ref.generate(ids, **sampling)
    torch.manual_seed(7)
    assert torch.equal(ours.generate(ids, **sampling), expected)


def test_cached_equals_uncached_and_padded_batch_equals_rows_alone():
    _, ours = pair("T5ForConditionalGeneration", "v1.1")
    ids, mask = padded_batch()
    assert_cached_equals_uncached_and_rows_alone(ours, ids, mask, max_new_tokens=NEW, min_new_tokens=NEW,
                                                 do_sample=False)


def test_encoder_runs_once_and_cross_attention_keys_are_projected_once():
    _, ours = pair("T5ForConditionalGeneration")
    ids, mask = padded_batch()
    assert_encoder_and_cross_keys_run_once(ours, ids, mask, NEW)


def test_decoding_step_by_step_with_a_cache_equals_one_full_forward():
    _, ours = pair("T5ForConditionalGeneration", "v1.1")
    ids, mask = padded_batch()
    decoder_ids = torch.randint(2, 99, (3, 7))
    decoder_ids[:, 0] = PAD
    assert_step_by_step_equals_full_forward(ours, ids, mask, decoder_ids)


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=3, num_return_sequences=2), "num_return_sequences"),
])
def test_impossible_settings_fail_clearly(kwargs, message):
    _, ours = pair("T5ForConditionalGeneration")
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match=message):
        ours.generate(ids, attention_mask=mask, **kwargs)
