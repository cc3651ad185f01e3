"""ModernBERT beyond parity: config validation, presets, bad input, unpadded == padded, packed == one by one,
checkpointing, save/load and the Auto classes."""

import pytest
import torch
from torch.testing import assert_close
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from hf_xfmr.data import collate_packed, pack_documents
from hf_xfmr.models.modernbert import (
    XfmrModernBertConfig,
    XfmrModernBertForMaskedLM,
    XfmrModernBertModel,
)

ATOL = 1e-5


def tiny(**overrides):
    return XfmrModernBertConfig.from_preset("tiny", **overrides)


@pytest.mark.parametrize("field,value,message", [
    ("local_attention", 7, "`local_attention` is the total width .* must be an even integer >= 2, got 7"),
    ("local_attention", 1024, "`local_attention`=1024 is larger than `max_position_embeddings`=512"),
    ("global_attn_every_n_layers", 0, "`global_attn_every_n_layers` must be an integer >= 1"),
    ("hidden_size", 62, "`hidden_size`=62 must be divisible by `num_attention_heads`=4"),
    ("num_attention_heads", 64, "head size hidden_size / num_attention_heads = 1 must be even"),
    ("hidden_activation", "geglu", "`hidden_activation`='geglu' is not supported"),
    ("classifier_pooling", "max", "`classifier_pooling`='max' is not supported"),
    ("mlp_dropout", 1.0, "`mlp_dropout` must be a probability"),
    ("global_rope_theta", 0, "`global_rope_theta` must be a positive number"),
    ("pad_token_id", 5000, "`pad_token_id`=5000 must be None or an id"),
])
def test_invalid_config_values_name_the_field_the_value_and_the_fix(field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny(**{field: value})


def test_presets_match_the_published_sizes():
    base, large = XfmrModernBertConfig.from_preset("base"), XfmrModernBertConfig.from_preset("large")
    assert (base.num_hidden_layers, base.hidden_size, base.vocab_size) == (22, 768, 50368)
    assert (large.num_hidden_layers, large.hidden_size, large.vocab_size) == (28, 1024, 50368)
    for config in (base, large):
        assert (config.local_attention, config.global_attn_every_n_layers) == (128, 3)
        assert (config.global_rope_theta, config.local_rope_theta) == (160000.0, 10000.0)
    assert [tiny().is_global_layer(i) for i in range(3)] == [True, False, False]
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        XfmrModernBertConfig.from_preset("huge")


@pytest.fixture
def model():
    torch.manual_seed(0)
    return XfmrModernBertModel(tiny()).eval()


def batch(lengths, seq_len=None, seed=0, vocab=1000):
    seq_len = seq_len or max(lengths)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (len(lengths), seq_len), generator=g)
    mask = (torch.arange(seq_len)[None] < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_unpadded_equals_padded_in_outputs_and_gradients(attn):
    torch.manual_seed(0)
    config = tiny(attention_dropout=0.0, chunked_lm_loss=False)  # logits in training too
    model = XfmrModernBertForMaskedLM(config).train()
    model.config._attn_implementation = attn
    ids, mask = batch([45, 17, 3, 64], seq_len=64)
    labels = torch.where(mask.bool(), ids, -100)
    unpadded = model(input_ids=ids, attention_mask=mask, labels=labels, output_hidden_states=True)
    unpadded.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.model.use_unpadding = False
    padded = model(input_ids=ids, attention_mask=mask, labels=labels, output_hidden_states=True)
    padded.loss.backward()
    keep = mask.bool()
    assert_close(unpadded.logits[keep], padded.logits[keep], atol=ATOL, rtol=0)
    assert_close(unpadded.loss, padded.loss, atol=ATOL, rtol=0)
    for a, b in zip(unpadded.hidden_states, padded.hidden_states, strict=True):
        assert_close(a, b, atol=ATOL, rtol=0)
    for name, p in model.named_parameters():
        assert_close(grads[name], p.grad, atol=ATOL, rtol=0, msg=lambda m: f"grad {name}: {m}")


def test_padding_content_and_amount_do_not_change_real_outputs(model):
    ids, mask = batch([30, 11], seq_len=30)
    a = model(input_ids=ids, attention_mask=mask).last_hidden_state
    noisy = torch.where(mask.bool(), ids, torch.randint(3, 999, ids.shape))
    b = model(input_ids=noisy, attention_mask=mask).last_hidden_state
    assert_close(a, b, atol=0, rtol=0)
    alone = model(input_ids=ids[1:, :11]).last_hidden_state  # the short row on its own, no padding
    assert_close(a[1, :11], alone[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_packed_rows_equal_documents_one_by_one(attn):
    """Rows from the best-fit packer (several documents per row, cu_seqlens from collate_packed) give each
    document exactly its own outputs, with and without unpadding; no leakage between documents."""
    torch.manual_seed(0)
    model = XfmrModernBertModel(tiny()).eval()
    model.config._attn_implementation = attn
    g = torch.Generator().manual_seed(1)
    lengths = [37, 5, 20, 9, 50, 13, 1, 28]
    docs = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in lengths]
    rows = pack_documents(docs, max_len=64)
    assert any(len(row["doc_index"]) > 1 for row in rows)
    packed = collate_packed(rows, pad_token_id=0)
    inputs = {k: packed[k] for k in ("input_ids", "attention_mask", "position_ids", "cu_seqlens", "max_seqlen")}
    outputs = {}
    for unpad in (True, False):
        model.use_unpadding = unpad
        outputs[unpad] = model(**inputs).last_hidden_state  # (B, T, C)
        without_positions = model(**{k: v for k, v in inputs.items() if k != "position_ids"}).last_hidden_state
        assert_close(without_positions, outputs[unpad], atol=0, rtol=0)  # positions restart per document
    assert_close(outputs[True], outputs[False], atol=ATOL, rtol=0)
    model.use_unpadding = True
    for r, row in enumerate(rows):
        start = 0
        for doc_index, n in zip(row["doc_index"], row["seq_lens"]):
            alone = model(input_ids=torch.tensor([docs[doc_index]])).last_hidden_state[0]  # (n, C)
            assert_close(outputs[True][r, start:start + n], alone, atol=ATOL, rtol=0)
            start += n


def test_bad_inputs_raise_clear_errors(model):
    ids, mask = batch([10, 6])
    empty = mask.clone()
    empty[1] = 0
    with pytest.raises(ValueError, match="attention_mask row 1 has no real token"):
        model(input_ids=ids, attention_mask=empty)
    with pytest.raises(ValueError, match="cu_seqlens .* does not match the batch.*number of real tokens, 16"):
        model(input_ids=ids, attention_mask=mask, cu_seqlens=torch.tensor([0, 4, 15], dtype=torch.int32))
    with pytest.raises(ValueError, match="does not match the batch"):
        model(input_ids=ids, attention_mask=mask, cu_seqlens=torch.tensor([0, 9, 4, 16], dtype=torch.int32))
    with pytest.raises(ValueError, match="across a row boundary"):
        model(input_ids=ids, attention_mask=mask, cu_seqlens=torch.tensor([0, 8, 16], dtype=torch.int32))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        model(input_ids=ids, attention_mask=mask, cu_seqlens=torch.tensor([0.0, 10.0, 16.0]))
    with pytest.raises(ValueError, match="`position_ids` contains 512, outside the position table"):
        model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(503, 513).expand(2, 10))
    with pytest.raises(ValueError, match="Sequence length 600 exceeds the 512 positions"):
        model(input_ids=torch.randint(3, 999, (1, 600)))
    with pytest.raises(ValueError, match="`input_ids` contains 1000, outside the vocabulary"):
        model(input_ids=torch.full((1, 4), 1000))
    with pytest.raises(ValueError, match="does not take `token_type_ids`"):
        XfmrModernBertForMaskedLM(tiny())(input_ids=ids, token_type_ids=torch.zeros_like(ids))


def test_local_layers_see_only_their_window(model):
    """Changing a token far outside the window of a local-only model leaves the outputs near the start unchanged."""
    torch.manual_seed(0)
    local_only = XfmrModernBertModel(tiny(global_attn_every_n_layers=10)).eval()  # layer 0 global, 1-2 local
    local_only.layers = local_only.layers[1:]  # keep only the two local layers: reach 8 tokens each
    ids, _ = batch([60])
    changed = ids.clone()
    changed[0, 40] = 7
    a, b = local_only(input_ids=ids).last_hidden_state, local_only(input_ids=changed).last_hidden_state
    assert_close(a[0, :24], b[0, :24], atol=0, rtol=0)  # 2 layers x 8 tokens of reach: position 40 -> >= 24
    assert not torch.allclose(a[0, 24:41], b[0, 24:41])


def test_inputs_embeds_equal_input_ids(model):
    ids, mask = batch([12, 7])
    embeds = model.get_input_embeddings()(ids)
    assert_close(model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state,
                 model(input_ids=ids, attention_mask=mask).last_hidden_state, atol=1e-6, rtol=0)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = XfmrModernBertForMaskedLM(tiny()).train()
    ids, mask = batch([20, 9])
    labels = torch.where(mask.bool(), ids, -100)
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=0)


def test_save_pretrained_and_auto_classes_load_ours(tmp_path):
    torch.manual_seed(0)
    model = XfmrModernBertForMaskedLM(tiny()).eval()
    assert model.lm_head.decoder.weight is model.model.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert AutoConfig.from_pretrained(tmp_path).model_type == "xfmr-modernbert"
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrModernBertForMaskedLM
    ids, mask = batch([12, 7])
    assert_close(loaded(input_ids=ids, attention_mask=mask).logits, model(input_ids=ids, attention_mask=mask).logits,
                 atol=0, rtol=0)


@pytest.mark.parametrize("auto_class,suffix", [
    (AutoModel, "Model"), (AutoModelForMaskedLM, "ForMaskedLM"),
    (AutoModelForSequenceClassification, "ForSequenceClassification"),
    (AutoModelForTokenClassification, "ForTokenClassification"),
    (AutoModelForQuestionAnswering, "ForQuestionAnswering"), (AutoModelForMultipleChoice, "ForMultipleChoice"),
])
def test_every_head_is_registered_with_its_auto_class(auto_class, suffix):
    model = auto_class.from_config(tiny())
    assert type(model).__name__ == "XfmrModernBert" + suffix


def test_sparse_prediction_in_training_only():
    torch.manual_seed(0)
    model = XfmrModernBertForMaskedLM(tiny(sparse_prediction=True, chunked_lm_loss=False)).train()
    ids, mask = batch([20, 9])
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 5] = ids[0, 3], ids[1, 5]
    sparse = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert sparse.logits.shape == (2, 1000)
    model.eval()
    dense = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert dense.logits.shape == (2, 20, 1000)
    assert_close(sparse.loss, dense.loss, atol=1e-6, rtol=0)
