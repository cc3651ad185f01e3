"""BART generation: greedy token-identical to BartForConditionalGeneration.generate on a padded batch (with
BART's forced </s> at the length limit), beam search and sampling equal to the reference, cache == no cache,
a padded encoder batch == its rows alone, the encoder runs once and the cross-attention keys/values are
projected once, clear errors."""

import pytest
import torch
from torch.testing import assert_close
from transformers import EncoderDecoderCache

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
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, **DIVERSE)
    cached = ours.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(ours.generate(ids, attention_mask=mask, use_cache=False, **kwargs), cached)
    for row in range(ids.shape[0]):
        alone = ours.generate(ids[row:row + 1, mask[row].bool()], **kwargs)
        assert torch.equal(alone[0], cached[row]), row


def test_encoder_runs_once_and_cross_attention_keys_are_projected_once():
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    calls = {"encoder": 0, "cross_k": 0, "self_k": 0}

    def counter(name):
        def hook(module, args, output):
            calls[name] += 1
        return hook
    ours.model.encoder.register_forward_hook(counter("encoder"))
    ours.model.decoder.layers[0].cross_attn.k_proj.register_forward_hook(counter("cross_k"))
    ours.model.decoder.layers[0].attn.k_proj.register_forward_hook(counter("self_k"))
    ours.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert calls == {"encoder": 1, "cross_k": 1, "self_k": NEW}


def test_decoding_step_by_step_with_a_cache_equals_one_full_forward():
    _, ours = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    decoder_ids = torch.randint(3, 99, (3, 7))
    decoder_ids[:, 0] = EOS
    with torch.no_grad():
        full = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        out = ours(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids[:, :3], use_cache=True)
        assert isinstance(out.cache, EncoderDecoderCache) and out.cache.get_seq_length() == 3
        steps, cache = [out.logits], out.cache
        encoder_outputs = (out.encoder_last_hidden_state,)
        for t in range(3, 7):
            out = ours(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_ids[:, t:t + 1],
                       past_key_values=cache)
            steps.append(out.logits)
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


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
