"""ModernBERT against transformers, through the production converter.

Every head, eager and sdpa, padded batches with odd lengths longer than the local window, unpadded (the
default) and on the padded path (`unpad_inputs=False`): outputs at real positions, loss and the gradient
of every parameter after one backward pass, at fp32 atol 1e-5. Padding positions are zeros on our side
(the reference computes values there that nothing reads). The MLM head is in its default configuration
(`chunked_lm_loss`: no logits in training) and, for the logits, with `chunked_lm_loss=False`.
"""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict

from ._parity import grads_of, real_positions, reference_qa_loss

ATOL, RTOL = 1e-5, 1e-5
VOCAB = 99
HEADS = {
    "base": "ModernBertModel",
    "masked-lm": "ModernBertForMaskedLM",
    "sequence-classification": "ModernBertForSequenceClassification",
    "token-classification": "ModernBertForTokenClassification",
    "question-answering": "ModernBertForQuestionAnswering",
    "multiple-choice": "ModernBertForMultipleChoice",
}


def tiny_config(**overrides):
    """3 layers (global, local, local), a window of 8 tokens (+-4): every test batch is longer."""
    kwargs = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                  local_attention=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                  cls_token_id=1, sep_token_id=2)
    return transformers.ModernBertConfig(**{**kwargs, **overrides})


def padded_batch(batch=3, seq_len=21, seed=0):
    """Right padding: row 1 keeps 13 tokens, row 2 keeps 5 (odd lengths, longer and shorter than the window)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 13), (2, 5)):
        if row < batch:
            mask[row, keep:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def make_inputs(task, seed=0, **batch_kwargs):
    ids, mask = padded_batch(seed=seed, **batch_kwargs)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = dict(input_ids=ids, attention_mask=mask)
    batch, seq_len = ids.shape
    if task == "masked-lm":
        chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
        chosen[0, 0] = True
        inputs["labels"] = torch.where(chosen, ids, -100)
    elif task == "sequence-classification":
        inputs["labels"] = torch.randint(0, 3, (batch,), generator=g)
    elif task == "token-classification":
        inputs["labels"] = torch.randint(0, 3, (batch, seq_len), generator=g).masked_fill(mask == 0, -100)
    elif task == "question-answering":
        inputs["start_positions"] = torch.tensor([3, 1, 2])
        inputs["end_positions"] = torch.tensor([5, 9, 4])
    elif task == "multiple-choice":
        inputs = {k: torch.stack([v, v.flip(0)], dim=1) for k, v in inputs.items()}  # (B, K=2, T)
        inputs["labels"] = torch.randint(0, 2, (batch,), generator=g)
    return inputs


def build_pair(task, attn, **overrides):
    num_labels = 2 if task == "question-answering" else 3
    ref = getattr(transformers, HEADS[task])._from_config(tiny_config(num_labels=num_labels, **overrides),
                                                          attn_implementation=attn)
    ours = hf_xfmr.from_transformers(ref)
    assert type(ours).__name__ == "Xfmr" + HEADS[task]
    assert ours.config._attn_implementation == attn
    return ref, ours


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_parity_outputs_loss_and_gradients(task, attn, unpad):
    ref, ours = build_pair(task, attn)
    assert ours.config.unpad_inputs and ours.config.chunked_lm_loss  # the defaults
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()  # dropout is 0: deterministic, with gradients
    inputs = make_inputs(task)
    ref_out = ref(**inputs, output_hidden_states=True)
    our_out = ours(**inputs, output_hidden_states=True)
    keep = real_positions(inputs)

    # hidden states (embeddings, each layer, last one normed) at real positions
    assert len(our_out.hidden_states) == len(ref_out.hidden_states) == 4
    for i, (a, b) in enumerate(zip(our_out.hidden_states, ref_out.hidden_states, strict=True)):
        assert_close(a[keep], b[keep], atol=ATOL, rtol=RTOL, msg=lambda m: f"hidden_states.{i}: {m}")
        assert not a[~keep].any(), "padding positions must be zeros"
    if task == "base":
        assert_close(our_out.last_hidden_state[keep], ref_out.last_hidden_state[keep], atol=ATOL, rtol=RTOL)
        loss_ours = our_out.last_hidden_state.square().mean()
        loss_ref = (ref_out.last_hidden_state * keep[..., None]).square().mean()
    elif task == "question-answering":
        for name in ("start_logits", "end_logits"):
            assert_close(getattr(our_out, name)[keep], getattr(ref_out, name)[keep], atol=ATOL, rtol=RTOL)
            assert (getattr(our_out, name)[~keep] == torch.finfo(torch.float32).min).all()
        loss_ours, loss_ref = our_out.loss, reference_qa_loss(ref_out, inputs)
        assert_close(loss_ours, loss_ref, atol=ATOL, rtol=RTOL)
    else:
        if task == "token-classification":
            assert_close(our_out.logits[keep], ref_out.logits[keep], atol=ATOL, rtol=RTOL)
        elif task == "masked-lm":  # chunked loss: no logits in training; dense ones without it, at real positions
            assert our_out.logits is None
            ours.config.chunked_lm_loss = False
            with torch.no_grad():
                dense = ours(**inputs)
            assert_close(dense.logits[keep], ref_out.logits[keep], atol=ATOL, rtol=RTOL)
            assert_close(dense.loss, ref_out.loss, atol=ATOL, rtol=RTOL)
        else:
            assert_close(our_out.logits, ref_out.logits, atol=ATOL, rtol=RTOL)
        assert torch.isfinite(ref_out.loss)
        assert_close(our_out.loss, ref_out.loss, atol=ATOL, rtol=RTOL)
        loss_ours, loss_ref = our_out.loss, ref_out.loss
    loss_ref.backward()
    loss_ours.backward()
    ref_grads = convert_state_dict(grads_of(ref), "modernbert", task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) <= set(ref_grads) | {"lm_head.decoder.weight"}
    assert len(our_grads) >= len(list(ours.parameters())) - 1
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


def test_attention_weights_match_reference_on_the_padded_path():
    ref, ours = build_pair("base", "eager")
    ref.eval(), ours.eval()
    ids, mask = padded_batch()
    a = ref(input_ids=ids, attention_mask=mask, output_attentions=True)
    b = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
    keep = mask.bool()
    for x, y in zip(b.attentions, a.attentions, strict=True):
        assert_close(x[keep[:, None, :, None].expand_as(x)], y[keep[:, None, :, None].expand_as(y)],
                     atol=ATOL, rtol=RTOL)
    assert_close(b.last_hidden_state[keep], a.last_hidden_state[keep], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("seq_len,window,every", [(7, 8, 3), (64, 8, 3), (33, 16, 2), (40, 8, 1), (50, 62, 3)])
def test_long_and_odd_sequences_without_padding(seq_len, window, every):
    """Sequences far longer than the window (many blocks), odd lengths, and a window wider than the input."""
    ref, ours = build_pair("masked-lm", "sdpa", local_attention=window,
                           layer_types=["full_attention" if i % every == 0 else "sliding_attention" for i in range(3)])
    ours.config.chunked_lm_loss = False  # logits in training too
    ref.train(), ours.train()
    g = torch.Generator().manual_seed(seq_len)
    ids = torch.randint(3, VOCAB, (2, seq_len), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100)
    labels[0, 0] = ids[0, 0]
    a, b = ref(input_ids=ids, labels=labels), ours(input_ids=ids, labels=labels)
    assert_close(b.logits, a.logits, atol=ATOL, rtol=RTOL)
    assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)
    a.loss.backward(), b.loss.backward()
    ref_grads = convert_state_dict(grads_of(ref), "modernbert", "masked-lm", to_hf=False)
    for name, grad in grads_of(ours).items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


def test_sparse_prediction_gives_the_reference_sparse_loss_and_logits():
    ref, ours = build_pair("masked-lm", "sdpa", sparse_prediction=True)
    ours.config.chunked_lm_loss = False  # the labelled positions' logits in training
    ref.train(), ours.train()
    inputs = make_inputs("masked-lm")
    a, b = ref(**inputs), ours(**inputs)
    n = int((inputs["labels"] != -100).sum())
    assert b.logits.shape == a.logits.shape == (n, VOCAB)
    assert_close(b.logits, a.logits, atol=ATOL, rtol=RTOL)
    assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("overrides", [
    dict(classifier_pooling="mean"), dict(hidden_activation="silu", classifier_activation="relu"),
    dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True),
    dict(tie_word_embeddings=False, decoder_bias=False), dict(global_rope_theta=5000.0, local_rope_theta=777.0),
])
def test_config_variants_convert_with_parity(overrides):
    rope = {k: overrides.pop(k) for k in ("global_rope_theta", "local_rope_theta") if k in overrides}
    if rope:
        overrides["rope_parameters"] = {
            "full_attention": {"rope_type": "default", "rope_theta": rope["global_rope_theta"]},
            "sliding_attention": {"rope_type": "default", "rope_theta": rope["local_rope_theta"]}}
    for task in ("masked-lm", "sequence-classification"):
        ref, ours = build_pair(task, "sdpa", **overrides)
        ref.eval(), ours.eval()
        for key, value in rope.items():
            assert getattr(ours.config, key) == value
        inputs = make_inputs(task)
        a, b = ref(**inputs), ours(**inputs)
        keep = real_positions(inputs)
        logits_a, logits_b = (a.logits[keep], b.logits[keep]) if task == "masked-lm" else (a.logits, b.logits)
        assert_close(logits_b, logits_a, atol=ATOL, rtol=RTOL)
        assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)
        back = hf_xfmr.to_transformers(ours)
        for (name, x), (_, y) in zip(ref.state_dict().items(), back.state_dict().items(), strict=True):
            assert torch.equal(x, y), name


@pytest.mark.parametrize("task", list(HEADS))
def test_round_trip_ours_to_transformers_to_ours_is_exact(task):
    _, ours = build_pair(task, "sdpa")
    hf = hf_xfmr.to_transformers(ours)
    assert type(hf).__name__ == HEADS[task]
    assert hf.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    back = hf_xfmr.from_transformers(hf)
    assert type(back) is type(ours)
    assert back.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_unsupported_reference_configs_raise_clear_errors():
    irregular = tiny_config(layer_types=["full_attention", "full_attention", "sliding_attention"])
    with pytest.raises(ValueError, match="not a 'global every n-th layer' pattern"):
        hf_xfmr.from_transformers(transformers.ModernBertModel(irregular))
    with pytest.raises(ValueError, match="first layer global"):
        hf_xfmr.from_transformers(transformers.ModernBertModel(
            tiny_config(layer_types=["sliding_attention", "full_attention", "sliding_attention"])))
    with pytest.raises(ValueError, match="odd"):
        hf_xfmr.from_transformers(transformers.ModernBertModel(tiny_config(local_attention=7)))


def test_chunked_lm_loss_gives_the_reference_loss_and_gradients_without_logits():
    ref, ours = build_pair("masked-lm", "sdpa", sparse_prediction=True)
    assert ours.config.chunked_lm_loss  # on by default: a converted model gets the benchmarked configuration
    ref.train(), ours.train()
    inputs = make_inputs("masked-lm")
    a, b = ref(**inputs), ours(**inputs)
    assert b.logits is None
    assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)
    a.loss.backward(), b.loss.backward()
    ref_grads = convert_state_dict(grads_of(ref), "modernbert", "masked-lm", to_hf=False)
    our_grads = grads_of(ours)
    assert len(our_grads) >= len(list(ours.parameters())) - 1
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")
    ours.eval()
    assert ours(**inputs).logits.shape == (*inputs["input_ids"].shape, VOCAB)  # eval: full logits as usual
