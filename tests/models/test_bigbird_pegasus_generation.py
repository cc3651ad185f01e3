"""BigBird-Pegasus generation: greedy and beam search token-identical to
BigBirdPegasusForConditionalGeneration.generate on padded batches with the block-sparse encoder (lengths that are and
are not a multiple of the block size) and with full attention, with and without the cache; sampling equal to the
reference; a padded batch equals its rows alone under full attention; the encoder runs once and the cross-attention
keys/values are projected once; step-by-step decoding equals one forward; clear errors."""

import pytest
import torch

from ._bigbird_pegasus import FULL_LENGTH, SPARSE_LENGTHS, VOCAB, pair, padded_batch
from ._seq2seq import (assert_cached_equals_uncached_and_rows_alone, assert_encoder_and_cross_keys_run_once,
                       assert_step_by_step_equals_full_forward)

NEW = 12
# A randomly initialised model repeats one token under greedy search; banning repeats makes every step pick a new
# argmax among the remaining logits, so token identity checks all of them.
DIVERSE = dict(no_repeat_ngram_size=1)
LAYOUTS = pytest.mark.parametrize("attention_type,seq_len", [
    ("block_sparse", SPARSE_LENGTHS[0]), ("block_sparse", SPARSE_LENGTHS[1]), ("original_full", FULL_LENGTH),
])


@LAYOUTS
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_greedy_generation_is_token_identical_to_the_reference(attention_type, seq_len, use_cache):
    ref, ours = pair(attention_type=attention_type)
    ids, mask = padded_batch(seq_len=seq_len)
    kwargs = dict(attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, use_cache=use_cache)
    for extra in ({}, DIVERSE):
        expected = ref.generate(ids, **kwargs, **extra)
        assert expected.shape == (3, NEW + 1)
        assert torch.equal(ours.generate(ids, **kwargs, **extra), expected)
    assert all(len(set(row[1:].tolist())) == NEW for row in expected)  # the diverse run: every step checked


@LAYOUTS
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_beam_search_matches_the_reference(attention_type, seq_len, use_cache):
    ref, ours = pair(attention_type=attention_type)
    ids, mask = padded_batch(seq_len=seq_len)
    beams = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2, do_sample=False,
                 use_cache=use_cache, **DIVERSE)
    expected = ref.generate(ids, **beams)
    assert expected.shape[0] == 6
    assert torch.equal(ours.generate(ids, **beams), expected)


def test_sampling_matches_the_reference():
    ref, ours = pair()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    sampling = dict(attention_mask=mask, max_new_tokens=8, do_sample=True, top_k=0, temperature=1.3)
    torch.manual_seed(7)
    expected = ref.generate(ids, **sampling)
    torch.manual_seed(7)
    assert torch.equal(ours.generate(ids, **sampling), expected)


def test_cached_equals_uncached_and_padded_batch_equals_rows_alone_under_full_attention():
    # Block-sparse outputs depend on the padded length (random blocks, the last global block), so a row alone
    # equals its padded-batch self only under full attention.
    _, ours = pair(attention_type="original_full")
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    assert_cached_equals_uncached_and_rows_alone(ours, ids, mask, max_new_tokens=NEW, min_new_tokens=NEW,
                                                 do_sample=False, **DIVERSE)


def test_encoder_runs_once_and_cross_attention_keys_are_projected_once():
    _, ours = pair()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    assert_encoder_and_cross_keys_run_once(ours, ids, mask, NEW)


@pytest.mark.parametrize("seq_len", [FULL_LENGTH, SPARSE_LENGTHS[1]])
def test_decoding_step_by_step_with_a_cache_equals_one_full_forward(seq_len):
    _, ours = pair()
    ids, mask = padded_batch(seq_len=seq_len)
    decoder_ids = torch.randint(3, VOCAB, (3, 7))
    decoder_ids[:, 0] = ours.config.decoder_start_token_id
    assert_step_by_step_equals_full_forward(ours, ids, mask, decoder_ids)


def test_causal_lm_cached_equals_uncached():
    _, ours = pair("BigBirdPegasusForCausalLM")
    ids = padded_batch()[0][:, :4]
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert torch.equal(ours.generate(ids, **kwargs), ours.generate(ids, use_cache=False, **kwargs))


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=3, num_return_sequences=2), "num_return_sequences"),
    (dict(max_new_tokens=80), "max_new_tokens"),  # past the 64 decoder positions
])
def test_impossible_settings_fail_clearly(kwargs, message):
    _, ours = pair()
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match=message):
        ours.generate(ids, attention_mask=mask, **kwargs)
