"""BigBird against transformers, through the production converter.

Every head, block-sparse and full attention, training mode (dropout 0: the reference's seeded random blocks)
and eval mode (its all-zeros random blocks), lengths that are and are not multiples of the block size, padded
batches with token types: hidden states, logits, loss and the gradient of every parameter after one backward
pass, at fp32 atol 1e-5. With `unpad_inputs=False` the batch runs as given and is compared with the reference's
outputs at every position. With unpadding on (the default) a block-sparse batch is cut to its longest row, so
it is compared with the reference on that cut batch (the sparse layout depends on the length), at real
positions (padding positions must hold zeros; question answering against the span loss over real tokens).
Inputs of at most (5 + 2r) blocks take full attention, as the reference's do. Conversion both ways is exact.
"""

import logging

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import BigBirdConfig

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict

from ._parity import (
    assert_outputs_match,
    grads_of,
    masked_base_loss,
    real_positions,
    reference_qa_loss,
    with_task_labels,
)

ATOL, RTOL = 1e-5, 1e-5
BLOCK, RANDOM = 8, 2  # the sparse layout from (5 + 2 * 2) * 8 + 1 = 73 tokens on
SEP = 3

HEADS = {
    "base": "BigBirdModel",
    "pretraining": "BigBirdForPreTraining",
    "masked-lm": "BigBirdForMaskedLM",
    "sequence-classification": "BigBirdForSequenceClassification",
    "token-classification": "BigBirdForTokenClassification",
    "question-answering": "BigBirdForQuestionAnswering",
    "multiple-choice": "BigBirdForMultipleChoice",
}


def tiny_bigbird_config(**overrides):
    """A tiny BigBirdConfig without dropout: blocks of 8 tokens, 2 random blocks."""
    return BigBirdConfig(**{
        **dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=1024,
               block_size=BLOCK, num_random_blocks=RANDOM, sep_token_id=SEP, hidden_act="gelu_new"),
        **overrides})


def long_batch(longest, width, seed=0):
    """3 right-padded rows of `width` columns: `longest`, longest - 13 and longest - 30 real tokens; [CLS] (2)
    first, a [SEP] ending a 6-token question, token type 1 after it."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (3, width), generator=g)
    ids[:, 0], ids[:, 5] = 2, SEP
    mask = torch.zeros(3, width, dtype=torch.long)
    for row, length in enumerate((longest, longest - 13, longest - 30)):
        mask[row, :length] = 1
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return dict(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask, token_type_ids=types * mask)


def make_inputs(task, longest, width, seed=0, token_types=True):
    inputs = with_task_labels(long_batch(longest, width, seed), task, seed + 1, pair_label="next_sentence_label")
    if task == "question-answering":
        inputs["start_positions"] = torch.tensor([7, 9, 0])
        inputs["end_positions"] = torch.tensor([12, 9, 500])  # the last is out of range, so ignored
    if not token_types:
        del inputs["token_type_ids"]
    return inputs


def cut_to_longest(inputs):
    """The batch as `padding="longest"` makes it: per-token tensors cut to the longest row."""
    longest = int(real_positions(inputs).sum(-1).max())
    seq_len = inputs["attention_mask"].shape[-1]
    return {name: value[..., :longest].contiguous() if value.shape[-1] == seq_len else value
            for name, value in inputs.items()}


def narrow(output, inputs, width):
    """`output` with its per-position tensors (and every hidden state) cut to the first `width` positions."""
    seq_len = inputs["attention_mask"].shape[-1]
    cut = dict(output.items())
    for key, value in cut.items():
        if isinstance(value, tuple):
            cut[key] = tuple(v[:, :width] for v in value)
        elif value.dim() >= 2 and value.shape[1] == seq_len:
            cut[key] = value[:, :width]
    return type(output)(**cut)


def build_pair(task, attention_type="block_sparse", attn="eager", **overrides):
    config = tiny_bigbird_config(num_labels=2 if task == "question-answering" else 3, attention_type=attention_type,
                                 **overrides)
    ref = getattr(transformers, HEADS[task])._from_config(config, attn_implementation="eager")  # its only kernel
    ours = hf_xfmr.from_transformers(ref)
    ours.set_attn_implementation(attn)
    assert ours.config._attn_implementation == attn
    assert type(ours).__name__ == "Xfmr" + HEADS[task]
    assert ours.config.unpad_inputs  # the default
    return ref, ours


def check_parity(ref, ours, task, inputs, *, unpad, training):
    ours.config.unpad_inputs = unpad
    ref.train(training), ours.train(training)  # dropout is 0: training mode differs by its random blocks only
    ref_inputs = cut_to_longest(inputs) if unpad else inputs
    extra = dict(output_hidden_states=True)
    ref_out = ref(**ref_inputs, **extra)
    our_out = ours(**inputs, **extra)
    width = ref_inputs["attention_mask"].shape[-1]
    # Ours are (B, T) wide; the reference's hidden states are as wide as it ran (padded to a multiple of the
    # block size), its other outputs (B, T) of its own inputs: compare on the reference inputs' width.
    our_view, ref_view = narrow(our_out, inputs, width), narrow(ref_out, ref_inputs, width)
    keep = real_positions(ref_inputs)
    qa_masked = unpad and task == "question-answering"
    assert_outputs_match(our_view, ref_view, keep, unpadded=unpad, atol=ATOL, rtol=RTOL,
                         skip=("loss",) if qa_masked else ())
    if task == "base":
        loss_ref, loss_ours = masked_base_loss(ref_out, keep), masked_base_loss(narrow(our_out, inputs, width), keep)
    elif qa_masked:
        loss_ref, loss_ours = reference_qa_loss(ref_out, ref_inputs), our_out.loss
        assert_close(loss_ours, loss_ref, atol=ATOL, rtol=RTOL)
    else:
        loss_ref, loss_ours = ref_out.loss, our_out.loss
    assert loss_ref is not None and torch.isfinite(loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    ref_grads = convert_state_dict(grads_of(ref), "big_bird", task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) <= set(ref_grads) | {"lm_head.decoder.weight"}
    assert len(our_grads) >= len(ref_grads) - 1 and len(our_grads) > 10
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")
    return our_out


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("task", list(HEADS))
def test_block_sparse_parity(task, training, unpad):
    """Longest row 101 tokens (not a multiple of 8) in a batch 120 wide (a multiple of 8)."""
    ref, ours = build_pair(task)
    check_parity(ref, ours, task, make_inputs(task, 101, 120), unpad=unpad, training=training)
    assert ref.config.attention_type == "block_sparse"  # the reference did not fall back to full attention


def ragged_inputs(task, lengths, width, seed=0):
    """Right-padded rows of `lengths` real tokens in `width` columns, [CLS] (2) first, a [SEP] ending a 6-token
    question, token type 1 after it; the task's labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 99, (len(lengths), width), generator=g)
    ids[:, 0], ids[:, 5] = 2, SEP
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    inputs = dict(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask, token_type_ids=types * mask)
    inputs = with_task_labels(inputs, task, seed + 1)
    if task == "question-answering":
        inputs["start_positions"] = torch.tensor([7, 9, 0, 20])
        inputs["end_positions"] = torch.tensor([12, 9, 500, 30])  # the third is out of range, so ignored
    return inputs


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("task", ["sequence-classification", "masked-lm", "question-answering"])
def test_block_sparse_parity_on_rows_of_very_different_lengths(task, training, unpad):
    """One full row (200 tokens, 26 blocks once padded to a multiple of 8), one ending in the second half, two in
    the first half (one inside a block): unpadded, only the real tokens run the projections and feed-forward
    blocks, and only the query blocks holding a real token are computed (not the last, global, block of the short
    rows)."""
    ref, ours = build_pair(task)
    check_parity(ref, ours, task, ragged_inputs(task, (200, 131, 90, 77), 200), unpad=unpad, training=training)
    assert ref.config.attention_type == "block_sparse"


@pytest.mark.parametrize("longest,width", [(96, 96), (97, 99)])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("task", ["masked-lm", "question-answering"])
def test_block_sparse_parity_other_lengths(task, training, longest, width):
    """Unpadded batches whose longest row fills them, a multiple of the block size or not; QA without token types
    (the question's tokens get type 0, the rest type 1, as the reference's)."""
    ref, ours = build_pair(task)
    inputs = make_inputs(task, longest, width, seed=3, token_types=task != "question-answering")
    check_parity(ref, ours, task, inputs, unpad=True, training=training)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_block_sparse_parity_at_1024_tokens_the_papers_random_plan(training):
    ref, ours = build_pair("masked-lm", attn="sdpa")
    inputs = make_inputs("masked-lm", 1024, 1024)
    inputs["attention_mask"][:] = 1
    check_parity(ref, ours, "masked-lm", inputs, unpad=False, training=training)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_original_full_parity(task, attn, unpad):
    """Full attention unpads as BERT (exact on the batch as given: cutting it changes nothing)."""
    ref, ours = build_pair(task, "original_full", attn)
    check_parity(ref, ours, task, make_inputs(task, 50, 60), unpad=unpad, training=True)


@pytest.mark.parametrize("task", ["masked-lm", "sequence-classification"])
def test_short_inputs_take_full_attention_and_say_so_once(task, caplog):
    """At most (5 + 2r) blocks: full attention, as the reference (which switches itself to it for good)."""
    import hf_xfmr.layers.block_sparse as block_sparse

    block_sparse._FULL_ATTENTION_LOGGED.discard((BLOCK, RANDOM))
    ref, ours = build_pair(task)
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.layers.block_sparse"):
        check_parity(ref, ours, task, make_inputs(task, 60, 72), unpad=False, training=True)
        ours(**long_batch(50, 50))
    assert ref.config.attention_type == "block_sparse" and ref.bert.attention_type == "original_full"
    assert ours.config.attention_type == "block_sparse"  # ours decides per forward
    messages = [r.getMessage() for r in caplog.records if r.name == "hf_xfmr.layers.block_sparse"]
    assert len(messages) == 1 and "runs full attention" in messages[0]


@pytest.mark.parametrize("task", list(HEADS))
def test_round_trip_ours_to_transformers_to_ours_is_exact(task):
    ref, ours = build_pair(task)
    there = hf_xfmr.to_transformers(ours)
    assert type(there) is type(ref)
    for (name, a), (other, b) in zip(ref.state_dict().items(), there.state_dict().items(), strict=True):
        assert name == other and torch.equal(a, b), name
    back = hf_xfmr.from_transformers(there)
    assert type(back) is type(ours)
    assert back.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_rescaled_embeddings_and_no_qkv_bias():
    ref, ours = build_pair("masked-lm", rescale_embeddings=True, use_bias=False, hidden_act="relu")
    assert ours.model.layers[0].attn.q_proj.bias is None and ours.model.layers[0].attn.o_proj.bias is not None
    check_parity(ref, ours, "masked-lm", make_inputs("masked-lm", 90, 90), unpad=False, training=True)


@pytest.mark.parametrize("attention_type", ["block_sparse", "original_full"])
def test_question_answering_with_explicit_question_lengths(attention_type):
    ref, ours = build_pair("question-answering", attention_type)
    inputs = make_inputs("question-answering", 101, 101, token_types=False)
    inputs["question_lengths"] = torch.tensor([[4], [9], [2]])
    check_parity(ref, ours, "question-answering", inputs, unpad=False, training=True)
