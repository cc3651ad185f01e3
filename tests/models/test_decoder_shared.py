"""The shared decoder pieces every generative model reuses (models/generation.py, causal_lm.py, the decoder mask in
layers/masks.py, tensor rules in models/conversion.py), tested on their own, with hand-computed cases."""

import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close
from transformers import DynamicCache, EncoderDecoderCache, GenerationConfig

from hf_xfmr.layers.masks import decoder_attention_mask
from hf_xfmr.models.conversion import Conversion, TensorRule, transpose
from hf_xfmr.models.causal_lm import LARGE_VOCABULARY, lm_logits_and_loss, project_to_vocabulary
from hf_xfmr.models.generation import (
    check_generate_arguments,
    decoder_position_ids,
    packed_document_ids,
    prepare_cache,
)
from hf_xfmr.models.gpt import XfmrGPTConfig


# -- masks and positions ---------------------------------------------------------------------------
def test_decoder_mask_takes_the_cheapest_exact_form():
    assert decoder_attention_mask(None, 5, 5) == (None, True)  # plain causal prefill: sdpa's causal kernel
    assert decoder_attention_mask(None, 1, 9) == (None, False)  # one new token sees all keys
    ready = torch.ones(2, 1, 3, 3, dtype=torch.bool)
    mask, causal = decoder_attention_mask(ready, 3, 3)
    assert mask is ready and not causal
    mask, causal = decoder_attention_mask(None, 2, 4)  # two new tokens after two cached ones
    assert not causal and mask.tolist() == [[[[True, True, True, False], [True, True, True, True]]]]


def test_decoder_mask_with_padding_and_a_cache():
    padding = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])  # row 0 left-padded; 3 cached + 1 new token
    mask, causal = decoder_attention_mask(padding, 1, 4)
    assert not causal and mask.shape == (2, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [[False, True, True, True], [True, True, True, True]]


def test_decoder_mask_keeps_packed_documents_apart():
    documents = torch.tensor([[0, 0, 1, 1, 1]])
    mask, _ = decoder_attention_mask(None, 5, 5, documents)
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert torch.equal(mask[0, 0], expected.bool())
    with pytest.raises(ValueError, match="cannot follow a cache"):
        decoder_attention_mask(None, 2, 5, documents[:, :2])


def test_default_positions_count_real_tokens():
    assert decoder_position_ids(None, 0, 4, "cpu").tolist() == [[0, 1, 2, 3]]
    assert decoder_position_ids(None, 3, 2, "cpu").tolist() == [[3, 4]]
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])  # right padding: the reference's arange, unchanged
    assert decoder_position_ids(right, 0, 4, "cpu").tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])  # left padding: real tokens start at 0
    assert decoder_position_ids(left, 0, 5, "cpu")[0, 2:].tolist() == [0, 1, 2]
    assert decoder_position_ids(left, 3, 2, "cpu").tolist() == [[1, 2], [3, 4]]  # after 3 cached tokens


def test_packed_document_ids_from_restarting_positions():
    assert packed_document_ids(torch.tensor([[0, 1, 2, 3]]), 0) is None
    assert packed_document_ids(torch.tensor([[0, 1, 0, 1, 2]]), 0).tolist() == [[0, 0, 1, 1, 1]]
    assert packed_document_ids(torch.tensor([[0, 1, 0, 1, 2]]), past_length=4) is None  # after a cache: never
    assert packed_document_ids(None, 0) is None


def test_prepare_cache():
    config = XfmrGPTConfig.from_preset("tiny")
    assert isinstance(prepare_cache(None, True, config), DynamicCache)
    assert prepare_cache(None, False, config) is None
    cache = DynamicCache(config=config)
    assert prepare_cache(cache, False, config) is cache
    both = prepare_cache(None, True, config, cross_attention=True)  # encoder-decoders
    assert isinstance(both, EncoderDecoderCache) and isinstance(both.self_attention_cache, DynamicCache)
    assert prepare_cache(cache, True, config, cross_attention=True).self_attention_cache is cache
    with pytest.raises(TypeError, match="must be a transformers `Cache`"):
        prepare_cache(((torch.zeros(1), torch.zeros(1)),), True, config)


# -- the LM loss -----------------------------------------------------------------------------------
def _head_and_batch(bias=False):
    torch.manual_seed(0)
    head = nn.Linear(8, 13, bias=bias)
    hidden = torch.randn(2, 5, 8, requires_grad=True)
    labels = torch.randint(0, 13, (2, 5))
    labels[1, 3:] = -100
    return head, hidden, labels


@pytest.mark.parametrize("shift", [True, False], ids=["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("bias", [False, True])
def test_lm_loss_without_logits_equals_cross_entropy_of_the_logits(shift, bias):
    head, hidden, labels = _head_and_batch(bias)
    logits_bias = torch.randn(13)
    logits, loss = lm_logits_and_loss(head, hidden, labels, shift=shift, return_logits=False, logits_bias=logits_bias)
    assert logits is None
    full = head(hidden) + logits_bias
    if shift:
        expected = F.cross_entropy(full[:, :-1].reshape(-1, 13), labels[:, 1:].reshape(-1))
    else:
        expected = F.cross_entropy(full.reshape(-1, 13), labels.reshape(-1))
    assert_close(loss, expected)
    (grad,) = torch.autograd.grad(loss, hidden)
    (expected_grad,) = torch.autograd.grad(expected, hidden)
    assert_close(grad, expected_grad)


def test_lm_loss_paths_agree_and_honour_num_items():
    head, hidden, labels = _head_and_batch()
    logits, dense = lm_logits_and_loss(head, hidden, labels)
    assert logits.shape == (2, 5, 13)
    _, chunked = lm_logits_and_loss(head, hidden, labels, return_logits=False)
    wrapped = nn.Sequential(head)  # not a plain nn.Linear (e.g. a PEFT wrapper): the logits path
    _, through_logits = lm_logits_and_loss(wrapped, hidden, labels, return_logits=False)
    assert_close(chunked, dense) and assert_close(through_logits, dense)
    count = int((labels[:, 1:] != -100).sum())
    _, summed = lm_logits_and_loss(head, hidden, labels, return_logits=False, num_items_in_batch=1)
    assert_close(summed, dense * count)
    last, _ = lm_logits_and_loss(head, hidden, None, logits_to_keep=1)
    assert_close(last, logits[:, -1:])


# -- generate() checks ------------------------------------------------------------------------------
def _fake_model(is_encoder_decoder, limit, **generation):
    return types.SimpleNamespace(
        config=types.SimpleNamespace(is_encoder_decoder=is_encoder_decoder),
        generation_config=GenerationConfig(**generation),
        generation_position_limit=lambda: limit,
    )


def test_generate_checks_count_only_decoder_positions_for_encoder_decoders():
    prompt = torch.ones(1, 500, dtype=torch.long)  # the encoder's own input checks bound the prompt
    check_generate_arguments(_fake_model(True, 32), prompt, None, {"max_new_tokens": 32})
    with pytest.raises(ValueError, match=r"Generating 33 tokens after a 1-token prompt needs 33 positions"):
        check_generate_arguments(_fake_model(True, 32), prompt, None, {"max_new_tokens": 33})
    check_generate_arguments(_fake_model(False, None), prompt, None, {"max_new_tokens": 1000})  # no table


def test_generate_checks_read_the_generation_config_too():
    model = _fake_model(False, 64)
    model.generation_config.max_new_tokens = 0  # set after construction, which would have validated it
    with pytest.raises(ValueError, match="`max_new_tokens` must be a positive integer"):
        check_generate_arguments(model, torch.ones(1, 4, dtype=torch.long), None, {})
    check_generate_arguments(model, torch.ones(1, 4, dtype=torch.long), None, {"max_new_tokens": 5})
    explicit = GenerationConfig(num_beams=2)
    explicit.num_return_sequences = 4
    with pytest.raises(ValueError, match="`num_return_sequences`=4 needs `num_beams` >= 4"):
        check_generate_arguments(model, torch.ones(1, 4, dtype=torch.long), explicit, {"max_new_tokens": 5})


# -- tensor rules in conversions --------------------------------------------------------------------
class _Config:
    model_type = "toy"


def _toy_conversion():
    fused = TensorRule(ours=("layers.{i}.a.weight", "layers.{i}.b.weight"), theirs="blocks.{i}.ab.weight",
                       to_hf=lambda a, b: torch.cat([a.t(), b.t()], dim=1),
                       from_hf=lambda ab: tuple(part.t() for part in ab.chunk(2, dim=1)))
    flipped = TensorRule(ours="head_in.weight", theirs="proj.weight", to_hf=transpose,
                         from_hf=lambda w: (transpose(w),))
    return Conversion(hf_model_type="toy", hf_config_class=object, config_class=_Config, tasks={},
                      hf_base_prefix="backbone", body_rules=(("norm.", "ln."),),
                      head_rules=(("classifier.", "classifier."),),
                      task_head_rules={"special": (("classifier.", "score."),)},
                      tensor_rules=(fused, flipped))


def test_tensor_rules_split_fuse_and_transpose_exactly_both_ways():
    conversion = _toy_conversion()
    ours = {"model.layers.0.a.weight": torch.randn(3, 4), "model.layers.0.b.weight": torch.randn(3, 4),
            "model.layers.1.a.weight": torch.randn(3, 4), "model.layers.1.b.weight": torch.randn(3, 4),
            "model.head_in.weight": torch.randn(2, 5), "model.norm.weight": torch.randn(4),
            "classifier.weight": torch.randn(2, 4)}
    theirs = conversion.state_dict_to_transformers(ours, "special")
    assert set(theirs) == {"backbone.blocks.0.ab.weight", "backbone.blocks.1.ab.weight", "backbone.proj.weight",
                           "backbone.ln.weight", "score.weight"}
    assert theirs["backbone.blocks.1.ab.weight"].shape == (4, 6)
    assert torch.equal(theirs["backbone.blocks.1.ab.weight"][:, 3:], ours["model.layers.1.b.weight"].t())
    assert "classifier.weight" in conversion.state_dict_to_transformers(ours, "other")  # task rules are per task
    back = conversion.state_dict_from_transformers(theirs, "special")
    assert set(back) == set(ours) and all(torch.equal(back[k], v) for k, v in ours.items())
    base = conversion.state_dict_to_transformers({k[len("model."):]: v for k, v in ours.items()
                                                   if k.startswith("model.")}, "base")
    assert "blocks.0.ab.weight" in base and "proj.weight" in base
    with pytest.raises(KeyError, match=r"needs \['model.layers.0.b.weight'\] as well"):
        conversion.state_dict_to_transformers({"model.layers.0.a.weight": torch.zeros(3, 4)}, "special")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 8, 65])
def test_vocabulary_projection_of_a_decoding_step_equals_the_linear_layer(rows, bias):
    """A few rows onto a large vocabulary run as (W @ h^T)^T without autograd (65 rows and training: as is)."""
    torch.manual_seed(0)
    head = nn.Linear(16, LARGE_VOCABULARY, bias=bias)
    hidden = torch.randn(rows, 1, 16)  # (B, T', C): one new position per row
    with torch.no_grad():
        assert_close(project_to_vocabulary(head, hidden), head(hidden), rtol=0, atol=1e-5)
    assert project_to_vocabulary(head, hidden).requires_grad  # with autograd: the layer itself
