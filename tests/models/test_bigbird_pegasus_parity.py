"""BigBird-Pegasus parity with transformers through the production converter: BigBirdPegasusModel,
BigBirdPegasusForConditionalGeneration (a non-zero final_logits_bias), BigBirdPegasusForSequenceClassification,
BigBirdPegasusForQuestionAnswering and BigBirdPegasusForCausalLM; outputs, losses and every gradient to 1e-5
(fp32), in eval and training mode (dropout 0: the reference's seeded random blocks in training, its constant
pattern in eval), with the encoder in block_sparse mode (lengths that are and are not a multiple of the block size,
and a short input that takes full attention) and original_full mode, unpadded (the default: encoder outputs at real
positions, zeros at padding, decoder outputs everywhere) and with `unpad_inputs=False` (every position); the round
trip back to transformers."""

import functools

import pytest
import torch
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict
from hf_xfmr.models.seq2seq import shift_tokens_right

from ._bigbird_pegasus import FULL_LENGTH, PAD, SPARSE_LENGTHS, pair, padded_batch, padded_labels
from ._parity import assert_outputs_match, is_encoder_output, pair_with_unpadding
from ._seq2seq import assert_same_seq2seq_head_output

TOL = dict(atol=1e-5, rtol=1e-5)
UNPAD = pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
TRAIN = pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
# (encoder attention, input length): block-sparse at a multiple of the block size, at one that is not, and below the
# sparse threshold (full attention); full attention at a short and a long length.
LAYOUTS = pytest.mark.parametrize("attention_type,seq_len", [
    ("block_sparse", SPARSE_LENGTHS[0]), ("block_sparse", SPARSE_LENGTHS[1]), ("block_sparse", FULL_LENGTH),
    ("original_full", FULL_LENGTH), ("original_full", SPARSE_LENGTHS[1]),
])

# The encoder's hidden states: the reference's intermediate block-sparse ones have the padded length, so they are
# compared on the input's length (`assert_same_encoder_states`).
ENCODER_STATES = tuple(f"encoder_hidden_states.{i}" for i in range(3))

unpadded_pair = functools.partial(pair_with_unpadding, pair)  # unpadded_pair(unpad, *pair_args, **overrides)


def assert_same_grads(ref, ours, task):
    ref_grads = {name: p.grad for name, p in ref.named_parameters() if p.grad is not None}
    our_grads = {name: p.grad for name, p in ours.named_parameters() if p.grad is not None}
    converted = convert_state_dict(our_grads, "xfmr-bigbird-pegasus", task, to_hf=True)
    assert ref_grads, "no gradients"
    for name, grad in ref_grads.items():
        assert name in converted, name
        assert_close(converted[name], grad, **TOL, msg=lambda m: f"{name}: {m}")


def assert_same_encoder_states(got, expected, mask, unpad):
    """Encoder hidden states at real positions (and everywhere when padded). The reference returns its
    intermediate block-sparse states at the padded length: compared on the input's length."""
    keep = mask.bool()
    for ours, theirs in zip(got.encoder_hidden_states, expected.encoder_hidden_states, strict=True):
        theirs = theirs[:, :ours.shape[1]]
        if unpad:
            assert_close(ours[keep], theirs[keep], **TOL)
        else:
            assert_close(ours, theirs, **TOL)


def run_both(ref, ours, train, inputs):
    ref.train(train), ours.train(train)
    return ref(**inputs, output_hidden_states=True), ours(**inputs, output_hidden_states=True)


@LAYOUTS
@UNPAD
@TRAIN
def test_conditional_generation_outputs_loss_and_grads(attention_type, seq_len, unpad, train):
    ref, ours = unpadded_pair(unpad, attention_type=attention_type)
    ids, mask = padded_batch(seq_len=seq_len)
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    expected, got = run_both(ref, ours, train, inputs)
    if train:  # our loss comes from the chunked cross-entropy, without logits
        assert got.logits is None
        assert_close(got.loss, expected.loss, **TOL)
        assert_close(got.decoder_hidden_states[-1], expected.decoder_hidden_states[-1], **TOL)
    else:
        assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output,
                             skip=ENCODER_STATES, **TOL)
    assert_same_encoder_states(got, expected, mask, unpad)
    expected.loss.backward()
    got.loss.backward()
    assert_same_grads(ref, ours, "seq2seq-lm")


@pytest.mark.parametrize("attention_type,seq_len", [("block_sparse", SPARSE_LENGTHS[1]), ("original_full", 11)])
@UNPAD
@TRAIN
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_base_model(attention_type, seq_len, unpad, train, attn):
    ref, ours = unpadded_pair(unpad, "BigBirdPegasusModel", attn, attention_type=attention_type)
    ids, mask = padded_batch(seq_len=seq_len)
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=shift_tokens_right(labels, PAD, PAD),
                  decoder_attention_mask=decoder_mask)
    expected, got = run_both(ref, ours, train, inputs)
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output,
                         skip=ENCODER_STATES, **TOL)
    assert_same_encoder_states(got, expected, mask, unpad)
    weights = torch.randn_like(expected.last_hidden_state)
    (expected.last_hidden_state * weights).mean().backward()
    (got.last_hidden_state * weights).mean().backward()
    assert_same_grads(ref, ours, "base")
    # without decoder inputs both read input_ids shifted right
    ref.eval(), ours.eval()
    assert_close(ours(input_ids=ids, attention_mask=mask).last_hidden_state,
                 ref(input_ids=ids, attention_mask=mask).last_hidden_state, **TOL)


@pytest.mark.parametrize("attention_type,seq_len", [("block_sparse", SPARSE_LENGTHS[0]),
                                                    ("block_sparse", SPARSE_LENGTHS[1]), ("original_full", 11)])
@UNPAD
@TRAIN
@pytest.mark.parametrize("hf_class,task", [
    ("BigBirdPegasusForSequenceClassification", "sequence-classification"),
    ("BigBirdPegasusForQuestionAnswering", "question-answering"),
])
def test_heads(hf_class, task, attention_type, seq_len, unpad, train):
    labels = "class" if task == "sequence-classification" else "span"
    ref, ours = unpadded_pair(unpad, hf_class, attention_type=attention_type,
                              num_labels=3 if labels == "class" else 2, classifier_dropout=0.0)
    ids, mask = padded_batch(seq_len=seq_len)
    inputs = dict(input_ids=ids, attention_mask=mask)
    if labels == "class":
        inputs["labels"] = torch.tensor([0, 2, 1])
    else:
        inputs.update(start_positions=torch.tensor([1, 3, 0]), end_positions=torch.tensor([4, 5, 2]))
    expected, got = run_both(ref, ours, train, inputs)
    # Both heads read the decoder: equal at every position (QA: the reference's logits and loss, padding not masked).
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output,
                         skip=ENCODER_STATES, **TOL)
    assert_same_encoder_states(got, expected, mask, unpad)
    expected.loss.backward()
    got.loss.backward()
    assert_same_grads(ref, ours, task)


@pytest.mark.parametrize("hf_class", ["BigBirdPegasusForSequenceClassification", "BigBirdPegasusForQuestionAnswering"])
def test_seq2seq_heads_return_the_reference_output_class_and_fields(hf_class):
    # Full attention (`output_attentions` needs it): the reference's Seq2Seq* output with the encoder's and
    # decoder's states, the cross-attentions and the cache.
    ref, ours = pair(hf_class, attn="eager", attention_type="original_full",
                     num_labels=3 if "Sequence" in hf_class else 2, classifier_dropout=0.0)
    ids, mask = padded_batch()
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask), TOL)
    targets = ({"labels": torch.tensor([0, 2, 1])} if "Sequence" in hf_class else
               {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([4, 5, 2])})
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask, **targets), TOL)
    assert ours(input_ids=ids, attention_mask=mask, **targets).past_key_values is None


@TRAIN
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_causal_lm(attn, train):
    # transformers sizes the causal LM's cache by `encoder_layers`: equal layer counts keep its cache working
    ref, ours = pair("BigBirdPegasusForCausalLM", attn, decoder_layers=2)
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)  # not shifted inside either model
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels)
    ref.train(train), ours.train(train)
    expected, got = ref(**inputs), ours(**inputs)
    if train:
        assert got.logits is None
    else:
        assert_close(got.logits, expected.logits, **TOL)
    assert_close(got.loss, expected.loss, **TOL)
    expected.loss.backward()
    got.loss.backward()
    assert_same_grads(ref, ours, "causal-lm")


def test_causal_lm_greedy_generation_matches_the_reference():
    ref, ours = pair("BigBirdPegasusForCausalLM", decoder_layers=2)
    ids = padded_batch()[0][:, :4]  # unpadded prompts
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False)
    assert torch.equal(ours.generate(ids, **kwargs), ref.generate(ids, **kwargs))


@pytest.mark.parametrize("hf_class", ["BigBirdPegasusModel", "BigBirdPegasusForConditionalGeneration",
                                      "BigBirdPegasusForSequenceClassification", "BigBirdPegasusForQuestionAnswering",
                                      "BigBirdPegasusForCausalLM"])
@pytest.mark.parametrize("use_bias", [True, False])
def test_round_trip_back_to_transformers(hf_class, use_bias):
    ref, ours = pair(hf_class, use_bias=use_bias)
    back = hf_xfmr.to_transformers(ours)
    assert type(back).__name__ == hf_class
    assert back.config.attention_type == ref.config.attention_type == "block_sparse"
    assert (back.config.block_size, back.config.num_random_blocks) == (ref.config.block_size,
                                                                       ref.config.num_random_blocks)
    expected, got = ref.state_dict(), back.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_task_base_from_a_model_with_a_head_takes_its_backbone():
    ref, _ = pair("BigBirdPegasusForConditionalGeneration")
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    base = hf_xfmr.from_transformers(ref, task="base").eval()
    decoder_ids = torch.full((3, 4), 5)
    expected = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                   output_hidden_states=True).decoder_hidden_states[-1]
    got = base(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
    assert_close(got, expected, **TOL)


@TRAIN
def test_the_paper_plan_of_random_blocks_at_1024_tokens(train):
    # Lengths 1024, 3072 and 4096 take the paper's older random-block plan, drawn for `max_position_embeddings`.
    ref, ours = pair(max_position_embeddings=1536, block_size=64, num_random_blocks=3)
    ids, mask = padded_batch(batch=2, seq_len=1024, keep=((1, 900),))
    labels, decoder_mask = padded_labels(batch=2)
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    ref.train(train), ours.train(train)
    expected, got = ref(**inputs), ours(**inputs)
    assert_close(got.loss, expected.loss, **TOL)
    keep = mask.bool()
    assert_close(got.encoder_last_hidden_state[keep], expected.encoder_last_hidden_state[keep], **TOL)
    expected.loss.backward()
    got.loss.backward()
    assert_same_grads(ref, ours, "seq2seq-lm")
