"""The replaced-token-detection model (`XfmrElectraForReplacedTokenDetection`) against transformers.

Its generator equals transformers' `ElectraForMaskedLM` and its discriminator `ElectraForPreTraining`, given the
same weights (converted by the production converter) and the same sampled tokens (the same seed, the same sampling
function on the reference generator's logits): losses, logits and every gradient within fp32 1e-5, the shared
embeddings' gradient being the sum of the two references'. Also: the embeddings are one set of modules trained by
both losses, no gradient flows through the sample, the sampler draws from the softmax, a correct guess counts as
original, packed batches give the padded batch's results, and the two checkpoints load on their own, in hf_xfmr and
(converted) in transformers.
"""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import DataCollatorWithFlattening

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict
from hf_xfmr.models.electra import (
    XfmrElectraConfig,
    XfmrElectraForMaskedLM,
    XfmrElectraForPreTraining,
    XfmrElectraForReplacedTokenDetection,
)
from hf_xfmr.models.electra.rtd import sample_tokens

from ._parity import grads_of, module_sequence

ATOL, RTOL = 1e-5, 1e-5
MASK_ID = 4
SHARED = ("model.embeddings.word_embeddings.", "model.embeddings.position_embeddings.",
          "model.embeddings.token_type_embeddings.", "model.embeddings.norm.")


def tiny_rtd(**overrides):
    torch.manual_seed(0)
    config = XfmrElectraConfig.from_preset("tiny", vocab_size=99, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0, **overrides)
    return XfmrElectraForReplacedTokenDetection(config).train()


def masked_batch(seed=0, lengths=(11, 7, 4), seq_len=11):
    """A right-padded MLM batch: (input_ids with [MASK] at the masked positions, attention_mask, token types,
    labels: the original ids there, -100 elsewhere)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (len(lengths), seq_len), generator=g)
    mask = (torch.arange(seq_len)[None] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)
    chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
    chosen[0, 1] = chosen[1, 2] = True
    labels = torch.where(chosen, ids, -100)
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return torch.where(chosen, MASK_ID, ids), mask, types * mask, labels


def reference_step(model, inputs, seed):
    """The RTD step assembled from transformers' classes: ElectraForMaskedLM, the same sampling code with the same
    seed, ElectraForPreTraining. Returns (generator, discriminator, their outputs, the discriminator's input ids,
    the replaced labels)."""
    ref_gen = hf_xfmr.to_transformers(model.generator).train()
    ref_disc = hf_xfmr.to_transformers(model.discriminator).train()
    assert type(ref_gen) is transformers.ElectraForMaskedLM and type(ref_disc) is transformers.ElectraForPreTraining
    ids, labels = inputs["input_ids"], inputs["labels"]
    gen_out = ref_gen(**inputs)
    masked = labels != -100
    torch.manual_seed(seed)
    sampled = sample_tokens(gen_out.logits[masked].detach())
    disc_ids = ids.clone()
    disc_ids[masked] = sampled
    replaced = (disc_ids != torch.where(masked, labels, ids)).long()
    disc_out = ref_disc(input_ids=disc_ids, attention_mask=inputs["attention_mask"],
                        token_type_ids=inputs["token_type_ids"], labels=replaced)
    return ref_gen, ref_disc, gen_out, disc_out, disc_ids, replaced


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
def test_generator_and_discriminator_equal_the_transformers_classes(unpad):
    model = tiny_rtd(unpad_inputs=unpad)
    ids, mask, types, labels = masked_batch()
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    ref_gen, ref_disc, gen_out, disc_out, disc_ids, replaced = reference_step(model, inputs, seed=7)

    torch.manual_seed(7)
    out = model(**inputs)
    masked, keep = labels != -100, mask.bool()
    assert torch.equal(out.discriminator_input_ids, disc_ids)
    assert torch.equal(out.replaced, replaced)
    assert 0 < int(replaced.sum()) <= int(masked.sum())
    assert_close(out.generator_logits, gen_out.logits[masked], atol=ATOL, rtol=RTOL)
    assert_close(out.generator_loss, gen_out.loss, atol=ATOL, rtol=RTOL)
    assert_close(out.logits[keep], disc_out.logits[keep], atol=ATOL, rtol=RTOL)
    assert_close(out.discriminator_loss, disc_out.loss, atol=ATOL, rtol=RTOL)
    assert_close(out.loss, gen_out.loss + 50 * disc_out.loss, atol=ATOL, rtol=RTOL)

    # The accuracies, by hand from the reference's outputs.
    predicted = disc_out.logits > 0
    is_replaced = replaced.bool()
    expected = {
        "generator_accuracy": (gen_out.logits[masked].argmax(-1) == labels[masked]).float().mean(),
        "replaced_accuracy": predicted[is_replaced & keep].float().mean(),
        "original_accuracy": (~predicted)[~is_replaced & keep].float().mean(),
    }
    for name, value in expected.items():
        assert_close(getattr(out, name), value, atol=1e-6, rtol=0, msg=lambda m: f"{name}: {m}")

    # Gradients: each model's own parameters as its reference's; the shared embeddings get both.
    (gen_out.loss + 50 * disc_out.loss).backward()
    out.loss.backward()
    ref_gen_grads = convert_state_dict(grads_of(ref_gen), "electra", "masked-lm", to_hf=False)
    ref_disc_grads = convert_state_dict(grads_of(ref_disc), "electra", "pretraining", to_hf=False)
    ours = grads_of(model)
    assert len(ours) == len(list(model.parameters()))  # every (unique) parameter got a gradient
    for name, grad in ours.items():
        part, key = name.split(".", 1)
        if part == "discriminator":
            expected = ref_disc_grads[key] + (ref_gen_grads[key] if key.startswith(SHARED) else 0)
        else:
            assert not key.startswith(SHARED)  # the shared modules are listed once, under the discriminator
            expected = ref_gen_grads[key]
        assert_close(grad, expected, atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


def test_embeddings_are_one_set_of_modules_trained_by_both_losses_and_the_sample_carries_no_gradient():
    model = tiny_rtd()
    gen, disc = model.generator.model.embeddings, model.discriminator.model.embeddings
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "norm"):
        assert getattr(gen, name) is getattr(disc, name)
    assert model.generator.lm_head.decoder.weight is disc.word_embeddings.weight
    assert gen.hidden_proj is not disc.hidden_proj  # each model's own projection: 16 -> 8 and 16 -> 32
    assert (gen.hidden_proj.out_features, disc.hidden_proj.out_features) == (8, 32)
    ids, mask, types, labels = masked_batch()
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)

    def grads(seed=3, **weights):
        for name, value in weights.items():
            setattr(model.config, name, value)
        model.zero_grad()
        torch.manual_seed(seed)
        model(**inputs).loss.backward()
        return {n: p.grad.clone() if p.grad is not None else None for n, p in model.named_parameters()}

    generator_only = grads(generator_loss_weight=1.0, discriminator_loss_weight=0.0)
    discriminator_only = grads(generator_loss_weight=0.0, discriminator_loss_weight=1.0)
    both = grads(generator_loss_weight=1.0, discriminator_loss_weight=50.0)
    word = "discriminator.model.embeddings.word_embeddings.weight"
    for name in (word, "discriminator.model.embeddings.position_embeddings.weight"):
        assert generator_only[name].abs().sum() > 0 and discriminator_only[name].abs().sum() > 0
        assert_close(both[name], generator_only[name] + 50 * discriminator_only[name], atol=1e-5, rtol=1e-5)
    # The discriminator loss reaches no generator parameter of its own: nothing flows back through the sample.
    generator_own = [n for n in both if n.startswith("generator.")]
    assert generator_own and all(discriminator_only[n] is None or not discriminator_only[n].any()
                                 for n in generator_own)
    assert all(generator_only[n] is None or not generator_only[n].any()
               for n in both if n.startswith("discriminator.") and "embeddings" not in n)


def test_a_correct_guess_counts_as_original():
    model = tiny_rtd().eval()
    ids, mask, types, labels = masked_batch()
    masked = labels != -100
    labels = labels.masked_fill(masked, 17)  # every masked token was a 17
    with torch.no_grad():
        model.generator.lm_head.decoder.bias[17] = 1e4  # the generator always samples 17: the original
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
        assert not out.replaced.any() and torch.isnan(out.replaced_accuracy)
        assert (out.discriminator_input_ids[masked] == 17).all() and out.generator_accuracy == 1
        model.generator.lm_head.decoder.bias[23] = 2e4  # now always 23: every masked token is replaced
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    assert torch.equal(out.replaced.bool(), masked)
    assert torch.equal(out.discriminator_input_ids, torch.where(masked, 23, ids))
    assert out.generator_accuracy == 0


def test_sampling_draws_from_the_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(40000, 4)
    torch.manual_seed(0)
    counts = torch.bincount(sample_tokens(logits), minlength=4).float() / 40000
    assert_close(counts, torch.softmax(logits[0], -1), atol=0.01, rtol=0)
    torch.manual_seed(5)
    first = sample_tokens(logits[:50])
    torch.manual_seed(5)
    assert torch.equal(sample_tokens(logits[:50]), first)  # the global RNG decides
    assert sample_tokens(logits[:0]).shape == (0,)


def test_a_packed_batch_gives_the_results_of_the_padded_batch():
    model = tiny_rtd().eval()
    ids, mask, types, labels = masked_batch()
    keep = mask.bool()
    torch.manual_seed(11)
    padded = model(input_ids=ids, attention_mask=mask, labels=labels)
    rows = [{"input_ids": ids[r][keep[r]].tolist(), "labels": labels[r][keep[r]].tolist()} for r in range(3)]
    packed = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(rows)
    packed["labels"] = torch.tensor([[t for row in rows for t in row["labels"]]])  # the collator shifts none in
    torch.manual_seed(11)
    out = model(**packed)
    assert torch.equal(out.discriminator_input_ids[0], padded.discriminator_input_ids[keep])
    assert_close(out.logits[0], padded.logits[keep], atol=ATOL, rtol=RTOL)
    for name in ("generator_loss", "discriminator_loss", "loss"):
        assert_close(getattr(out, name), getattr(padded, name), atol=ATOL, rtol=RTOL)


def test_the_module_sequence_does_not_depend_on_padding_or_on_how_many_tokens_are_masked():
    """ZeRO-3 gathers parameters in module hooks: every rank must call the same modules in the same order."""
    model = tiny_rtd()
    ids, mask, types, labels = masked_batch()
    few = labels.clone()
    few[few != -100] = -100
    few[0, 1] = ids[0, 1] if ids[0, 1] != MASK_ID else 9
    reference = module_sequence(model, input_ids=ids, attention_mask=mask, labels=labels)
    assert "generator.lm_head.decoder" in reference and "discriminator.discriminator_head.out_proj" in reference
    assert module_sequence(model, input_ids=ids, attention_mask=torch.ones_like(mask), labels=labels) == reference
    assert module_sequence(model, input_ids=ids, attention_mask=mask, labels=few) == reference


def test_gradient_checkpointing_gives_the_same_gradients():
    model = tiny_rtd()
    ids, mask, types, labels = masked_batch()

    def grads():
        model.zero_grad()
        torch.manual_seed(2)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.activation_checkpointing_enable()
    assert all(layer.gradient_checkpointing for part in (model.generator, model.discriminator)
               for layer in part.model.layers)
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5)


def test_saves_as_two_ordinary_checkpoints_that_load_everywhere(tmp_path):
    model = tiny_rtd().eval()
    ids, mask, types, labels = masked_batch()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / "generator" / "model.safetensors").exists()

    # Ours: each part on its own, and the pair again, with the embeddings shared.
    disc = XfmrElectraForPreTraining.from_pretrained(tmp_path).eval()
    gen = XfmrElectraForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    assert gen.config.hidden_size == 8 and disc.config.hidden_size == 32
    with torch.no_grad():
        assert torch.equal(disc(input_ids=ids, attention_mask=mask).logits,
                           model.discriminator(input_ids=ids, attention_mask=mask).logits)
        assert torch.equal(gen(input_ids=ids, attention_mask=mask).logits,
                           model.generator(input_ids=ids, attention_mask=mask).logits)
    again = XfmrElectraForReplacedTokenDetection.from_pretrained(tmp_path).eval()
    assert again.generator.model.embeddings.word_embeddings is again.discriminator.model.embeddings.word_embeddings
    assert again.generator.lm_head.decoder.weight is again.discriminator.model.embeddings.word_embeddings.weight
    for (name, a), (other, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert name == other and torch.equal(a, b), name
    torch.manual_seed(1)
    first = model(input_ids=ids, attention_mask=mask, labels=labels)
    torch.manual_seed(1)
    second = again(input_ids=ids, attention_mask=mask, labels=labels)
    assert torch.equal(first.loss, second.loss)

    # A state dict that lists the shared tensors once (DeepSpeed's gathered one) saves the same two checkpoints.
    once = {name: p.detach() for name, p in model.named_parameters()}
    assert not any(name.startswith("generator.model.embeddings.word_") for name in once)
    model.save_pretrained(tmp_path / "once", state_dict=once)
    from_once = XfmrElectraForReplacedTokenDetection.from_pretrained(tmp_path / "once")
    for (name, a), (other, b) in zip(model.state_dict().items(), from_once.state_dict().items(), strict=True):
        assert name == other and torch.equal(a, b), name

    # transformers: the converted discriminator finetunes as ElectraForSequenceClassification, the generator is
    # an ElectraForMaskedLM; ours loads the converted folders too.
    converted = tmp_path / "converted"
    model.save_pretrained(converted, transformers_format=True)
    classifier = transformers.ElectraForSequenceClassification.from_pretrained(converted, num_labels=2)
    assert torch.equal(classifier.electra.embeddings.word_embeddings.weight,
                       model.discriminator.model.embeddings.word_embeddings.weight)
    assert torch.equal(classifier.electra.embeddings_project.weight,
                       model.discriminator.model.embeddings.hidden_proj.weight)
    hf_gen = transformers.ElectraForMaskedLM.from_pretrained(converted / "generator").eval()
    with torch.no_grad():
        keep = mask.bool()
        assert_close(hf_gen(input_ids=ids, attention_mask=mask).logits[keep],
                     gen(input_ids=ids, attention_mask=mask).logits[keep], atol=ATOL, rtol=RTOL)
    assert type(XfmrElectraForPreTraining.from_pretrained(converted)) is XfmrElectraForPreTraining
    from_converted = XfmrElectraForReplacedTokenDetection.from_pretrained(converted)
    for (name, a), (other, b) in zip(model.state_dict().items(), from_converted.state_dict().items(), strict=True):
        assert name == other and torch.equal(a, b), name


def test_bad_inputs_and_mismatched_parts_are_refused():
    model = tiny_rtd()
    ids, mask, types, labels = masked_batch()
    with pytest.raises(ValueError, match="needs `input_ids`.*and `labels`"):
        model(input_ids=ids)
    with pytest.raises(ValueError, match="`labels` has shape \\(3, 10\\) but `input_ids` \\(3, 11\\)"):
        model(input_ids=ids, labels=labels[:, :10])
    config = XfmrElectraConfig.from_preset("tiny")
    generator = XfmrElectraForMaskedLM(XfmrElectraConfig.from_preset("tiny", embedding_size=8))
    with pytest.raises(ValueError, match="embeddings.word_embeddings has shape \\(1000, 8\\).*`embedding_size`"):
        XfmrElectraForReplacedTokenDetection.from_parts(XfmrElectraForPreTraining(config), generator)
    with pytest.raises(TypeError, match="XfmrElectraForPreTraining and an XfmrElectraForMaskedLM"):
        XfmrElectraForReplacedTokenDetection.from_parts(generator, generator)
    with pytest.warns(UserWarning, match="differ from the discriminator's"):
        XfmrElectraForReplacedTokenDetection.from_parts(XfmrElectraForPreTraining(config),
                                                        XfmrElectraForMaskedLM(config.generator_config()))


# -- the discriminator's auxiliary MLM loss (`discriminator_mlm_weight`, off by default) ---------------------------
def test_mlm_weight_zero_is_the_paper_model_and_its_loss_exactly():
    model = tiny_rtd()
    assert model.config.discriminator_mlm_weight == 0.0 and not hasattr(model, "discriminator_lm_head")
    assert not any("discriminator_lm_head" in name for name in model.state_dict())
    ids, mask, types, labels = masked_batch()
    torch.manual_seed(3)
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    assert out.discriminator_mlm_loss is None and out.discriminator_mlm_accuracy is None
    disc = model.discriminator(input_ids=out.discriminator_input_ids, attention_mask=mask, token_type_ids=types,
                               labels=out.replaced)
    assert torch.equal(out.logits, disc.logits) and torch.equal(out.discriminator_loss, disc.loss)
    assert torch.equal(out.loss, 1.0 * out.generator_loss + 50.0 * disc.loss)


def test_mlm_weight_adds_the_discriminators_mlm_loss_and_leaves_the_rest_unchanged():
    weight = 2.5
    plain, aux = tiny_rtd(), tiny_rtd(discriminator_mlm_weight=weight)
    missing, unexpected = plain.load_state_dict(aux.state_dict(), strict=False)
    assert not missing and sorted(unexpected) == sorted(
        f"discriminator_lm_head.{n}" for n in ("dense.weight", "dense.bias", "norm.weight", "norm.bias",
                                               "decoder.weight", "decoder.bias"))
    head = aux.discriminator_lm_head
    assert head.decoder.weight is aux.discriminator.model.embeddings.word_embeddings.weight  # tied, shared
    ids, mask, types, labels = masked_batch()
    outputs = []
    for model in (plain, aux):
        torch.manual_seed(3)
        outputs.append(model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels))
    first, second = outputs
    for name in ("generator_loss", "discriminator_loss", "logits", "discriminator_input_ids", "replaced"):
        assert torch.equal(getattr(first, name), getattr(second, name)), name

    # The reference: the discriminator's hidden states at the masked positions through the head, cross-entropy
    # against the original ids there.
    hidden = aux.discriminator(input_ids=second.discriminator_input_ids, attention_mask=mask, token_type_ids=types,
                               output_hidden_states=True).hidden_states[-1]  # (B, T, C)
    masked = labels != -100
    expected = torch.nn.functional.cross_entropy(head(hidden[masked]), labels[masked])
    assert_close(second.discriminator_mlm_loss, expected, atol=ATOL, rtol=RTOL)
    assert_close(second.loss, first.loss + weight * expected, atol=ATOL, rtol=RTOL)
    assert 0.0 <= second.discriminator_mlm_accuracy <= 1.0

    # It trains the discriminator's encoder and the shared embeddings, never the generator.
    second.discriminator_mlm_loss.backward()
    assert aux.discriminator.model.layers[0].attn.q_proj.weight.grad.abs().sum() > 0
    assert aux.discriminator.model.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert all(p.grad is None for n, p in aux.generator.named_parameters() if ".embeddings." not in f".{n}")


def test_the_mlm_head_is_not_in_the_saved_discriminator(tmp_path):
    from safetensors.torch import load_file

    model = tiny_rtd(discriminator_mlm_weight=1.0).eval()
    model.save_pretrained(tmp_path)
    assert not any("discriminator_lm_head" in key for key in load_file(tmp_path / "generator" / "model.safetensors"))
    expected = {k[len("discriminator."):] for k in model.state_dict() if k.startswith("discriminator.")}
    assert set(load_file(tmp_path / "model.safetensors")) == expected
    disc = XfmrElectraForPreTraining.from_pretrained(tmp_path)  # an ordinary discriminator
    for name, value in disc.state_dict().items():
        assert torch.equal(value, model.discriminator.state_dict()[name]), name
    # Loaded to continue training: the parts come back, the head is built afresh (weight 0 leaves it out).
    again = XfmrElectraForReplacedTokenDetection.from_pretrained(tmp_path)
    assert again.config.discriminator_mlm_weight == 1.0 and hasattr(again, "discriminator_lm_head")
    assert again.discriminator_lm_head.decoder.weight is again.discriminator.model.embeddings.word_embeddings.weight
    for name, value in again.state_dict().items():  # building the head left the loaded weights alone
        if not name.startswith("discriminator_lm_head."):
            assert torch.equal(value, model.state_dict()[name]), name
    off = XfmrElectraForReplacedTokenDetection.from_pretrained(tmp_path, discriminator_mlm_weight=0.0)
    assert not hasattr(off, "discriminator_lm_head")


@pytest.mark.parametrize("value", [-1.0, float("nan"), True])
def test_a_bad_mlm_weight_is_refused(value):
    with pytest.raises(ValueError, match="`discriminator_mlm_weight` must be a finite number >= 0"):
        XfmrElectraConfig.from_preset("tiny", discriminator_mlm_weight=value)


def test_the_mlm_weight_reaches_the_rtd_config_through_pretrain_options(tmp_path):
    from hf_xfmr.data import train_tokenizer
    from hf_xfmr.models import registry
    from hf_xfmr.training import PretrainArguments
    from hf_xfmr.training.objectives import get_objective
    from hf_xfmr.training.pretrain import build_config

    objective = get_objective("rtd")
    assert objective.config_options["discriminator_mlm_weight"] == "discriminator_mlm_weight"
    tokenizer = train_tokenizer("electra", ["the quick brown fox jumps over the lazy dog"] * 20, vocab_size=40)
    args = PretrainArguments(arch="electra", objective="rtd", output_dir=str(tmp_path),
                             config_overrides="discriminator_mlm_weight=3.0")
    arch = registry.get_architecture("electra")
    config = build_config(arch, objective.model_class(arch), tokenizer, objective, args)
    assert config.discriminator_mlm_weight == 3.0
    assert hasattr(XfmrElectraForReplacedTokenDetection(config), "discriminator_lm_head")
