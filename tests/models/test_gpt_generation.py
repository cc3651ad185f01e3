"""GPT generation: token-identical to GPT2LMHeadModel.generate, cache == no cache, a left-padded batch ==
its rows alone, sampling and beam search, and clear errors for settings that cannot work."""

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache

from ._gpt import PAD, lm_pair, padded_batch

NEW = 12


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("left", [False, True], ids=["unpadded", "left-padded"])
def test_greedy_generation_is_token_identical_to_gpt2(attn, left):
    ref, ours = lm_pair(attn)
    ids, mask = padded_batch(left=True) if left else (padded_batch()[0][:, :9].clamp(min=1), None)
    kwargs = dict(max_new_tokens=NEW, do_sample=False)
    if mask is not None:
        kwargs["attention_mask"] = mask
    expected = ref.generate(ids, **kwargs)
    assert torch.equal(ours.generate(ids, **kwargs), expected)
    assert expected.shape[1] == ids.shape[1] + NEW


def test_cached_equals_uncached_and_left_padded_batch_equals_rows_alone():
    _, ours = lm_pair()
    ids, mask = padded_batch(left=True)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    cached = ours.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(ours.generate(ids, attention_mask=mask, use_cache=False, **kwargs), cached)
    for row in range(ids.shape[0]):
        alone = ours.generate(ids[row:row + 1, mask[row].bool()], **kwargs)
        assert torch.equal(alone[0, -NEW:], cached[row, -NEW:]), row


def test_forward_with_a_cache_step_by_step_equals_one_full_forward():
    _, ours = lm_pair()
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask).logits  # positions from the mask (left padding)
        out = ours(input_ids=ids[:, :6], attention_mask=mask[:, :6], use_cache=True)
        assert isinstance(out.past_key_values, DynamicCache) and out.past_key_values.get_seq_length() == 6
        steps = [out.logits]
        cache = out.past_key_values
        for t in range(6, ids.shape[1]):
            out = ours(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], past_key_values=cache)
            steps.append(out.logits)
    real = mask.bool()
    assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=1e-5)
    # Unpadded, several new tokens at a time after a cache, without a mask: causal within the chunk.
    ids = ids[:1]
    with torch.no_grad():
        full = ours(input_ids=ids).logits
        cache = ours(input_ids=ids[:, :4], use_cache=True).past_key_values
        chunk = ours(input_ids=ids[:, 4:8], past_key_values=cache).logits
    assert_close(chunk, full[:, 4:8], atol=1e-5, rtol=1e-5)


def test_sampling_with_a_seed_matches_gpt2_and_repeats():
    ref, ours = lm_pair()
    ids, mask = padded_batch(left=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=NEW, do_sample=True, top_k=20, temperature=0.9,
                  num_return_sequences=2)
    torch.manual_seed(3)
    expected = ref.generate(ids, **kwargs)
    torch.manual_seed(3)
    first = ours.generate(ids, **kwargs)
    torch.manual_seed(3)
    assert torch.equal(ours.generate(ids, **kwargs), first)
    assert torch.equal(first, expected) and first.shape[0] == 2 * ids.shape[0]


def test_beam_search_matches_gpt2():
    ref, ours = lm_pair()
    ids, mask = padded_batch(left=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2,
                  return_dict_in_generate=True, output_scores=True)
    expected, got = ref.generate(ids, **kwargs), ours.generate(ids, **kwargs)
    assert torch.equal(got.sequences, expected.sequences)
    assert_close(got.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)


def test_logits_to_keep():
    _, ours = lm_pair()
    ids, mask = padded_batch()
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask).logits
        assert_close(ours(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits, full[:, -1:])
        index = torch.tensor([0, 3])
        assert_close(ours(input_ids=ids, attention_mask=mask, logits_to_keep=index).logits, full[:, index])


@pytest.mark.parametrize("kwargs,message", [
    (dict(max_new_tokens=0), r"`max_new_tokens` must be a positive integer .* got 0"),
    (dict(max_new_tokens=-3), r"`max_new_tokens` must be a positive integer"),
    (dict(max_new_tokens=60), r"Generating 60 tokens after a 11-token prompt needs 70 positions but the model "
                              r"has 64 .*lower `max_new_tokens` \(max_new_tokens=54\)"),
    (dict(max_length=80), r"lower `max_length` \(max_length=65\)"),
    (dict(num_beams=0, max_new_tokens=2), r"`num_beams` must be a positive integer"),
    (dict(num_return_sequences=3, num_beams=2, max_new_tokens=2), r"`num_return_sequences`=3 needs `num_beams` >= 3"),
    (dict(num_return_sequences=2, max_new_tokens=2), r"greedy search has only one answer"),
    (dict(num_beams=4, num_beam_groups=3, max_new_tokens=2), r"`num_beams`=4 must be divisible by `num_beam_groups`=3"),
])
def test_bad_generate_arguments_get_clear_errors(kwargs, message):
    _, ours = lm_pair()
    ids, _ = padded_batch()
    with pytest.raises(ValueError, match=message):
        ours.generate(ids, **kwargs)


def test_prompts_longer_than_the_position_table_are_rejected():
    _, ours = lm_pair()
    prompt = torch.randint(1, 90, (1, 70))
    with pytest.raises(ValueError, match=r"The prompt has 70 tokens but the model has only 64 positions.*truncation"):
        ours.generate(prompt, max_new_tokens=1)
    with pytest.raises(ValueError, match=r"70 tokens exceed the 64 positions .*truncation=True"):
        ours(input_ids=prompt)
    # Left padding takes no positions: 60 real tokens + 5 new fit a 64-position table.
    mask = torch.ones(1, 70, dtype=torch.long)
    mask[0, :10] = 0
    out = ours.generate(prompt.masked_fill(mask == 0, PAD), attention_mask=mask, max_new_tokens=5)
    assert out.shape == (1, 75)
    # The last generated token is never fed back: 64 - 60 + 1 new tokens is the most that fits.
    ours.generate(prompt[:, :60], max_new_tokens=5)


def test_cache_and_mask_misuse_get_clear_errors():
    _, ours = lm_pair()
    ids, mask = padded_batch()
    with torch.no_grad():
        cache = ours(input_ids=ids, use_cache=True).past_key_values
        with pytest.raises(ValueError, match=r"`attention_mask` has shape \(3, 1\) but must be \(3, 12\) "
                                             r"\(11 cached \+ 1 new\)"):
            ours(input_ids=ids[:, :1], attention_mask=mask[:, :1], past_key_values=cache)
        with pytest.raises(TypeError, match="tuples of \\(key, value\\) tensors are not supported"):
            ours(input_ids=ids, past_key_values=((torch.zeros(1), torch.zeros(1)),))
