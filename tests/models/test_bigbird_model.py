"""BigBird beyond parity: config checks, what the block-sparse layout refuses, the fresh random blocks, unpadding
by cutting the batch, the same modules on every path, gradient checkpointing, torch.compile, save / load and the
drop-in loading of a transformers checkpoint."""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import AutoConfig, AutoModelForMaskedLM, BigBirdConfig

import hf_xfmr  # noqa: F401  (registers the Auto classes)
from hf_xfmr.models.bigbird import (
    XfmrBigBirdConfig,
    XfmrBigBirdForMaskedLM,
    XfmrBigBirdForQuestionAnswering,
    XfmrBigBirdForSequenceClassification,
    XfmrBigBirdModel,
)

from ._parity import module_sequence


def tiny(model_class=XfmrBigBirdModel, **overrides):
    torch.manual_seed(0)
    config = XfmrBigBirdConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                           **overrides)
    return model_class(config)


def batch(lengths, width, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 900, (len(lengths), width), generator=g)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return dict(input_ids=ids.masked_fill(mask == 0, 0), attention_mask=mask)


@pytest.mark.parametrize("field,value,message", [
    ("attention_type", "sparse", "attention_type"),
    ("random_blocks", "new", "random_blocks"),
    ("block_size", 0, "block_size"),
    ("num_random_blocks", -1, "num_random_blocks"),
    ("sep_token_id", 5000, "sep_token_id"),
])
def test_bad_config_values_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        XfmrBigBirdConfig.from_preset("tiny", **{field: value})


def test_the_block_sparse_layout_refuses_what_it_cannot_express():
    model = tiny().eval()
    inputs = batch([100, 90], 100)
    with pytest.raises(ValueError, match="never builds the .* attention weights.*original_full"):
        model(**inputs, output_attentions=True)
    with pytest.raises(ValueError, match="cannot keep packed sequences apart"):
        model(input_ids=inputs["input_ids"][:1], position_ids=torch.cat([torch.arange(50), torch.arange(50)])[None])
    with pytest.raises(ValueError, match="takes a \\(batch, seq_len\\) padding mask"):
        model(input_ids=inputs["input_ids"], attention_mask=torch.ones(2, 1, 100, 100, dtype=torch.bool))
    full = tiny(attention_type="original_full").eval()  # full attention takes all three
    assert len(full(**inputs, output_attentions=True).attentions) == 2
    short = model(**batch([40], 40), output_attentions=True)  # short inputs run full attention in sparse mode too
    assert short.attentions[0].shape == (1, 4, 40, 40)


@pytest.mark.parametrize("length", [73, 77, 100, 129])
def test_any_length_runs_and_equals_the_batch_padded_to_the_block_size(length):
    model = tiny(XfmrBigBirdForSequenceClassification, num_labels=2).eval()
    inputs = batch([length], length)
    width = -(-length // 8) * 8
    padded = batch([length], width)
    padded["input_ids"][:, :length] = inputs["input_ids"]
    model.config.unpad_inputs = False
    assert_close(model(**inputs).logits, model(**padded).logits, atol=1e-6, rtol=1e-5)


def test_fresh_random_blocks_change_every_training_step_and_follow_torch_seed():
    model = tiny(random_blocks="fresh").train()
    inputs = batch([120, 100], 120)
    torch.manual_seed(1)
    first = model(**inputs).last_hidden_state
    second = model(**inputs).last_hidden_state
    torch.manual_seed(1)
    again = model(**inputs).last_hidden_state
    assert not torch.allclose(first, second)
    assert torch.equal(first, again)
    model.eval()  # eval: the reference's seeded training pattern, fixed
    reference_train = tiny().train()(**inputs).last_hidden_state
    assert_close(model(**inputs).last_hidden_state, reference_train, atol=1e-6, rtol=1e-5)


def test_unpadding_runs_the_real_tokens_on_the_block_layout_of_the_longest_row_and_zeros_padding():
    model = tiny().eval()
    inputs = batch([101, 88, 75], 160)
    seen = []  # (hidden states' shape, the block layout's (B, T'))
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.append((args[0].shape, args[1].keep.shape)))
    out = model(**inputs).last_hidden_state
    # The real tokens only, in the layout of 101 columns padded to a multiple of 8: not 160.
    assert seen == [((101 + 88 + 75, 32), (3, 104))]
    assert not out[inputs["attention_mask"] == 0].any()
    model.config.unpad_inputs = False
    cut = {name: value[:, :101] for name, value in inputs.items()}
    keep = cut["attention_mask"].bool()
    assert_close(out[:, :101][keep], model(**cut).last_hidden_state[keep], atol=1e-6, rtol=1e-5)
    model(**inputs)
    assert seen[-1] == ((3, 160, 32), (3, 160))  # unpad_inputs=False: the batch as given


def test_unpadded_full_rows_run_without_a_mask():
    """Rows that all end at the longest one: nothing to hide, so no mask and no gathers (the MLM case)."""
    model = tiny().eval()
    inputs = batch([104, 104], 120)
    seen = []
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.append((args[0].shape, args[1])))
    out = model(**inputs).last_hidden_state
    (shape, layout), = seen
    assert shape == (2, 104, 32) and layout.keep is None and layout.tokens is None
    assert not out[:, 104:].any()
    model.config.unpad_inputs = False
    cut = {name: value[:, :104] for name, value in inputs.items()}
    assert_close(out[:, :104], model(**cut).last_hidden_state, atol=1e-6, rtol=1e-5)


def test_left_padding_runs_as_given():
    model = tiny().eval()
    inputs = batch([100, 80], 100)
    inputs = {name: value.flip(-1) for name, value in inputs.items()}  # row 1 starts with padding
    seen = []
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
    out = model(**inputs)
    assert seen == [(2, 104, 32)] and out.last_hidden_state[1, :20].any()  # not cut, padding positions not zeroed


@pytest.mark.parametrize("task_class", [XfmrBigBirdForMaskedLM, XfmrBigBirdForQuestionAnswering])
def test_every_path_calls_the_same_modules_in_the_same_order(task_class):
    model = tiny(task_class).train()
    sequences = []
    for unpad, inputs in ((True, batch([100, 60], 100)), (False, batch([100, 60], 100)), (True, batch([50], 50)),
                          (True, batch([100], 100))):
        model.config.unpad_inputs = unpad
        sequences.append(module_sequence(model, **inputs))
    assert all(seq == sequences[0] for seq in sequences)


def test_gradient_checkpointing_gives_the_same_gradients():
    inputs = batch([120, 90], 120)
    inputs["labels"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    grads = []
    for checkpointing in (False, True):
        model = tiny(XfmrBigBirdForMaskedLM).train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        model(**inputs).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_torch_compile_fullgraph_gives_the_eager_outputs():
    """Compiled, the batch runs padded as given (no host reads): real positions equal the eager ones. (In training
    with random_blocks="reference" the numpy pattern is built outside the graph: one graph break per layer.)"""
    model = tiny(XfmrBigBirdForMaskedLM, num_hidden_layers=1).eval()
    inputs = batch([80, 75], 80)
    keep = inputs["attention_mask"].bool()
    eager = model(**inputs).logits
    compiled = torch.compile(model, fullgraph=True, dynamic=False)(**inputs).logits
    assert_close(compiled[keep], eager[keep], atol=1e-5, rtol=1e-5)


def test_save_load_and_auto_classes(tmp_path):
    model = tiny(XfmrBigBirdForMaskedLM).eval()
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "xfmr-bigbird"
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrBigBirdForMaskedLM
    inputs = batch([100, 90], 100)
    assert_close(loaded(**inputs).logits, model(**inputs).logits, atol=0, rtol=0)


def test_drop_in_from_pretrained_converts_a_transformers_checkpoint(tmp_path):
    config = BigBirdConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, block_size=8, num_random_blocks=2, max_position_embeddings=256,
                           sep_token_id=3)
    ref = transformers.BigBirdForMaskedLM(config).eval()
    ref.save_pretrained(tmp_path)
    ours = XfmrBigBirdForMaskedLM.from_pretrained(tmp_path).eval()
    inputs = batch([100, 90], 100)
    inputs["input_ids"] = inputs["input_ids"] % 99
    keep = inputs["attention_mask"].bool()
    ours.config.unpad_inputs = False
    assert_close(ours(**inputs).logits[keep], ref(**inputs).logits[keep], atol=1e-5, rtol=1e-5)
