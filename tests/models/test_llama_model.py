"""The Llama family's model, config and converter: round trips both ways (ours -> transformers -> ours, and the
source's type back: a Mistral checkpoint converts back to Mistral), `from_pretrained` of transformers checkpoint
folders of each type, save / load and the Auto classes, tied embeddings, gradient checkpointing, one LoRA target
list, the config's checks and the converter's refusals."""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.layers.rope import scaled_rope_inv_freq
from hf_xfmr.models.conversion import ConversionWarning
from hf_xfmr.models.llama import (
    XfmrLlamaConfig,
    XfmrLlamaForCausalLM,
    XfmrLlamaForQuestionAnswering,
    XfmrLlamaForSequenceClassification,
    XfmrLlamaForTokenClassification,
    XfmrLlamaModel,
)

from ._llama import HEAD_SUFFIXES, VARIANTS, hf_class, hf_config, pair, padded_batch


def tiny(cls=XfmrLlamaForCausalLM, **overrides):
    torch.manual_seed(0)
    return cls(XfmrLlamaConfig.from_preset("tiny", pad_token_id=0, **overrides))


@pytest.mark.parametrize("task", list(HEAD_SUFFIXES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_round_trips_are_bit_exact_and_give_back_the_source_type(variant, task):
    ref, ours = pair(variant, task, num_labels=3)
    back = hf_xfmr.to_transformers(ours)
    assert type(back) is hf_class(variant, task) and back.config.model_type == ref.config.model_type
    ref_state, back_state = ref.state_dict(), back.state_dict()
    assert set(back_state) == set(ref_state)
    assert all(torch.equal(back_state[k], ref_state[k]) for k in ref_state)
    again = hf_xfmr.from_transformers(back)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())
    assert back.config.rope_parameters == ref.config.rope_parameters
    for name in ("num_key_value_heads", "head_dim", "tie_word_embeddings", "rms_norm_eps", "sliding_window"):
        assert getattr(back.config, name, None) == getattr(ref.config, name, None), name


@pytest.mark.parametrize("variant", ["llama-gqa", "mistral", "qwen2"])
def test_from_pretrained_converts_a_transformers_checkpoint_folder(variant, tmp_path):
    ref, _ = pair(variant)
    ref.save_pretrained(tmp_path)
    ids, mask = padded_batch()
    ours = XfmrLlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert ours.config.hf_model_type == ref.config.model_type
    with torch.no_grad():
        assert_close(ours(input_ids=ids, attention_mask=mask).logits[mask.bool()],
                     ref(input_ids=ids, attention_mask=mask).logits[mask.bool()], atol=1e-5, rtol=1e-5)
    with pytest.warns(ConversionWarning, match="randomly initialised: score.weight"):  # a new head, named
        classifier = XfmrLlamaForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    assert classifier.config.num_labels == 2 and classifier.config.hf_model_type == ref.config.model_type


def test_save_load_auto_classes_and_tied_embeddings(tmp_path):
    model = tiny(tie_word_embeddings=True).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    for auto, cls in ((transformers.AutoModelForCausalLM, XfmrLlamaForCausalLM),
                      (transformers.AutoModel, XfmrLlamaModel),
                      (transformers.AutoModelForSequenceClassification, XfmrLlamaForSequenceClassification),
                      (transformers.AutoModelForTokenClassification, XfmrLlamaForTokenClassification),
                      (transformers.AutoModelForQuestionAnswering, XfmrLlamaForQuestionAnswering)):
        assert type(auto.from_pretrained(tmp_path)) is cls
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    ids, mask = padded_batch()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids, attention_mask=mask).logits,
                           model(input_ids=ids, attention_mask=mask).logits)
    assert type(transformers.AutoConfig.from_pretrained(tmp_path)) is XfmrLlamaConfig
    assert hf_xfmr.models.get_architecture("llama").objectives == ("clm",)
    untied = tiny()
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


def test_gradient_checkpointing_gives_the_same_gradients():
    model = tiny(num_key_value_heads=2).train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=True).loss.backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, expected[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_one_lora_target_list_trains_every_projection():
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(tiny(), LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=targets))
    model.train()
    ids = torch.randint(3, 90, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert len(trained) == 2 * len(targets) * 2  # A and B per target per layer (2 layers)
    model.eval()
    assert model.generate(input_ids=ids, max_new_tokens=3, do_sample=False).shape == (2, 11)


def test_llama3_rope_scaling_bands():
    """Rotations faster than context / high_freq_factor are kept, slower than context / low_freq_factor are
    divided by `factor`, and the band between is interpolated (Llama 3.1's scaling)."""
    rope = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                original_max_position_embeddings=64)
    base, _ = scaled_rope_inv_freq(8, dict(rope_type="default", rope_theta=10000.0))
    scaled, factor = scaled_rope_inv_freq(8, rope)
    assert factor == 1.0
    assert scaled[0] == base[0] and scaled[2] == base[2] / 8 and scaled[3] == base[3] / 8
    assert base[1] / 8 < scaled[1] < base[1]
    linear, _ = scaled_rope_inv_freq(8, dict(rope_type="linear", rope_theta=10000.0, factor=2.0))
    assert_close(linear, base / 2)


def test_presets_and_config_errors():
    mistral = XfmrLlamaConfig.from_preset("mistral-7b")
    assert (mistral.sliding_window, mistral.num_key_value_heads, mistral.head_dim) == (4096, 8, 128)
    qwen = XfmrLlamaConfig.from_preset("qwen2-0.5b")
    assert qwen.qkv_bias and qwen.hf_model_type == "qwen2" and qwen.tie_word_embeddings
    assert XfmrLlamaConfig.from_preset("llama-3.2-1b").rope_parameters["rope_type"] == "llama3"
    legacy = XfmrLlamaConfig.from_preset("tiny", rope_theta=500.0, rope_scaling={"type": "linear", "factor": 4.0})
    assert legacy.rope_parameters == {"rope_type": "linear", "factor": 4.0, "rope_theta": 500.0}
    for overrides, message in [
        (dict(num_key_value_heads=3), r"`num_attention_heads`=4 must be a multiple of `num_key_value_heads`=3"),
        (dict(head_dim=7), "must be even"),
        (dict(sliding_window=8), r"`sliding_window` is a mistral feature, but hf_model_type='llama'"),
        (dict(qkv_bias=True), r"`qkv_bias` is a qwen2 feature"),
        (dict(hf_model_type="mistral", mlp_bias=True), r"`mlp_bias` is a llama feature"),
        (dict(hf_model_type="gemma"), r"`hf_model_type`='gemma' is not supported"),
        (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}), r"rope_type='yarn' is not supported"),
        (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4}), r"of type 'linear' need factor"),
        (dict(attention_dropout=1.5), "`attention_dropout` must be a probability"),
    ]:
        with pytest.raises(ValueError, match=message):
            XfmrLlamaConfig.from_preset("tiny", **overrides)
    with pytest.raises(TypeError, match="num_kv_heads"):
        XfmrLlamaConfig.from_preset("tiny", num_kv_heads=2)


def test_converter_refusals_are_clear(tmp_path):
    torch.manual_seed(0)
    windowed = transformers.Qwen2ForCausalLM(hf_config("qwen2", use_sliding_window=True, sliding_window=4))
    with pytest.raises(ValueError, match="use_sliding_window=True .* not supported"):
        hf_xfmr.from_transformers(windowed)
    with pytest.raises(ValueError, match="cannot load .* 'gpt2' checkpoint"):
        ref = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=99))
        ref.save_pretrained(tmp_path)  # a checkpoint of another family
        XfmrLlamaForCausalLM.from_pretrained(tmp_path)


def test_bad_inputs_get_clear_errors():
    model = tiny().eval()
    ids = torch.randint(3, 90, (2, 8))
    with pytest.raises(ValueError, match=r"`input_ids` contains 1200, outside the vocabulary"):
        model(input_ids=ids.masked_fill(ids == ids[0, 0], 1200))
    with pytest.raises(ValueError, match=r"`labels` has shape \(2, 7\) but the inputs have shape \(2, 8\)"):
        model(input_ids=ids, labels=ids[:, :7])
    with pytest.raises(ValueError, match="4-D `attention_mask` must have shape"):
        model(input_ids=ids, attention_mask=torch.ones(2, 1, 8, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not take `token_type_ids`"):
        model(input_ids=ids, token_type_ids=torch.zeros_like(ids))
