"""BART generation: greedy token-identical to BartForConditionalGeneration.generate on a padded batch (with
BART's forced </s> at the length limit), beam search and sampling equal to the reference, cache == no cache,
a padded encoder batch == its rows alone, the encoder runs once and the cross-attention keys/values are
projected once, clear errors."""

import pytest
import torch

from ._seq2seq import (assert_cached_equals_uncached_and_rows_alone, assert_encoder_and_cross_keys_run_once,
                       assert_step_by_step_equals_full_forward)
from ._bart import EOS, pair, padded_batch

NEW = 12
# A randomly initialised post-norm BART repeats one token under greedy search; banning repeats makes every step
# pick a new argmax among the remaining logits, so token identity checks all of them.
DIVERSE = dict(no_repeat_ngram_size=1)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_greedy_generation_is_token_identical_to_bart(attn):
    ref, ours = pair("BartForConditionalGeneration", attn)
    ids, mask = padded_batch()
    kwargs = dict(attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    expected = ref.generate(ids, **kwargs)
    assert expected.shape == (3, NEW + 1)
    assert (expected[:, -1] == EOS).all()  # forced_eos_token_id
    assert torch.equal(ours.generate(ids, **kwargs), expected)
    expected = ref.generate(ids, **kwargs, **DIVERSE)
    assert all(len(set(row[1:-1].tolist())) == NEW - 1 for row in expected)
    assert torch.equal(ours.generate(ids, **kwargs, **DIVERSE), expected)


def test_beam_search_and_sampling_match_the_reference():
    ref, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    beams = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2, do_sample=False)
    assert torch.equal(ours.generate(ids, **beams), ref.generate(ids, **beams))
    sampling = dict(attention_mask=mask, max_new_tokens=8, do_sample=True, top_k=0, temperature=1.3)
    torch.manual_seed(7)
    expected = ref.generate(ids, **sampling)
    torch.manual_seed(7)
    assert torch.equal(ours.generate(ids, **sampling), expected)


def test_cached_equals_uncached_and_padded_batch_equals_rows_alone():
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    assert_cached_equals_uncached_and_rows_alone(ours, ids, mask, max_new_tokens=NEW, min_new_tokens=NEW,
                                                 do_sample=False, **DIVERSE)


def test_encoder_runs_once_and_cross_attention_keys_are_projected_once():
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    assert_encoder_and_cross_keys_run_once(ours, ids, mask, NEW)


def test_decoding_step_by_step_with_a_cache_equals_one_full_forward():
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    decoder_ids = torch.randint(3, 99, (3, 7))
    decoder_ids[:, 0] = EOS
    assert_step_by_step_equals_full_forward(ours, ids, mask, decoder_ids)


def test_causal_lm_cached_equals_uncached():
    _, ours = pair("BartForCausalLM")
    ids = padded_batch()[0][:, :4]
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert torch.equal(ours.generate(ids, **kwargs), ours.generate(ids, use_cache=False, **kwargs))


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=3, num_return_sequences=2), "num_return_sequences"),
    (dict(max_new_tokens=60), "max_new_tokens"),  # past the 40 decoder positions
])
def test_impossible_settings_fail_clearly(kwargs, message):
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match=message):
        ours.generate(ids, attention_mask=mask, **kwargs)
