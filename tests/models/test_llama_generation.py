"""Llama-family generation: greedy and beam search token-identical to transformers' Llama, Mistral and Qwen2
(left-padded prompts, the sliding window shorter than prompt + generation), sampling with a seed, cache ==
no cache, incremental decoding == one full forward, and a left-padded batch == its rows alone."""

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache

from ._llama import pair, padded_batch

NEW = 10
VARIANTS = ["llama-gqa", "llama-llama3", "mistral", "qwen2"]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("left", [False, True], ids=["unpadded", "left-padded"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_generation_is_token_identical(variant, left, attn):
    ref, ours = pair(variant, attn=attn)
    ids, mask = padded_batch(left=True) if left else (padded_batch()[0][:, :9].clamp(min=3), None)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    if mask is not None:
        kwargs["attention_mask"] = mask
    expected = ref.generate(ids, **kwargs)
    assert torch.equal(ours.generate(ids, **kwargs), expected)
    assert expected.shape[1] == ids.shape[1] + NEW


@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_search_matches(variant):
    ref, ours = pair(variant)
    ids, mask = padded_batch(left=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=8, num_beams=3, num_return_sequences=2,
                  return_dict_in_generate=True, output_scores=True)
    expected, got = ref.generate(ids, **kwargs), ours.generate(ids, **kwargs)
    assert torch.equal(got.sequences, expected.sequences)
    assert_close(got.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["llama-gqa", "mistral"])
def test_sampling_with_a_seed_matches_and_repeats(variant):
    ref, ours = pair(variant)
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


@pytest.mark.parametrize("variant", ["llama-gqa", "mistral"])
def test_cached_equals_uncached_and_left_padded_batch_equals_rows_alone(variant):
    _, ours = pair(variant)
    ids, mask = padded_batch(left=True)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    cached = ours.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(ours.generate(ids, attention_mask=mask, use_cache=False, **kwargs), cached)
    for row in range(ids.shape[0]):
        alone = ours.generate(ids[row:row + 1, mask[row].bool()], **kwargs)
        assert torch.equal(alone[0, -NEW:], cached[row, -NEW:]), row


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("variant", ["llama-gqa", "mistral", "qwen2"])
def test_forward_with_a_cache_step_by_step_equals_one_full_forward(variant, unpad):
    """Incremental decoding (one token at a time after a prefill) == the full forward, left-padded; and a chunk
    of several tokens after a cache, causal within the chunk (Mistral: past its window of 4)."""
    _, ours = pair(variant)
    ours.config.unpad_inputs = unpad
    ids, mask = padded_batch(left=True)
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask).logits
        out = ours(input_ids=ids[:, :6], attention_mask=mask[:, :6], use_cache=True)
        assert isinstance(out.past_key_values, DynamicCache) and out.past_key_values.get_seq_length() == 6
        steps, cache = [out.logits], out.past_key_values
        for t in range(6, ids.shape[1]):
            out = ours(input_ids=ids[:, t:t + 1], attention_mask=mask[:, :t + 1], past_key_values=cache)
            steps.append(out.logits)
    real = mask.bool()
    assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=1e-5)
    ids = ids[:1]
    with torch.no_grad():
        full = ours(input_ids=ids).logits
        cache = ours(input_ids=ids[:, :4], use_cache=True).past_key_values
        chunk = ours(input_ids=ids[:, 4:9], past_key_values=cache).logits
    assert_close(chunk, full[:, 4:9], atol=1e-5, rtol=1e-5)


def test_prompts_past_max_position_embeddings_run_as_in_transformers():
    """RoPE has no position table: like transformers, generation does not stop at max_position_embeddings."""
    ref, ours = pair("llama-gqa")
    prompt = torch.randint(3, 90, (1, 70))  # max_position_embeddings is 64
    expected = ref.generate(prompt, max_new_tokens=4, do_sample=False)
    assert torch.equal(ours.generate(prompt, max_new_tokens=4, do_sample=False), expected)
