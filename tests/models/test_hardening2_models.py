"""Hardening 2, the model and config points, held on all nine architectures:

- 11: input checks. A 2-D attention mask holds 0/1 (bool, integer or float); other values are a ValueError
  naming the field and the value. Ids must be torch.long / torch.int32 tensors: uint8, bool or float ids,
  numpy arrays and lists are a TypeError saying what to do.
- 12: a misspelt config field is a TypeError naming the closest fields, in `from_preset` and in the
  constructor; transformers' own keywords stay accepted, and every saved config loads back.
- 13: the special-token ids of every preset follow an overridden `vocab_size`.
(Point 7, the Seq2Seq* outputs of T5 and BART, is checked against transformers in test_t5_parity.py and
test_bart_parity.py.)
"""

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig

from hf_xfmr.models import get_architecture

ARCHS = ["albert", "bart", "bert", "bigbird", "distilbert", "gpt", "modernbert", "roberta", "t5", "xlnet"]
SEQ2SEQ = ("t5", "bart")
SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id", "mask_token_id",
               "decoder_start_token_id", "forced_eos_token_id")


def config_class(arch):
    return get_architecture(arch).config_class


def classifier(arch):
    torch.manual_seed(0)
    config = config_class(arch).from_preset("tiny", num_labels=3)
    return get_architecture(arch).model_class("sequence-classification")(config).eval()


def ids_and_mask(model):
    """(2, 8) ids (each row ending in <eos>, which T5's and BART's classifiers read) and a padded 0/1 mask."""
    ids = torch.randint(5, 90, (2, 8), generator=torch.Generator().manual_seed(0))
    if model.config.model_type in ("xfmr-t5", "xfmr-bart"):
        ids[:, -1] = model.config.eos_token_id
    mask = torch.ones_like(ids)
    mask[1, 3:5] = 0  # padding inside the row: the mask matters, the row still ends with <eos>
    return ids, mask


# -- point 11: attention masks hold 0 and 1 ---------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("bad", [2, -1, 0.5])
def test_attention_mask_values_other_than_0_and_1_are_rejected(arch, bad):
    model = classifier(arch)
    ids, mask = ids_and_mask(model)
    mask = mask.float() if isinstance(bad, float) else mask.clone()
    mask[0, 2] = bad
    with pytest.raises(ValueError, match=rf"`attention_mask` contains {bad}\. .*1 for real tokens and 0 for padding"):
        model(input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_bool_integer_and_float_masks_are_accepted_alike(arch):
    model = classifier(arch)
    ids, mask = ids_and_mask(model)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
        for variant in (mask.bool(), mask.int(), mask.float(), mask.to(torch.uint8)):
            assert_close(model(input_ids=ids, attention_mask=variant).logits, expected)


@pytest.mark.parametrize("arch", SEQ2SEQ)
def test_decoder_attention_mask_values_are_checked(arch):
    torch.manual_seed(0)
    model = get_architecture(arch).model_class("seq2seq-lm")(config_class(arch).from_preset("tiny")).eval()
    ids, mask = ids_and_mask(model)
    decoder_mask = torch.ones(2, 5, dtype=torch.long)
    decoder_mask[1, 0] = 3
    with pytest.raises(ValueError, match=r"`decoder_attention_mask` contains 3\."):
        model(input_ids=ids, attention_mask=mask, labels=ids[:, :5], decoder_attention_mask=decoder_mask)


def test_causal_lm_mask_values_are_checked():
    # GPT and BART's decoder-only model check their (cached + new tokens) mask in the decoder's own path.
    for arch in ("gpt", "bart"):
        torch.manual_seed(0)
        model = get_architecture(arch).model_class("causal-lm")(config_class(arch).from_preset("tiny")).eval()
        ids, mask = ids_and_mask(model)
        with pytest.raises(ValueError, match=r"`attention_mask` contains -1\."):
            model(input_ids=ids, attention_mask=mask.masked_fill(mask == 0, -1))  # padding marked -1


# -- point 11: ids are torch tensors of an index dtype ----------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.bool, torch.float32])
def test_ids_of_a_dtype_embeddings_do_not_take_are_rejected(arch, dtype):
    model = classifier(arch)
    ids, mask = ids_and_mask(model)
    with pytest.raises(TypeError, match=rf"`input_ids` has dtype {dtype}.*cast them with `input_ids.long\(\)`"):
        model(input_ids=ids.to(dtype), attention_mask=mask)


@pytest.mark.parametrize("arch", ARCHS)
def test_int32_ids_give_the_int64_outputs(arch):
    model = classifier(arch)
    ids, mask = ids_and_mask(model)
    with torch.no_grad():
        assert_close(model(input_ids=ids.int(), attention_mask=mask.int()).logits,
                     model(input_ids=ids, attention_mask=mask).logits, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task", ["base", "sequence-classification"])
@pytest.mark.parametrize("kind", ["numpy", "list"])
def test_ids_that_are_not_tensors_are_rejected(arch, task, kind):
    torch.manual_seed(0)
    model = get_architecture(arch).model_class(task)(config_class(arch).from_preset("tiny")).eval()
    ids, mask = ids_and_mask(model)
    convert = (lambda t: t.numpy()) if kind == "numpy" else (lambda t: t.tolist())
    inputs = dict(input_ids=convert(ids), attention_mask=mask)
    if arch == "t5" and task == "base":
        inputs["decoder_input_ids"] = ids  # XfmrT5Model needs decoder inputs; the encoder's are what is wrong
    expected = "numpy.ndarray" if kind == "numpy" else "list"
    with pytest.raises(TypeError, match=rf"`input_ids` must be a torch.Tensor, got a {expected}\. .*return_tensors"):
        model(**inputs)
    # A mask that is not a tensor is rejected the same way.
    with pytest.raises(TypeError, match=r"`attention_mask` must be a torch.Tensor"):
        model(**dict(inputs, input_ids=ids, attention_mask=convert(mask)))


def test_labels_that_are_not_tensors_are_rejected():
    for arch, task in (("bert", "token-classification"), ("gpt", "causal-lm"), ("t5", "seq2seq-lm")):
        torch.manual_seed(0)
        model = get_architecture(arch).model_class(task)(config_class(arch).from_preset("tiny"))
        ids, _ = ids_and_mask(model)
        with pytest.raises(TypeError, match=r"`labels` must be a torch.Tensor, got a numpy.ndarray"):
            model(input_ids=ids, labels=np.zeros((2, 8), dtype=np.int64))


# -- point 12: unknown config fields ------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_unknown_preset_field_is_rejected(arch):
    with pytest.raises(TypeError, match=r"has no field `hiden_size` \(did you mean `hidden_size`"):
        config_class(arch).from_preset("tiny", hiden_size=64)


@pytest.mark.parametrize("arch", ARCHS)
def test_unknown_constructor_field_is_rejected(arch):
    cls = config_class(arch)
    with pytest.raises(TypeError, match=rf"{cls.__name__} has no field `hiden_size` \(did you mean `hidden_size`"):
        cls(hiden_size=64)
    # A name resembling no field lists the fields.
    with pytest.raises(TypeError, match=rf"`frobnicate`\. {cls.__name__}'s fields: .*vocab_size"):
        cls(frobnicate=1)


@pytest.mark.parametrize("arch", ARCHS)
def test_transformers_own_keywords_stay_accepted(arch):
    config = config_class(arch).from_preset(
        "tiny", num_labels=3, output_hidden_states=True, torch_dtype="float32", architectures=["X"],
        auto_map={"AutoConfig": "configuration_x.XConfig"}, _name_or_path="somewhere", transformers_version="5.0",
        attn_implementation="eager", problem_type="single_label_classification", use_cache=False, max_length=20,
    )
    assert config.num_labels == 3 and config.output_hidden_states and config.dtype == torch.float32
    assert config.architectures == ["X"] and config.auto_map["AutoConfig"] == "configuration_x.XConfig"
    assert config._attn_implementation == "eager" and config.name_or_path == "somewhere"
    assert config_class(arch)(id2label={0: "a", 1: "b"}, dtype="bfloat16").id2label == {0: "a", 1: "b"}
    # Aliases of the transformers-wide names (`hidden_size` for GPT's `n_embd`, ...) are fields too.
    assert config_class(arch).from_preset("tiny", num_hidden_layers=1).num_hidden_layers == 1


@pytest.mark.parametrize("arch", ARCHS)
def test_every_saved_config_loads_back(arch, tmp_path):
    cls = config_class(arch)
    config = cls.from_preset("tiny", num_labels=3, id2label={0: "a", 1: "b", 2: "c"}, output_hidden_states=True)
    config.save_pretrained(tmp_path)
    for loaded in (cls.from_pretrained(tmp_path), AutoConfig.from_pretrained(tmp_path),
                   cls.from_json_file(tmp_path / "config.json")):
        assert type(loaded) is cls
        assert {k: v for k, v in loaded.to_dict().items() if k != "_name_or_path"} == \
            {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}
    # Trainer sets `use_cache` on every model's config, so checkpoints carry it; transformers drops it on load.
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "use_cache": False}))
    assert cls.from_pretrained(tmp_path).num_labels == 3
    # A key another tool wrote (or a typo in a hand-edited file) does not make the checkpoint unloadable: it is
    # kept as an attribute, as transformers does; a typo of a field is warned about, naming that field.
    (tmp_path / "config.json").write_text(json.dumps({**saved, "hiden_size": 64}))
    with pytest.warns(UserWarning, match=r"look like misspelt fields of .*`hiden_size` \(did you mean `hidden_size`"):
        loaded = AutoConfig.from_pretrained(tmp_path)
    assert loaded.hiden_size == 64 and loaded.hidden_size == config.hidden_size


# -- point 13: preset special ids follow vocab_size ------------------------------------------------------
def preset_cases():
    return [(arch, name) for arch in ARCHS for name in config_class(arch).presets]


@pytest.mark.parametrize("arch,preset", preset_cases())
def test_preset_special_ids_follow_vocab_size(arch, preset):
    cls = config_class(arch)
    fields = {f.name for f in dataclasses.fields(cls)}
    for vocab_size in (600, 120):
        config = cls.from_preset(preset, vocab_size=vocab_size)
        for name in SPECIAL_IDS:
            if name in fields and getattr(config, name) is not None:
                assert 0 <= getattr(config, name) < vocab_size, (name, getattr(config, name))


def test_presets_keep_the_published_special_ids():
    gpt = config_class("gpt")
    assert (gpt.from_preset("small").bos_token_id, gpt.from_preset("small").eos_token_id) == (50256, 50256)
    assert (gpt.from_preset("tiny").bos_token_id, gpt.from_preset("tiny", vocab_size=600).eos_token_id) == (999, 599)
    modernbert = config_class("modernbert").from_preset("base")
    assert (modernbert.cls_token_id, modernbert.sep_token_id, modernbert.pad_token_id) == (50281, 50282, 50283)
    # An id given explicitly wins over the preset's.
    assert gpt.from_preset("tiny", vocab_size=600, eos_token_id=3).eos_token_id == 3
