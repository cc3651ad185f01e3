"""BERT <-> transformers `Bert*`: the only place that knows transformers' BERT key layout."""

from transformers import BertConfig

from ..conversion import Conversion
from .configuration_bert import XfmrBertConfig
from .modeling_bert import (
    XfmrBertForMaskedLM,
    XfmrBertForMultipleChoice,
    XfmrBertForPreTraining,
    XfmrBertForQuestionAnswering,
    XfmrBertForSequenceClassification,
    XfmrBertForTokenClassification,
    XfmrBertModel,
)

# (ours, transformers) key prefixes inside the encoder.
ENCODER_RULES = (
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("embeddings.", "embeddings."),
    ("layers.{i}.attn.q_proj.", "encoder.layer.{i}.attention.self.query."),
    ("layers.{i}.attn.k_proj.", "encoder.layer.{i}.attention.self.key."),
    ("layers.{i}.attn.v_proj.", "encoder.layer.{i}.attention.self.value."),
    ("layers.{i}.attn.o_proj.", "encoder.layer.{i}.attention.output.dense."),
    ("layers.{i}.attn_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("layers.{i}.mlp.up_proj.", "encoder.layer.{i}.intermediate.dense."),
    ("layers.{i}.mlp.down_proj.", "encoder.layer.{i}.output.dense."),
    ("layers.{i}.mlp_norm.", "encoder.layer.{i}.output.LayerNorm."),
    ("pooler.dense.", "pooler.dense."),
)

HEAD_RULES = (
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("nsp_head.", "cls.seq_relationship."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("hf_xfmr's BERT is an encoder: decoder / cross-attention BERT checkpoints are not supported.")
    position_type = getattr(config, "position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"position_embedding_type={position_type!r} is not supported; only 'absolute'.")


def pooler_kwargs(base_model) -> dict:
    """Both sides' base models have a `pooler` attribute that is None when built without one."""
    return {"add_pooling_layer": base_model.pooler is not None}


CONVERSION = Conversion(
    hf_model_type="bert",
    hf_config_class=BertConfig,
    config_class=XfmrBertConfig,
    tasks={
        "base": ("BertModel", XfmrBertModel),
        "pretraining": ("BertForPreTraining", XfmrBertForPreTraining),
        "masked-lm": ("BertForMaskedLM", XfmrBertForMaskedLM),
        "sequence-classification": ("BertForSequenceClassification", XfmrBertForSequenceClassification),
        "token-classification": ("BertForTokenClassification", XfmrBertForTokenClassification),
        "question-answering": ("BertForQuestionAnswering", XfmrBertForQuestionAnswering),
        "multiple-choice": ("BertForMultipleChoice", XfmrBertForMultipleChoice),
    },
    hf_base_prefix="bert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    aliases={"cls.predictions.bias": "cls.predictions.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_kwargs,
)
