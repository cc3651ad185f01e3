"""ALBERT beyond parity: config errors, presets, sharing, gradient checkpointing, save/load, Auto classes,
PEFT names, and MLM + SOP pretraining end to end from the SOP pair builder."""

import json

import pydoc_data.topics
import pytest
import torch
from torch.testing import assert_close
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from hf_xfmr.data import DataCollatorForMLM, create_sop_examples, tokenize_documents, train_tokenizer
from hf_xfmr.models import get_architecture
from hf_xfmr.models.albert import (
    XfmrAlbertConfig,
    XfmrAlbertForMaskedLM,
    XfmrAlbertForPreTraining,
    XfmrAlbertForSequenceClassification,
    XfmrAlbertModel,
)

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)


@pytest.mark.parametrize("field,value,message", [
    ("num_hidden_groups", 3, r"`num_hidden_groups`=3 must divide `num_hidden_layers`=2.*Use one of \[1, 2\]"),
    ("num_hidden_groups", 0, "`num_hidden_groups` must be a positive integer, got 0"),
    ("inner_group_num", 0, "`inner_group_num` must be a positive integer, got 0"),
    ("embedding_size", -1, "`embedding_size` must be a positive integer, got -1"),
    ("hidden_size", 30, "`hidden_size`=30 must be divisible by `num_attention_heads`=4"),
    ("hidden_act", "gleu", "`hidden_act`='gleu' is not supported"),
    ("classifier_dropout_prob", 1.5, r"`classifier_dropout_prob` must be a probability in \[0, 1\)"),
    ("eos_token_id", 5000, r"`eos_token_id`=5000 must be None or an id in \[0, vocab_size=1000\)"),
])
def test_invalid_config_values_name_the_field_the_value_and_the_fix(field, value, message):
    with pytest.raises(ValueError, match=message):
        XfmrAlbertConfig.from_preset("tiny", **{field: value})


def test_presets_and_registry():
    base = XfmrAlbertConfig.from_preset("base")
    assert (base.embedding_size, base.hidden_size, base.num_hidden_layers, base.vocab_size) == (128, 768, 12, 30000)
    xxlarge = XfmrAlbertConfig.from_preset("xxlarge")
    assert (xxlarge.hidden_size, xxlarge.num_attention_heads, xxlarge.intermediate_size) == (4096, 64, 16384)
    with pytest.raises(ValueError, match="Unknown preset 'huge'; available presets: base, large, tiny, xlarge, xxlarge"):
        XfmrAlbertConfig.from_preset("huge")
    arch = get_architecture("albert")
    assert arch.model_type == "xfmr-albert" and arch.objectives == ("mlm+sop", "mlm")
    assert set(arch.classes) == {"base", "pretraining", "masked-lm", "sequence-classification",
                                 "token-classification", "question-answering", "multiple-choice"}


def test_factorised_embeddings_and_sharing_shrink_the_parameter_count():
    config = XfmrAlbertConfig.from_preset("tiny", num_hidden_layers=6, vocab_size=1000, embedding_size=16)
    model = XfmrAlbertModel(config, add_pooling_layer=False)
    layer = sum(p.numel() for p in model.layer_groups[0].layers[0].parameters())
    embeddings = sum(p.numel() for p in model.embeddings.parameters())
    assert sum(p.numel() for p in model.parameters()) == embeddings + layer  # 6 applications, 1 set of weights
    assert model.embeddings.word_embeddings.weight.shape == (1000, 16)  # V x E
    assert model.embeddings.hidden_proj.weight.shape == (32, 16)  # E -> C
    assert len(model.layer_schedule()) == 6 and len(set(map(id, model.layer_schedule()))) == 1
    grouped = XfmrAlbertModel(XfmrAlbertConfig.from_preset("tiny", num_hidden_layers=6, num_hidden_groups=3,
                                                           inner_group_num=2))
    schedule = grouped.layer_schedule()
    assert len(schedule) == 12 and len(set(map(id, schedule))) == 6
    # Layer applications 0-1 use group 0, 2-3 group 1, 4-5 group 2; each runs its two inner layers.
    assert schedule[0] is schedule[2] is grouped.layer_groups[0].layers[0]
    assert schedule[4] is grouped.layer_groups[1].layers[0] and schedule[11] is grouped.layer_groups[2].layers[1]


@pytest.mark.parametrize("groups,inner", [(1, 1), (2, 2)])
def test_gradient_checkpointing_gives_the_same_gradients(groups, inner):
    """transformers' ALBERT has no gradient checkpointing; here every (shared) layer application is checkpointed."""
    torch.manual_seed(0)
    config = XfmrAlbertConfig.from_preset("tiny", num_hidden_layers=4, num_hidden_groups=groups,
                                          inner_group_num=inner, **NO_DROPOUT)
    model = XfmrAlbertForPreTraining(config).train()
    ids = torch.randint(5, 1000, (2, 10))
    labels = torch.where(torch.rand(2, 10) < 0.5, ids, -100)
    labels[0, 0] = ids[0, 0]
    order = torch.tensor([0, 1])

    def grads():
        model.zero_grad()
        model(input_ids=ids, labels=labels, sentence_order_label=order).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.gradient_checkpointing_enable()
    layers = [m for m in model.modules() if type(m).__name__ == "XfmrAlbertLayer"]
    assert len(layers) == groups * inner and all(layer.gradient_checkpointing for layer in layers)
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys() and len(plain) == len(list(model.parameters()))
    for name in plain:
        assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5)


@pytest.fixture
def tiny_mlm():
    torch.manual_seed(0)
    return XfmrAlbertForMaskedLM(XfmrAlbertConfig.from_preset("tiny")).eval()


def test_decoder_tied_to_the_small_embeddings_and_resize_keeps_it(tiny_mlm, tmp_path):
    assert tiny_mlm.lm_head.decoder.weight is tiny_mlm.model.embeddings.word_embeddings.weight
    tiny_mlm.save_pretrained(tmp_path)
    reloaded = XfmrAlbertForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.decoder.weight is reloaded.model.embeddings.word_embeddings.weight
    tiny_mlm.resize_token_embeddings(1010)
    assert tiny_mlm.lm_head.decoder.weight.shape == (1010, 16) and tiny_mlm.lm_head.decoder.bias.shape == (1010,)
    assert tiny_mlm(input_ids=torch.tensor([[1005, 3]])).logits.shape == (1, 2, 1010)


def test_bad_inputs_raise_before_computation(tiny_mlm):
    ids = torch.randint(0, 1000, (2, 8))
    with pytest.raises(ValueError, match=r"`input_ids` contains 1000, outside the vocabulary \[0, 1000\)"):
        tiny_mlm(input_ids=torch.full((2, 8), 1000))
    with pytest.raises(ValueError, match=r"`token_type_ids` contains 2, outside the token types \[0, 2\)"):
        tiny_mlm(input_ids=ids, token_type_ids=torch.full((2, 8), 2))
    with pytest.raises(ValueError, match="Sequence length 129 exceeds the 128 positions"):
        tiny_mlm(input_ids=torch.zeros(1, 129, dtype=torch.long))
    pretraining = XfmrAlbertForPreTraining(XfmrAlbertConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="`sentence_order_label` must hold one label per sequence"):
        pretraining(input_ids=ids, sentence_order_label=torch.tensor([0, 1, 1]))


def test_save_pretrained_writes_safetensors_and_auto_classes_load_ours(tiny_mlm, tmp_path):
    tiny_mlm.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not list(tmp_path.glob("*.bin"))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "xfmr-albert"
    assert isinstance(AutoConfig.from_pretrained(tmp_path), XfmrAlbertConfig)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrAlbertForMaskedLM
    ids = torch.randint(0, 1000, (2, 8))
    assert torch.equal(loaded(input_ids=ids).logits, tiny_mlm(input_ids=ids).logits)


@pytest.mark.parametrize("auto_class,suffix", [
    (AutoModel, "Model"), (AutoModelForPreTraining, "ForPreTraining"), (AutoModelForMaskedLM, "ForMaskedLM"),
    (AutoModelForSequenceClassification, "ForSequenceClassification"),
    (AutoModelForTokenClassification, "ForTokenClassification"),
    (AutoModelForQuestionAnswering, "ForQuestionAnswering"), (AutoModelForMultipleChoice, "ForMultipleChoice"),
])
def test_every_head_is_registered_with_its_auto_class(auto_class, suffix):
    model = auto_class.from_config(XfmrAlbertConfig.from_preset("tiny"))
    assert type(model).__name__ == f"XfmrAlbert{suffix}"


def test_uniform_module_names_for_lora_and_peft():
    model = XfmrAlbertForSequenceClassification(XfmrAlbertConfig.from_preset("tiny", num_labels=3))
    assert model.classifier.out_features == 3
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "classifier"} <= names


def test_classifier_dropout_prob_is_the_head_dropout():
    model = XfmrAlbertForSequenceClassification(XfmrAlbertConfig.from_preset(
        "tiny", classifier_dropout_prob=0.3, hidden_dropout_prob=0.05))
    assert model.classifier.dropout.p == 0.3
    fallback = XfmrAlbertForSequenceClassification(XfmrAlbertConfig.from_preset(
        "tiny", classifier_dropout_prob=None, hidden_dropout_prob=0.05))
    assert fallback.classifier.dropout.p == 0.05
    assert XfmrAlbertForPreTraining(XfmrAlbertConfig.from_preset("tiny", classifier_dropout_prob=0.3)).sop_head.dropout.p == 0.3


# -- MLM + SOP pretraining end to end -------------------------------------------------------------
def _documents():
    """A small offline corpus: the first 30 language-reference topics shipped with CPython."""
    topics = pydoc_data.topics.topics
    return [[p for p in topics[name].split("\n\n") if p.strip()] for name in sorted(topics)[:30]]



def test_mlm_plus_sop_pretraining_from_sop_pairs_lowers_the_loss(one_thread):
    documents = _documents()
    tokenizer = train_tokenizer("bert", documents, vocab_size=300)  # any tokenizer with [CLS]/[SEP]/[MASK]/pad
    examples = create_sop_examples(tokenize_documents(tokenizer, documents), tokenizer, max_seq_length=48, seed=0)
    labels = {e["sentence_order_label"] for e in examples}
    assert labels == {0, 1} and len(examples) >= 64
    collator = DataCollatorForMLM(tokenizer, max_ngram=3, seed=0)  # ALBERT's n-gram masking
    batches = [collator(examples[i:i + 16]) for i in range(0, 64, 16)]
    assert set(batches[0]) == {"input_ids", "attention_mask", "labels", "token_type_ids", "sentence_order_label"}
    assert batches[0]["token_type_ids"].max() == 1

    torch.manual_seed(0)
    config = XfmrAlbertConfig.from_preset("tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                          bos_token_id=None, eos_token_id=None, sparse_prediction=True)
    model = XfmrAlbertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    losses = []
    for step in range(24):
        out = model(**batches[step % len(batches)])
        assert out.sop_logits.shape == (16, 2)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.loss.item())
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert all(map(lambda x: x == x, losses))  # no NaN
    assert last < first - 0.5, losses
