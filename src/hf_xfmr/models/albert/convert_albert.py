"""ALBERT <-> transformers `Albert*`: the only place that knows transformers' ALBERT key layout."""

from transformers import AlbertConfig

from ..conversion import Conversion
from .configuration_albert import XfmrAlbertConfig
from .modeling_albert import (
    XfmrAlbertForMaskedLM,
    XfmrAlbertForMultipleChoice,
    XfmrAlbertForPreTraining,
    XfmrAlbertForQuestionAnswering,
    XfmrAlbertForSequenceClassification,
    XfmrAlbertForTokenClassification,
    XfmrAlbertModel,
)

# (ours, transformers) key prefixes inside the encoder; {i} is the group, {j} the layer inside it.
_LAYER = "layer_groups.{i}.layers.{j}."
_HF_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.{j}."
ENCODER_RULES = (
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("embeddings.hidden_proj.", "encoder.embedding_hidden_mapping_in."),
    ("embeddings.", "embeddings."),
    (_LAYER + "attn.q_proj.", _HF_LAYER + "attention.query."),
    (_LAYER + "attn.k_proj.", _HF_LAYER + "attention.key."),
    (_LAYER + "attn.v_proj.", _HF_LAYER + "attention.value."),
    (_LAYER + "attn.o_proj.", _HF_LAYER + "attention.dense."),
    (_LAYER + "attn_norm.", _HF_LAYER + "attention.LayerNorm."),
    (_LAYER + "mlp.up_proj.", _HF_LAYER + "ffn."),
    (_LAYER + "mlp.down_proj.", _HF_LAYER + "ffn_output."),
    (_LAYER + "mlp_norm.", _HF_LAYER + "full_layer_layer_norm."),
    ("pooler.dense.", "pooler."),
)

HEAD_RULES = (
    ("lm_head.dense.", "predictions.dense."),
    ("lm_head.norm.", "predictions.LayerNorm."),
    ("lm_head.decoder.", "predictions.decoder."),
    ("sop_head.", "sop_classifier.classifier."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    if layers % groups != 0:
        raise ValueError(
            f"This ALBERT checkpoint has num_hidden_groups={groups}, which does not divide "
            f"num_hidden_layers={layers}; hf_xfmr's ALBERT needs groups of equal size."
        )


def pooler_kwargs(base_model) -> dict:
    """Both sides' base models have a `pooler` attribute that is None when built without one."""
    return {"add_pooling_layer": base_model.pooler is not None}


CONVERSION = Conversion(
    hf_model_type="albert",
    hf_config_class=AlbertConfig,
    config_class=XfmrAlbertConfig,
    tasks={
        "base": ("AlbertModel", XfmrAlbertModel),
        "pretraining": ("AlbertForPreTraining", XfmrAlbertForPreTraining),
        "masked-lm": ("AlbertForMaskedLM", XfmrAlbertForMaskedLM),
        "sequence-classification": ("AlbertForSequenceClassification", XfmrAlbertForSequenceClassification),
        "token-classification": ("AlbertForTokenClassification", XfmrAlbertForTokenClassification),
        "question-answering": ("AlbertForQuestionAnswering", XfmrAlbertForQuestionAnswering),
        "multiple-choice": ("AlbertForMultipleChoice", XfmrAlbertForMultipleChoice),
    },
    hf_base_prefix="albert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    # transformers keeps the MLM output bias twice: `predictions.bias` is `predictions.decoder.bias`.
    aliases={"predictions.bias": "predictions.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_kwargs,
)
