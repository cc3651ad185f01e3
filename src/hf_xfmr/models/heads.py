"""Task heads shared by every architecture.

A head differs between architectures only in which vector it reads (pooling) and in the small
module it applies to it (the `classifier`); the encoder call, the reshaping for multiple choice, the
losses, the label checks and the output classes are the same everywhere, so they live here once.

An architecture builds its heads by combining a head mixin (first base) with its own
`PreTrainedModel` base and stating three things:

    class XfmrBertForSequenceClassification(SequenceClassificationHead, XfmrBertPreTrainedModel):
        base_model_class = XfmrBertModel               # the backbone, stored as `self.model`
        base_model_kwargs = {"add_pooling_layer": True}
        pooling = "pooler"                             # which vector: see POOLINGS

and, when its classifier is more than dropout + linear, a `build_classifier(config, num_outputs)`.

Every head's `forward` takes the common encoder inputs by name (so Trainer keeps those dataset
columns) and passes any other keyword (XLNet's `mems`, a decoder's inputs, ...) on to the backbone.

Shapes: B batch, T sequence length, C hidden size, K choices, V vocabulary, N labelled positions.
"""

import inspect

import torch
from torch import nn
from transformers.modeling_outputs import (
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from ..layers.dropout import Dropout
from ..layers.masks import ready_mask, visible_keys
from ..layers.padding import labels_read_padding, padded_layout
from .input_checks import check_condition, check_labels_shape, check_tensor
from .losses import IGNORE_INDEX, sequence_classification_loss, span_loss, token_loss
from .packing import PACKED_INPUTS


# -- pooling: (B, T, C) hidden states -> (B, C) ------------------------------------------------------
def pool_first(hidden_states, **_):
    """The first token ([CLS] / <s>)."""
    return hidden_states[:, 0]  # (B, C)


def pool_mean(hidden_states, attention_mask=None, **_):
    """Mean over real tokens (all tokens without a mask; with a ready-made 4-D mask, the tokens some query
    may see)."""
    if attention_mask is None:
        return hidden_states.mean(dim=1)
    if attention_mask.dim() == 4:
        attention_mask = visible_keys(ready_mask(attention_mask))[:, 0, 0]  # (B, T)
    weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, C)


def pool_last(hidden_states, **_):
    """The last position (XLNet reads its summary there: inputs end with <sep> <cls>)."""
    return hidden_states[:, -1]  # (B, C)


def last_real_token_index(input_ids=None, attention_mask=None, pad_token_id=None, seq_len=None):
    """(B,) index of each row's last real token: from the mask, else from the pad id, else T - 1.

    Works for right and left padding: it is the largest index whose token is real. A 4-D mask (packed
    documents) says nothing about padding by itself: the pad id decides then.
    """
    if attention_mask is not None and attention_mask.dim() == 2:
        real = attention_mask.bool()
    elif input_ids is not None and pad_token_id is not None:
        real = input_ids != pad_token_id
    else:
        return None
    positions = torch.arange(real.shape[1], device=real.device)  # (T,)
    return (positions * real).amax(dim=1)  # (B,)


def pool_last_real(hidden_states, input_ids=None, attention_mask=None, pad_token_id=None, **_):
    """The last non-padding token (decoders such as GPT read the sequence there)."""
    index = last_real_token_index(input_ids, attention_mask, pad_token_id)
    if index is None:
        return hidden_states[:, -1]
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), index]  # (B, C)


def pool_eos(hidden_states, input_ids=None, eos_token_id=None, **_):
    """The last <eos> token of each row (BART / T5 sequence classification)."""
    if input_ids is None or eos_token_id is None:
        raise ValueError("EOS pooling needs `input_ids` and `config.eos_token_id`.")
    is_eos = input_ids == eos_token_id  # (B, T)
    check_condition(is_eos.any(dim=1), f"Every row must contain the <eos> token (id {eos_token_id}) for sequence "
                                       f"classification; tokenize with the model's tokenizer (it appends </s>).")
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    index = (positions * is_eos).amax(dim=1)  # (B,)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), index]


POOLINGS = {"first": pool_first, "mean": pool_mean, "last": pool_last, "last_real": pool_last_real,
            "eos": pool_eos}


class DropoutLinear(nn.Linear):
    """Dropout, then a linear layer. A `nn.Linear` subclass, so its parameters stay `weight`/`bias`
    (transformers' `classifier.weight`) and PEFT treats it as a linear layer."""

    def __init__(self, in_features: int, out_features: int, dropout: float = 0.0, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x):
        return super().forward(self.dropout(x))


# -- the shared machinery ---------------------------------------------------------------------------
class TaskHead:
    """Mixin that owns the backbone (`self.model`) and runs it. Place it first among the bases."""

    base_model_class: type  # set by the architecture
    base_model_kwargs: dict = {}
    pooling: str = "first"  # a key of POOLINGS, or "pooler" for the backbone's `pooler_output`
    accepts_loss_kwargs = False  # Trainer: our losses average over the batch themselves

    def __init__(self, config):
        super().__init__(config)
        self.model = self.base_model_class(config, **self.base_model_kwargs)

    # Hooks an architecture may override --------------------------------------------------------
    def classifier_dropout_prob(self) -> float:
        """Dropout before the classifier: `classifier_dropout` (ALBERT: `classifier_dropout_prob`) when
        set, else the hidden dropout."""
        config = self.config
        p = getattr(config, "classifier_dropout", None)
        if p is None:
            p = getattr(config, "classifier_dropout_prob", None)
        if p is None:
            for name in ("hidden_dropout_prob", "dropout", "hidden_dropout", "summary_last_dropout"):
                if getattr(config, name, None) is not None:
                    return getattr(config, name)
            return 0.0
        return p

    def build_classifier(self, config, num_outputs: int) -> nn.Module:
        """The module applied to the pooled vector (or each token): dropout + linear by default."""
        return DropoutLinear(config.hidden_size, num_outputs, self.classifier_dropout_prob())

    def pool(self, output, input_ids=None, attention_mask=None):
        """(B, C) sequence representation from the backbone output."""
        if self.pooling == "pooler":
            return output.pooler_output
        return POOLINGS[self.pooling](
            output.last_hidden_state, input_ids=input_ids, attention_mask=attention_mask,
            pad_token_id=getattr(self.config, "pad_token_id", None),
            eos_token_id=getattr(self.config, "eos_token_id", None),
        )

    # Shared steps -------------------------------------------------------------------------------
    def encode(self, token_labels=None, **inputs):
        """Run the backbone on the given inputs (None entries dropped) and return its output object.

        `token_labels` (B, T), the labels of a per-token loss: where they put a target on a padding position
        the backbone runs the padded layout, so the loss reads the reference's values there (unpadding
        would leave zeros)."""
        padded = labels_read_padding(token_labels, inputs.get("attention_mask"))
        inputs = {name: value for name, value in inputs.items() if value is not None}
        accepted = _forward_parameters(type(self.model))
        unknown = [name for name in inputs if name not in accepted and "**" not in accepted]
        if unknown:
            raise ValueError(
                f"{type(self.model).__name__} does not take {', '.join(f'`{n}`' for n in unknown)}; "
                f"drop them from the inputs (it accepts: {', '.join(sorted(accepted - {'return_dict'}))})."
            )
        if padded:  # (never under torch.compile: labels_read_padding is False there)
            with padded_layout():
                return self.model(**inputs, return_dict=True)
        return self.model(**inputs, return_dict=True)

    def task_output(self, output_class, backbone_output, **results):
        """The head's output object: `results` (loss, logits, ...) and the backbone's hidden states and
        attentions. An encoder-decoder head returns transformers' Seq2Seq* class instead (models/seq2seq.py)."""
        return output_class(**results, hidden_states=backbone_output.hidden_states,
                            attentions=backbone_output.attentions)

    def finish(self, output, return_dict):
        """The output object, or its tuple form when `return_dict` (or the config's default) says so."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


_PARAMETERS = {}


def _forward_parameters(model_class) -> frozenset:
    """Names `model_class.forward` accepts: its named parameters and, when it takes `**packed`, the keywords of
    packed sequences (`models.packing.PACKED_INPUTS`); "**" when it takes any other keyword."""
    if model_class not in _PARAMETERS:
        params = inspect.signature(model_class.forward).parameters.values()
        names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        var_keywords = [p.name for p in params if p.kind == p.VAR_KEYWORD]
        if var_keywords == ["packed"]:  # `**packed`: the packed-sequence keywords only
            names.update(PACKED_INPUTS)
        elif var_keywords:
            names.add("**")
        _PARAMETERS[model_class] = frozenset(names - {"self"})
    return _PARAMETERS[model_class]


def input_shape(input_ids, inputs_embeds):
    """(B, T) of the inputs (token ids or embeddings), None without either; rejects non-tensors."""
    check_tensor("input_ids", input_ids)  # the heads' first look at the inputs: tensors only
    check_tensor("inputs_embeds", inputs_embeds)
    source = input_ids if input_ids is not None else inputs_embeds
    return None if source is None else tuple(source.shape[:2])


def masked_lm_logits_and_loss(lm_head, hidden_states, labels, sparse: bool, num_items_in_batch=None):
    """Run an MLM head; with `sparse` and labels, only on labelled positions (logits then (N, V))."""
    if labels is not None and sparse:
        labels = labels.reshape(-1)
        keep = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # (N,)
        hidden_states = hidden_states.reshape(-1, hidden_states.shape[-1]).index_select(0, keep)  # (N, C)
        labels = labels.index_select(0, keep)
    logits = lm_head(hidden_states)
    loss = token_loss(logits, labels, num_items_in_batch) if labels is not None else None
    return logits, loss


class TiedDecoderHead:
    """Mixin of a head whose vocabulary projection is `self.lm_head.decoder` (tied to the input embeddings):
    the output-embedding accessors transformers uses to tie and resize it."""

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings


class MaskedLMHead(TiedDecoderHead, TaskHead):
    """MLM: `lm_head` (ending in the vocabulary projection `lm_head.decoder`) on every position.

    With `config.sparse_prediction`, labels given and the model in training mode, only the labelled
    positions are projected onto the vocabulary: the loss is the same number and `logits` is then
    (N, V). In eval mode the full (B, T, V) logits come back, so `Trainer.evaluate` / `predict` and
    `compute_metrics` work exactly as with a dense model.
    """

    accepts_loss_kwargs = True  # `num_items_in_batch` is honoured (Trainer's gradient accumulation)
    lm_head_class: type  # set by the architecture: built as lm_head_class(config)

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = self.lm_head_class(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, num_items_in_batch=None, **kwargs):
        """`labels` (B, T): target ids at masked positions, -100 elsewhere."""
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds, token_labels=labels,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        sparse = bool(getattr(self.config, "sparse_prediction", False)) and self.training
        logits, loss = masked_lm_logits_and_loss(self.lm_head, out.last_hidden_state, labels, sparse,
                                                 num_items_in_batch)
        return self.finish(MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                          attentions=out.attentions), return_dict)


class ClassifierHead(TaskHead):
    """Base of the heads with one `classifier` (`build_classifier(config, classifier_outputs(config))`)."""

    def classifier_outputs(self, config) -> int:
        return config.num_labels

    def __init__(self, config):
        super().__init__(config)
        self.classifier = self.build_classifier(config, self.classifier_outputs(config))
        self.post_init()


class SequenceClassificationHead(ClassifierHead):
    """Pooled vector -> `classifier` -> (B, num_labels). Regression when `num_labels == 1`."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """`labels` (B,): class ids, or floats for regression; (B, num_labels) multi-hot for multi-label."""
        shape = input_shape(input_ids, inputs_embeds)
        if labels is not None and shape is not None and labels.shape[0] != shape[0]:
            raise ValueError(
                f"`labels` has {labels.shape[0]} rows but the batch has {shape[0]}; pass one label per sequence."
            )
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.classifier(self.pool(out, input_ids, attention_mask))  # (B, num_labels)
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        return self.finish(self.task_output(SequenceClassifierOutput, out, loss=loss, logits=logits), return_dict)


class TokenClassificationHead(ClassifierHead):
    """`classifier` on every token -> (B, T, num_labels).

    After unpadding (`config.unpad_inputs`) the hidden states at padding positions are zeros, so the logits
    there are the classifier's output for a zero vector; label padding -100 (as transformers' collators
    do) and the loss is the reference's."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """`labels` (B, T): a class per token, -100 for tokens to ignore (padding, sub-words)."""
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds, token_labels=labels,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.classifier(out.last_hidden_state)  # (B, T, num_labels)
        loss = token_loss(logits, labels) if labels is not None else None
        return self.finish(TokenClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                                 attentions=out.attentions), return_dict)


class LastTokenClassificationHead(SequenceClassificationHead):
    """A decoder's sequence classifier (GPT, Llama, Mixtral): the last real token's hidden state -> a bias-free
    linear `classifier` without dropout (transformers' `score`)."""

    pooling = "last_real"

    def build_classifier(self, config, num_outputs):
        return DropoutLinear(config.hidden_size, num_outputs, 0.0, bias=False)


class DecoderTokenClassificationHead(TokenClassificationHead):
    """A decoder's token classifier: dropout `classifier_dropout`, else 0.1 (transformers' decoders)."""

    def classifier_dropout_prob(self) -> float:
        p = self.config.classifier_dropout
        return 0.1 if p is None else p


class QuestionAnsweringHead(TaskHead):
    """Extractive QA: `qa_outputs` scores each token as the answer's start and end."""

    def __init__(self, config):
        super().__init__(config)
        self.qa_outputs = self.build_qa_outputs(config)
        self.post_init()

    # True: padding positions get the lowest start/end logits (the dtype's minimum), so no answer span starts
    # or ends there and the span loss softmaxes over real tokens only (the reference's also covers padding).
    # For backbones whose outputs at padding positions are zeros after unpadding, not the reference's values.
    # None follows `config.unpad_inputs` (the BERT family: masked by default; unpad_inputs=False gives the
    # reference's exact logits and loss); ModernBERT always masks; heads without the field never do.
    mask_padding: bool | None = None

    def masks_padding(self) -> bool:
        if self.mask_padding is not None:
            return self.mask_padding
        return bool(getattr(self.config, "unpad_inputs", False))

    def build_qa_outputs(self, config) -> nn.Module:
        """The (start, end) scorer applied to every token: a linear layer by default (DistilBERT adds
        dropout before it)."""
        return nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, start_positions=None, end_positions=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        """`start_positions` / `end_positions` (B,): token indices of the answer span."""
        shape = input_shape(input_ids, inputs_embeds)
        for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
            if positions is not None and shape is not None and positions.reshape(-1).shape[0] != shape[0]:
                raise ValueError(f"`{name}` must hold one index per sequence ({shape[0]}), "
                                 f"got shape {tuple(positions.shape)}.")
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.qa_outputs(out.last_hidden_state)  # (B, T, 2)
        if attention_mask is not None and attention_mask.dim() == 2 and self.masks_padding():
            logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))  # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return self.finish(self.task_output(QuestionAnsweringModelOutput, out, loss=loss, start_logits=start_logits,
                                            end_logits=end_logits), return_dict)


class MultipleChoiceHead(ClassifierHead):
    """Each (context, choice) pair is encoded separately; pooled vector -> one score per choice."""

    def classifier_outputs(self, config) -> int:
        return 1  # one score per choice

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """Inputs are (B, K, T) (`inputs_embeds` (B, K, T, C)); `labels` (B,) index the right choice."""
        source = input_ids if input_ids is not None else inputs_embeds
        check_tensor("input_ids" if input_ids is not None else "inputs_embeds", source)
        if source is None or source.dim() < 3:
            raise ValueError("Multiple choice inputs must have shape (batch, num_choices, seq_len).")
        batch, num_choices = source.shape[:2]
        if labels is not None and labels.reshape(-1).shape[0] != batch:
            raise ValueError(f"`labels` must hold one choice index per example ({batch}), "
                             f"got shape {tuple(labels.shape)}.")

        def flat(x):  # (B, K, ...) -> (B*K, ...); explicit sizes, so an empty (B, K, 0) batch stays well-formed
            return None if x is None else x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])

        input_ids, attention_mask = flat(input_ids), flat(attention_mask)
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=flat(token_type_ids),
                          position_ids=flat(position_ids), inputs_embeds=flat(inputs_embeds),
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.classifier(self.pool(out, input_ids, attention_mask)).view(batch, num_choices)  # (B, K)
        loss = token_loss(logits, labels) if labels is not None else None
        return self.finish(MultipleChoiceModelOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                                     attentions=out.attentions), return_dict)
