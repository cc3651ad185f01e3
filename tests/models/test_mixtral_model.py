"""Mixtral's model, config and converter: round trips both ways for every head, `from_pretrained` of a
transformers checkpoint folder, save / load and the Auto classes, gradient checkpointing, the same modules in the
same order whatever the routing (ZeRO-3), jitter in training only, a packed batch equal to its sequences alone,
LoRA on the attention projections and on the stacked experts (`target_parameters`), and the config's checks."""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import DataCollatorWithFlattening

import hf_xfmr
from hf_xfmr.models.mixtral import (
    XfmrMixtralConfig,
    XfmrMixtralForCausalLM,
    XfmrMixtralForQuestionAnswering,
    XfmrMixtralForSequenceClassification,
    XfmrMixtralForTokenClassification,
    XfmrMixtralModel,
)

from ._llama import padded_batch
from ._mixtral import HEAD_SUFFIXES, pair
from ._parity import module_sequence


def tiny(cls=XfmrMixtralForCausalLM, **overrides):
    torch.manual_seed(0)
    return cls(XfmrMixtralConfig.from_preset("tiny", pad_token_id=0, **overrides))


@pytest.mark.parametrize("task", list(HEAD_SUFFIXES))
def test_round_trips_are_bit_exact(task):
    ref, ours = pair("gqa", task, num_labels=3)
    back = hf_xfmr.to_transformers(ours)
    assert type(back) is type(ref)
    ref_state, back_state = ref.state_dict(), back.state_dict()
    assert set(back_state) == set(ref_state)
    assert all(torch.equal(back_state[k], ref_state[k]) for k in ref_state)
    again = hf_xfmr.from_transformers(back)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_from_pretrained_converts_a_transformers_checkpoint_folder(tmp_path):
    ref, _ = pair("window")
    ref.save_pretrained(tmp_path)
    ids, mask = padded_batch()
    ours = XfmrMixtralForCausalLM.from_pretrained(tmp_path).eval()
    assert ours.config.sliding_window == 4 and ours.config.num_experts_per_tok == 1
    with torch.no_grad():
        assert_close(ours(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                     ref(input_ids=ids, attention_mask=mask).logits[mask.bool()], atol=1e-5, rtol=1e-5)


def test_save_load_and_auto_classes(tmp_path):
    model = tiny().eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    for auto, cls in ((transformers.AutoModelForCausalLM, XfmrMixtralForCausalLM),
                      (transformers.AutoModel, XfmrMixtralModel),
                      (transformers.AutoModelForSequenceClassification, XfmrMixtralForSequenceClassification),
                      (transformers.AutoModelForTokenClassification, XfmrMixtralForTokenClassification),
                      (transformers.AutoModelForQuestionAnswering, XfmrMixtralForQuestionAnswering)):
        assert type(auto.from_pretrained(tmp_path)) is cls
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids, attention_mask=mask).logits,
                           model(input_ids=ids, attention_mask=mask).logits)
    assert hf_xfmr.models.get_architecture("mixtral").objectives == ("clm",)


def test_weights_are_initialised():
    model = tiny(initializer_range=0.05)
    experts = model.model.layers[0].mlp.experts
    for tensor in (experts.gate_up_proj, experts.down_proj, model.model.layers[0].mlp.gate.weight):
        assert 0.03 < tensor.std() < 0.07


def test_gradient_checkpointing_gives_the_same_gradients_with_the_aux_loss():
    model = tiny(output_router_logits=True, router_aux_loss_coef=0.5).train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    again = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert_close(again.aux_loss, out.aux_loss, atol=0, rtol=0)
    again.loss.backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, expected[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_the_same_modules_run_in_the_same_order_whatever_the_routing():
    """ZeRO-3 gathers parameters module by module: two batches routed differently (one sends every token to the
    same experts) must call the same modules in the same order; every expert runs, with or without tokens."""
    model = tiny(num_local_experts=4).train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    first = module_sequence(model, input_ids=ids, attention_mask=mask, labels=labels)
    skewed = tiny(num_local_experts=4).train()
    with torch.no_grad():
        for layer in skewed.model.layers:
            layer.mlp.gate.weight.zero_()
            layer.mlp.gate.weight[1] = 5.0 * torch.sign(torch.randn_like(layer.mlp.gate.weight[1]))
    second = module_sequence(skewed, input_ids=ids[:2, :5], attention_mask=None, labels=ids[:2, :5])
    assert first == second
    assert sum(name.endswith("mlp.experts") for name in first) == 2  # one grouped call per layer
    out = skewed(input_ids=ids[:2, :5], labels=ids[:2, :5])
    out.loss.backward()
    assert all(p.grad is not None for p in skewed.parameters())


def test_jitter_only_in_training():
    model = tiny(router_jitter_noise=0.2)
    ids = torch.randint(3, 90, (2, 6))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
        evaluated = model(input_ids=ids).logits
        model.train()
        model.config.chunked_lm_loss = False
        trained = model(input_ids=ids).logits
    assert not torch.allclose(trained, evaluated)


@pytest.mark.parametrize("flash_kwargs", [False, True])
def test_packed_batch_equals_its_sequences_alone(flash_kwargs):
    _, ours = pair("gqa")
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 99, (n,), generator=g).tolist() for n in (7, 4, 9)]
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=flash_kwargs, return_tensors="pt")
    batch = collator([{"input_ids": s} for s in seqs])
    with torch.no_grad():
        packed = ours(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                      **{k: v for k, v in batch.items() if k.startswith(("cu_seq", "max_length"))})
        start = 0
        for seq in seqs:
            alone = ours(input_ids=torch.tensor([seq]))
            end = start + len(seq)
            assert_close(packed.logits[0, start:end], alone.logits[0], atol=1e-5, rtol=1e-5)
            assert_close(packed.router_logits[1][start:end], alone.router_logits[1], atol=1e-5, rtol=1e-5)
            start = end


def test_lora_on_attention_projections_and_on_the_stacked_experts():
    """PEFT LoRA: `target_modules` on q/k/v/o_proj and `target_parameters` on the experts' stacked weights; the
    adapters get gradients, and merging them gives the adapter model's outputs."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        target_parameters=["experts.gate_up_proj", "experts.down_proj"])
    model = get_peft_model(tiny(output_router_logits=True), config).train()
    ids = torch.randint(3, 90, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert sum("experts" in n for n in trained) == 2 * 2 * 2  # A and B, 2 stacked weights, 2 layers
    assert len(trained) == 2 * 4 * 2 + 8
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)  # lora_B starts at zero: make the adapters change the outputs
        model.eval()
        adapted = model(input_ids=ids).logits
        base = model.get_base_model()
        with model.disable_adapter():
            assert not torch.allclose(model(input_ids=ids).logits, adapted, atol=1e-4)
        merged = model.merge_and_unload()
        assert_close(merged(input_ids=ids).logits, adapted, atol=1e-5, rtol=1e-5)
        assert base is merged
    assert merged.generate(input_ids=ids, max_new_tokens=3, do_sample=False).shape == (2, 11)


def test_presets_and_config_errors():
    big = XfmrMixtralConfig.from_preset("mixtral-8x7b")
    assert (big.num_local_experts, big.num_experts_per_tok, big.head_dim, big.rope_theta) == (8, 2, 128, 1e6)
    assert XfmrMixtralConfig().router_aux_loss_coef == transformers.MixtralConfig().router_aux_loss_coef
    for overrides, message in [
        (dict(num_experts_per_tok=5), r"`num_experts_per_tok`=5 exceeds `num_local_experts`=4"),
        (dict(num_local_experts=0), r"`num_local_experts` must be a positive integer"),
        (dict(router_jitter_noise=1.0), r"`router_jitter_noise` must be a probability"),
        (dict(router_aux_loss_coef=-0.1), r"`router_aux_loss_coef` must be a number >= 0"),
        (dict(num_key_value_heads=3), r"must be a multiple of `num_key_value_heads`=3"),
        (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), r"rope_type='yarn' is not supported"),
    ]:
        with pytest.raises(ValueError, match=message):
            XfmrMixtralConfig.from_preset("tiny", **overrides)
    with pytest.raises(TypeError, match="num_experts"):
        XfmrMixtralConfig.from_preset("tiny", num_experts=4)
