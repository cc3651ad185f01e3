"""XLNet on its own: config validation, bad inputs, fast paths against the plain ones (sdpa vs eager,
query stream on target rows vs all rows, gradient checkpointing), save/load, Auto classes."""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr  # noqa: F401
from hf_xfmr.models.xlnet import (
    XfmrXLNetConfig,
    XfmrXLNetForSequenceClassification,
    XfmrXLNetLMHeadModel,
    XfmrXLNetModel,
)


def tiny(**overrides):
    return XfmrXLNetConfig.from_preset("tiny", dropout=0.0, summary_last_dropout=0.0, **overrides)


def batch(seed=0, B=4, L=12, P=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 9:] = 0
    ranks = torch.full((B, L), -1)
    positions = torch.stack([torch.randperm(9, generator=g)[:P].sort().values for _ in range(B)])
    for b in range(B):
        ranks[b, positions[b]] = torch.randperm(P, generator=g)
    positions[-1, -1] = -1  # an unused slot
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=(torch.arange(L) >= 6).long().expand(B, L),
                perm_ranks=ranks, target_positions=positions)


# -- config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "message"), [
    (dict(d_model=30, n_head=4), "divisible"),
    (dict(attn_type="causal"), "attn_type"),
    (dict(untie_r=False), "untie_r"),
    (dict(d_head=5), "d_head"),
    (dict(clamp_len=-3), "clamp_len"),
    (dict(dropout=1.5), "dropout"),
    (dict(summary_type="cls_index"), "summary_type"),
    (dict(ff_activation="tanh"), "ff_activation"),
    (dict(mem_len=-1), "mem_len"),
    (dict(pad_token_id=5000), "pad_token_id"),
])
def test_config_rejects_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        XfmrXLNetConfig.from_preset("tiny", **overrides)


def test_presets_and_aliases():
    base = XfmrXLNetConfig.from_preset("base")
    assert (base.d_model, base.n_layer, base.n_head, base.d_inner, base.d_head) == (768, 12, 12, 3072, 64)
    large = XfmrXLNetConfig.from_preset("large")
    assert (large.hidden_size, large.num_hidden_layers, large.num_attention_heads) == (1024, 24, 16)
    with pytest.raises(ValueError, match="preset"):
        XfmrXLNetConfig.from_preset("huge")


# -- bad input ------------------------------------------------------------------------------------
def _without(name, **updates):
    def change(inputs):
        inputs.pop(name)
        inputs.update(updates)
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_without("perm_ranks", perm_mask=torch.zeros(4, 12, 11)), "perm_mask"),
    (_without("perm_ranks", perm_mask=torch.zeros(4, 12, 12, dtype=torch.complex64)), "perm_mask.*bool or real"),
    (lambda x: x.update(perm_mask=torch.zeros(4, 12, 12)), "perm_mask.*perm_ranks"),
    (lambda x: x.update(target_mapping=torch.zeros(4, 3, 12)), "target_mapping.*target_positions"),
    (_without("target_positions", target_mapping=torch.zeros(4, 3, 11)), "target_mapping"),
    (_without("target_positions", target_mapping=torch.zeros(4, 3, 12, dtype=torch.long)), "float"),
    (lambda x: x.update(target_positions=torch.full((4, 3), 12)), "target_positions"),
    (lambda x: x.update(target_positions=torch.zeros(4, 3)), "integer"),
    (lambda x: x.update(perm_ranks=torch.zeros(4, 11, dtype=torch.long)), "perm_ranks"),
    (lambda x: x.update(input_mask=torch.zeros(4, 12)), "input_mask"),
])
def test_bad_inputs_name_the_argument(change, message):
    model = XfmrXLNetLMHeadModel(tiny()).eval()
    inputs = batch()
    change(inputs)
    with pytest.raises(ValueError, match=message):
        model(**inputs)


def test_mems_from_another_model_or_batch_are_rejected():
    model = XfmrXLNetModel(tiny()).eval()
    inputs = batch()
    mems = model(**inputs, use_mems=True).mems
    with pytest.raises(ValueError, match="mems"):
        model(**{k: v[:2] for k, v in inputs.items()}, mems=mems)  # another batch size
    with pytest.raises(ValueError, match="n_layer"):
        model(**inputs, mems=mems[:1])
    other = XfmrXLNetModel(tiny(d_model=64, n_head=4)).eval()
    with pytest.raises(ValueError, match="d_model"):
        other(**inputs, mems=mems)


def test_reuse_len_and_bi_data_errors():
    model = XfmrXLNetModel(tiny(reuse_len=12)).train()
    with pytest.raises(ValueError, match="reuse_len"):
        model(**batch(), use_mems=True)
    model.eval()(**batch(), use_mems=True)  # a short input in eval mode caches all it has
    model = XfmrXLNetModel(tiny(bi_data=True)).eval()
    with pytest.raises(ValueError, match="even batch"):
        model(**{k: v[:3] for k, v in batch().items()})


def test_labels_shape_error():
    model = XfmrXLNetLMHeadModel(tiny())
    with pytest.raises(ValueError, match="labels"):
        model(**batch(), labels=torch.zeros(4, 12, dtype=torch.long))


# -- fast paths against plain ones -----------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"bi_data": True, "clamp_len": 5}, {"attn_type": "uni", "same_length": True}])
def test_sdpa_matches_eager(overrides):
    torch.manual_seed(0)
    eager = XfmrXLNetLMHeadModel(tiny(**overrides)).eval()
    eager.config._attn_implementation = "eager"
    sdpa = XfmrXLNetLMHeadModel(tiny(**overrides)).eval()
    sdpa.load_state_dict(eager.state_dict())
    sdpa.config._attn_implementation = "sdpa"
    inputs = batch()
    labels = torch.randint(0, 1000, (4, 3))
    a, b = eager(**inputs, labels=labels), sdpa(**inputs, labels=labels)
    assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    a.loss.backward()
    b.loss.backward()
    for (name, p), q in zip(eager.named_parameters(), sdpa.parameters()):
        if p.grad is not None:
            assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("overrides", [{}, {"bi_data": True}, {"attn_type": "uni"}])
def test_target_rows_equal_the_all_rows_route(monkeypatch, overrides):
    """The query stream on the P target rows equals the reference's route (all L rows, mapped through
    target_mapping before and after attention), forced here for a one-hot mapping; and the compact
    inputs give the same result as the expanded ones."""
    from hf_xfmr.models.xlnet import modeling_xlnet

    torch.manual_seed(0)
    model = XfmrXLNetLMHeadModel(tiny(**overrides)).eval()
    inputs = batch()
    B, L = inputs["input_ids"].shape
    positions = inputs.pop("target_positions")
    mapping = torch.zeros(B, positions.shape[1], L)
    valid = positions >= 0
    mapping[torch.nonzero(valid, as_tuple=True) + (positions[valid],)] = 1.0
    labels = torch.randint(0, 1000, positions.shape).masked_fill(~valid, -100)
    fast = model(**inputs, target_mapping=mapping, labels=labels)
    compact = model(**inputs, target_positions=positions, labels=labels)
    assert_close(compact.logits, fast.logits, atol=1e-6, rtol=1e-6)
    monkeypatch.setattr(modeling_xlnet, "_is_one_hot_mapping", lambda m: False)
    slow = model(**inputs, target_mapping=mapping, labels=labels)
    assert_close(fast.logits, slow.logits, atol=1e-5, rtol=1e-5)
    assert_close(fast.loss, slow.loss, atol=1e-6, rtol=1e-6)


def test_gradient_checkpointing_gives_the_same_grads():
    torch.manual_seed(0)
    model = XfmrXLNetLMHeadModel(tiny()).train()
    inputs = batch()
    labels = torch.randint(0, 1000, (4, 3))
    model(**inputs, labels=labels).loss.backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.gradient_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    model(**inputs, labels=labels).loss.backward()
    for name, grad in plain.items():
        assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-6, rtol=1e-5)


def test_bf16_autocast_runs_and_stays_close():
    torch.manual_seed(0)
    model = XfmrXLNetLMHeadModel(tiny()).eval()
    inputs = batch()
    ref = model(**inputs).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(**inputs).logits
    assert torch.isfinite(low).all()
    assert (low.float() - ref).abs().max() < 0.1


def test_pad_tokens_do_not_change_real_outputs():
    torch.manual_seed(0)
    model = XfmrXLNetModel(tiny()).eval()
    inputs = batch()
    inputs.pop("perm_ranks"), inputs.pop("target_positions")
    out = model(**inputs).last_hidden_state
    changed = dict(inputs, input_ids=inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, 7))
    again = model(**changed).last_hidden_state
    real = inputs["attention_mask"].bool()
    assert_close(again[real], out[real])


def test_save_load_and_auto_classes(tmp_path):
    model = XfmrXLNetForSequenceClassification(tiny(num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrXLNetForSequenceClassification
    inputs = batch()
    inputs.pop("perm_ranks"), inputs.pop("target_positions")
    assert_close(loaded(**inputs).logits, model(**inputs).logits)
    assert type(transformers.AutoModelForCausalLM.from_config(tiny())) is XfmrXLNetLMHeadModel
    assert type(transformers.AutoModel.from_config(tiny())) is XfmrXLNetModel
