"""Checks every encoder-decoder family runs the same way (T5, BART): generation with and without the cache,
rows alone vs a padded batch, the encoder and cross-attention projections run once, step-by-step decoding,
a training step unchanged by checkpointing / the attention kernel, dropout only in training."""

import torch
from torch.testing import assert_close
from transformers import EncoderDecoderCache


def assert_cached_equals_uncached_and_rows_alone(model, ids, mask, **kwargs):
    cached = model.generate(ids, attention_mask=mask, **kwargs)
    assert torch.equal(model.generate(ids, attention_mask=mask, use_cache=False, **kwargs), cached)
    for row in range(ids.shape[0]):
        alone = model.generate(ids[row:row + 1, mask[row].bool()], **kwargs)
        assert torch.equal(alone[0], cached[row]), row


def assert_encoder_and_cross_keys_run_once(model, ids, mask, new_tokens):
    calls = {"encoder": 0, "cross_k": 0, "self_k": 0}

    def counter(name):
        def hook(module, args, output):
            calls[name] += 1
        return hook
    model.model.encoder.register_forward_hook(counter("encoder"))
    model.model.decoder.layers[0].cross_attn.k_proj.register_forward_hook(counter("cross_k"))
    model.model.decoder.layers[0].attn.k_proj.register_forward_hook(counter("self_k"))
    model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    assert calls == {"encoder": 1, "cross_k": 1, "self_k": new_tokens}


def assert_step_by_step_equals_full_forward(model, ids, mask, decoder_ids, first=3):
    """Decode `decoder_ids` (B, T): `first` tokens in one call, then one at a time with the cache."""
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids[:, :first], use_cache=True)
        assert isinstance(out.cache, EncoderDecoderCache) and out.cache.get_seq_length() == first
        steps, cache = [out.logits], out.cache
        encoder_outputs = (out.encoder_last_hidden_state,)
        for t in range(first, decoder_ids.shape[1]):
            out = model(encoder_outputs=encoder_outputs, attention_mask=mask,
                        decoder_input_ids=decoder_ids[:, t:t + 1], past_key_values=cache)
            steps.append(out.logits)
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def assert_checkpointing_and_eager_keep_the_step(model, inputs, seed=None):
    """Loss and every gradient of a training step are the same with gradient checkpointing and with the
    eager kernel as with the default (sdpa). `seed`: reseed before each step (the same dropout masks)."""

    def step():
        model.zero_grad()
        if seed is not None:
            torch.manual_seed(seed)
        loss = model(**inputs).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    loss, grads = step()
    model.gradient_checkpointing_enable()
    loss_ckpt, grads_ckpt = step()
    model.gradient_checkpointing_disable()
    model.set_attn_implementation("eager")
    loss_eager, grads_eager = step()
    for other_loss, other in ((loss_ckpt, grads_ckpt), (loss_eager, grads_eager)):
        assert_close(other_loss, loss, atol=1e-6, rtol=1e-6)
        for name, grad in grads.items():
            assert_close(other[name], grad, atol=1e-6, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def assert_dropout_only_in_training(model, inputs):
    model.train()
    torch.manual_seed(1)
    a = model(**inputs).loss
    torch.manual_seed(2)
    b = model(**inputs).loss
    assert not torch.equal(a, b)
    model.eval()
    assert torch.equal(model(**inputs).loss, model(**inputs).loss)


def assert_same_seq2seq_head_output(ref, ours, inputs, tol):
    """A T5/BART classification or QA head returns the reference's output class with the same fields: the
    encoder's last hidden state, hidden states and attentions, the decoder's, the cross-attentions and the
    cache (its keys and values), equal to `tol`; and with `return_dict=False` the same tuple, entry by entry.
    The models run eagerly (`output_attentions`)."""
    kwargs = dict(inputs, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = ref(**kwargs), ours(**kwargs)
        expected_tuple, got_tuple = ref(**kwargs, return_dict=False), ours(**kwargs, return_dict=False)
    assert type(got).__name__ == type(expected).__name__
    assert list(got.keys()) == list(expected.keys())
    for name, value in expected.items():
        if isinstance(value, EncoderDecoderCache):
            for which in ("self_attention_cache", "cross_attention_cache"):
                ref_layers, our_layers = getattr(value, which).layers, getattr(got[name], which).layers
                assert len(our_layers) == len(ref_layers), which
                for ref_layer, our_layer in zip(ref_layers, our_layers):
                    assert_close(our_layer.keys, ref_layer.keys, **tol)
                    assert_close(our_layer.values, ref_layer.values, **tol)
        elif isinstance(value, tuple):
            assert len(got[name]) == len(value), name
            for i, (a, b) in enumerate(zip(got[name], value)):
                assert_close(a, b, **tol, msg=lambda m: f"{name}[{i}]: {m}")
        else:
            assert_close(got[name], value, **tol, msg=lambda m: f"{name}: {m}")
    assert [type(x).__name__ for x in got_tuple] == [type(x).__name__ for x in expected_tuple]
    for a, b in zip(got_tuple, expected_tuple):
        if isinstance(b, torch.Tensor):
            assert_close(a, b, **tol)
