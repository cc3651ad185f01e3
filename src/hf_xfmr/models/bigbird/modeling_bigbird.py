"""BigBird: a BERT-style encoder with block-sparse attention, for long documents.

Paper: Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences", https://arxiv.org/abs/2007.14062.
Parity reference: transformers' `BigBirdModel` and heads, through `convert_bigbird.py`.

What differs from BERT:
- attention (`config.attention_type`): "block_sparse" is the paper's ITC layout (`layers.block_sparse`): blocks
  of `block_size` tokens, each attending to its 3 window blocks, the first and last blocks (global) and
  `num_random_blocks` random blocks; "original_full" is BERT's. Inputs of at most
  (5 + 2 * num_random_blocks) * block_size tokens run full attention in either mode, as the reference does;
- embeddings: dropout before the LayerNorm (the reference's order), token embeddings optionally scaled by
  sqrt(C) (`rescale_embeddings`); query/key/value biases optional (`use_bias`);
- heads: sequence classification reads the first token through dense -> `hidden_act` -> linear; question
  answering runs a feed-forward block (dense -> act -> dense -> LayerNorm with a residual) before its
  start/end scores and pushes the question's tokens (up to the first [SEP], or `question_lengths`) out of the
  competition (-1e6), and without `token_type_ids` gives the question type 0 and the rest type 1.

Block layout, lengths and padding (block-sparse mode):
- a length that is not a multiple of `block_size` is padded inside the model (padding tokens, masked) and the
  outputs are cut back, so any length works;
- unpadding (`config.unpad_inputs`, on by default): a right-padded batch is cut to its longest row before it is
  padded to the block size (T'), and the layers run on its N real tokens only: the projections, LayerNorms,
  residuals and feed-forward blocks on (N, C) (gathered once), attention on the (B, T', ...) block layout the
  pattern needs (keys and values scattered to it, padding keys masked), computing only the query blocks that hold
  a real token (`skip_padding_blocks`). So a batch padded to 4096 costs about what its real tokens cost. The
  sparse layout depends on the length (the last block is global; the random blocks are drawn for it), so the
  outputs equal the reference's on the batch as `padding="longest"` makes it, not on a longer padding of it
  (where the reference's own outputs at real tokens change with the amount of padding). Hidden states at
  padding positions are zeros and question answering masks them, as in BERT. `unpad_inputs=False` runs the
  batch as given: the reference's outputs at every position;
- the random blocks: `config.random_blocks` ("reference": transformers' numpy pattern seeded with the layer
  index, and its all-zeros eval pattern; "fresh": new blocks every training step, see the config).

Deliberate deviations from the reference:
- the reference switches the model to full attention for good after one short input (with a warning at
  every such call); ours decides per forward and logs once;
- no (B, H, T, T) attention weights in block-sparse mode: `output_attentions=True` there is refused (full
  attention returns them), so nothing of size T x T is ever built (the reference builds it on every call);
- packed sequences (`models.packing`) and ready-made 4-D masks cannot be expressed in the sparse layout and are
  refused there with a message (full attention takes them, as BERT does);
- module names are the ones shared by every hf_xfmr model (`q_proj`, ..., `up_proj`, `down_proj`, `norm`);
- numpy's global generator is not reseeded (the reference calls `np.random.seed` on every training forward).
There is no `ForCausalLM`: BigBird as a decoder needs full attention and cross-attention, a BERT decoder.

Shapes: B batch, T sequence length, T' the length run (cut and padded to a multiple of the block size),
C hidden size, H heads, D head size (C / H), V vocabulary size, K number of choices, N number of real
(unpadded) tokens or of labelled (masked) positions, n = T' / block_size blocks.
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput, QuestionAnsweringModelOutput

from ...layers.block_sparse import (
    block_sparse_attention,
    layer_random_blocks,
    log_full_attention_once,
    uses_full_attention,
)
from ...layers.dropout import Dropout
from ...layers.mlp import MLP, get_activation
from ...layers.padding import PADDED_LAYOUT
from ..encoder import (
    EncoderSelfAttention,
    MaskedLMPredictionHead,
    PooledEncoderStack,
    PostNormEncoderLayer,
    TanhPooler,
    default_position_ids,
)
from ..heads import (
    DropoutLinear,
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TaskHead,
    TiedDecoderHead,
    TokenClassificationHead,
    input_shape,
    masked_lm_logits_and_loss,
)
from ..input_checks import check_labels_shape
from ..losses import span_loss, token_loss
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel, collect
from .configuration_bigbird import XfmrBigBirdConfig


class XfmrBigBirdEmbeddings(nn.Module):
    """Token (optionally x sqrt(C)) + token type + learned absolute position embeddings, dropout, LayerNorm."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.scale = config.hidden_size**0.5 if config.rescale_embeddings else None
        self.max_length = config.max_position_embeddings

    default_position_ids = staticmethod(default_position_ids)  # (1, T)
    first_position = 0  # what a packed sequence's first token is numbered

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, C)
        if self.scale is not None:
            inputs_embeds = inputs_embeds * self.scale
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, inputs_embeds.shape[1], inputs_embeds.device)
        if token_type_ids is None:  # every token is segment A: one (1, 1) id, broadcast
            token_type_ids = torch.zeros(1, 1, dtype=torch.long, device=inputs_embeds.device)
        # Through the modules, never their weights: the same modules run whatever the batch (ZeRO-3; see BERT).
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.norm(self.dropout(embeddings))  # the reference's order: dropout, then LayerNorm


class BlockSparseLayout(NamedTuple):
    """What the layers of a block-sparse forward receive in place of an attention mask.

    keep: (B, T') bool, True at real tokens, or None when every token is real.
    tokens: (N,) places of the real tokens in the flattened (B T') block layout when the layers run on the real
        tokens only ((N, C) hidden states, scattered to the block layout around attention); None: (B, T', C)."""

    keep: torch.Tensor | None
    tokens: torch.Tensor | None = None

    def to_blocks(self, x):
        """(N, ...) real tokens -> (B, T', ...), zeros at padding; (B, T', ...) as it is."""
        if self.tokens is None:
            return x
        batch, length = self.keep.shape
        grid = x.new_zeros(batch * length, *x.shape[1:]).index_copy(0, self.tokens, x)  # (B T', ...)
        return grid.view(batch, length, *x.shape[1:])

    def from_blocks(self, x):
        """(B, T', ...) -> the layers' layout: (N, ...) real tokens, or (B, T', ...) as it is."""
        return x if self.tokens is None else x.flatten(0, 1).index_select(0, self.tokens)


class XfmrBigBirdAttention(EncoderSelfAttention):
    """Self-attention: full (BERT's, any kernel) on a padded or unpadded batch, or block-sparse when the layers
    receive a `BlockSparseLayout`. The output projection always has a bias; `use_bias` sets the others'."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, config.hidden_size, config.num_attention_heads, config.attention_probs_dropout_prob,
                         bias=config.use_bias)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_idx = layer_idx  # the seed of the reference's random blocks

    def random_blocks(self, seq_len: int, device) -> torch.Tensor:
        """(H, n-2, r) random key blocks of this layer for a sequence of `seq_len` tokens (see the config)."""
        config = self.config
        return layer_random_blocks(seq_len, config.block_size, config.num_random_blocks, self.num_heads,
                                   self.layer_idx, fresh=config.random_blocks == "fresh", training=self.training,
                                   max_seq_len=config.max_position_embeddings, device=device)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, varlen=None):
        if not isinstance(attention_mask, BlockSparseLayout):
            return super().forward(hidden_states, attention_mask, output_attentions, varlen)
        layout = attention_mask
        q, k, v = (layout.to_blocks(x).transpose(1, 2)
                   for x in self.queries_keys_values(hidden_states))  # (B, H, T', D) each
        blocks = self.random_blocks(q.shape[2], hidden_states.device)  # (H, n-2, r)
        # No dropout on the probabilities: the reference's block-sparse attention has none. Unpadded, the query
        # blocks without a real token are skipped: their outputs are dropped anyway.
        out = block_sparse_attention(q, k, v, layout.keep, self.config.block_size, blocks, scaling=self.scaling,
                                     skip_padding_blocks=layout.tokens is not None)  # (B, T', H, D)
        out = layout.from_blocks(out)  # (N, H, D) or (B, T', H, D)
        return self.o_proj(out.flatten(-2)), None  # (N, C) or (B, T', C)


class XfmrBigBirdLayer(PostNormEncoderLayer):
    """Post-LN block: x = LN(x + dropout(Attn(x))); x = LN(x + MLP(x)), BERT's."""

    def __init__(self, config, layer_idx: int):
        super().__init__(XfmrBigBirdAttention(config, layer_idx), config.hidden_size, config.intermediate_size,
                         config.hidden_act, config.layer_norm_eps, mlp_dropout=config.hidden_dropout_prob,
                         attn_dropout=config.hidden_dropout_prob)


class XfmrBigBirdPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrBigBirdConfig
    _no_split_modules = ["XfmrBigBirdLayer"]


def _fit_length(tensor, length: int, target: int, fill):
    """(B, T, ...) -> (B, target, ...): the first `length` positions, then `fill` up to `target`."""
    tensor = tensor[:, :length]
    if target == length:
        return tensor
    pad = tensor.new_full((tensor.shape[0], target - length, *tensor.shape[2:]), fill)
    return torch.cat([tensor, pad], dim=1)


class XfmrBigBirdModel(PooledEncoderStack, XfmrBigBirdPreTrainedModel):
    """The encoder: embeddings, `num_hidden_layers` post-LN layers (block-sparse or full attention) and an
    optional [CLS] pooler. The forward is `models.encoder.PooledEncoderStack.forward`; `run_encoder` picks the
    attention layout of each batch (see the module docstring)."""

    def __init__(self, config, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = XfmrBigBirdEmbeddings(config)
        self.layers = nn.ModuleList(XfmrBigBirdLayer(config, i) for i in range(config.num_hidden_layers))
        self.pooler = TanhPooler(config.hidden_size) if add_pooling_layer else None
        self.post_init()

    def sparse_length(self, attention_mask, seq_len: int) -> tuple[int, bool | None]:
        """(tokens to run, whether a row is shorter): with `unpad_inputs` and every row starting with a real token,
        the longest row's length and whether some row has padding before it (one host read); else `seq_len` and
        None (the batch runs as given)."""
        if attention_mask is None or not self.config.unpad_inputs or torch.compiler.is_compiling() \
                or PADDED_LAYOUT.get():
            return seq_len, None
        keep = attention_mask.bool()
        columns = torch.arange(1, seq_len + 1, device=keep.device)  # (T,)
        length, right_padded, real = torch.stack([(keep * columns).amax(), keep[:, 0].all().long(),
                                                  keep.sum()]).tolist()
        if not right_padded or length == 0:  # left padding: position 0 ([CLS] pooling) must keep its values
            return seq_len, None
        return length, real < keep.shape[0] * length

    def run_encoder(self, layers, inputs: dict, attention_mask, shape: tuple, output_attentions: bool,
                    output_hidden_states: bool, packed: dict | None = None):
        """`EncoderStack.run_encoder`'s contract; block-sparse attention for inputs long enough, else BERT's."""
        config = self.config
        sparse = config.attention_type == "block_sparse"
        if not sparse or shape[1] == 0:
            return super().run_encoder(layers, inputs, attention_mask, shape, output_attentions,
                                       output_hidden_states, packed)
        length, padded = self.sparse_length(attention_mask, shape[1])
        if uses_full_attention(length, config.block_size, config.num_random_blocks):
            log_full_attention_once(length, config.block_size, config.num_random_blocks)
            return super().run_encoder(layers, inputs, attention_mask, shape, output_attentions,
                                       output_hidden_states, packed)
        self.check_sparse_inputs(inputs, attention_mask, shape, output_attentions, packed)
        return self.run_block_sparse(layers, inputs, attention_mask, shape, length, padded, output_hidden_states)

    def check_sparse_inputs(self, inputs, attention_mask, shape, output_attentions, packed) -> None:
        """Refuse what the block-sparse layout cannot express, saying what works instead."""
        if output_attentions:
            raise ValueError("Block-sparse attention never builds the (B, H, T, T) attention weights; load the model "
                             "with attention_type='original_full' to get them (or pass output_attentions=False).")
        if attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError(f"Block-sparse attention takes a (batch, seq_len) padding mask, got shape "
                             f"{tuple(attention_mask.shape)}; use attention_type='original_full' for 4-D masks.")
        if packed_sequence_starts(self, *shape, attention_mask, inputs["position_ids"], packed=packed) is not None:
            raise ValueError("Block-sparse attention cannot keep packed sequences apart (its global and random blocks "
                             "cross their boundaries); pass one sequence per row with padding, or use "
                             "attention_type='original_full'.")

    def run_block_sparse(self, layers, inputs: dict, attention_mask, shape: tuple, length: int, padded: bool | None,
                         output_hidden_states: bool):
        """Run the first `length` tokens, padded to a multiple of the block size (T'), through `layers`; outputs
        (B, T, C). `padded` (see `sparse_length`): True, the layers run on the N real tokens only; False, every
        row is real up to `length`; None, the batch as given (its padding computed as the reference does)."""
        batch, seq_len = shape
        block = self.config.block_size
        device = next(value.device for value in inputs.values() if value is not None)
        target = -(-length // block) * block  # T'
        keep = None if attention_mask is None or padded is False else attention_mask.bool()
        if keep is None and target > length:
            keep = torch.ones(batch, seq_len, dtype=torch.bool, device=device)
        if keep is not None:
            keep = _fit_length(keep, length, target, False)  # (B, T')
        if inputs["position_ids"] is None and (target > length or padded):  # padding numbered 0: inside the table
            inputs["position_ids"] = default_position_ids(None, length, device).expand(batch, -1)
        pad_id = self.config.pad_token_id or 0
        fills = {"input_ids": pad_id, "token_type_ids": 0, "position_ids": 0, "inputs_embeds": 0.0}
        inputs = {name: None if value is None else _fit_length(value.expand(batch, *value.shape[1:]), length,
                                                               target, fills[name])
                  for name, value in inputs.items()}  # (B, T', ...)
        layout = BlockSparseLayout(keep, keep.flatten().nonzero().flatten() if padded else None)
        if padded:  # the embeddings take the real tokens as one (1, N) row
            inputs = {name: None if value is None else layout.from_blocks(value)[None]
                      for name, value in inputs.items()}
        hidden_states = self.embeddings(**inputs)  # (B, T', C) or (1, N, C)
        if padded:
            hidden_states = hidden_states.squeeze(0)  # (N, C)
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        for layer in layers:
            hidden_states, _ = layer(hidden_states, layout, False, None)
            all_hidden_states = collect(all_hidden_states, hidden_states)

        def restore(hidden):  # the layers' layout -> (B, T, C), zeros at padding when cut to `length`
            return _fit_length(layout.to_blocks(hidden), length, seq_len, 0.0)

        if all_hidden_states is not None:
            all_hidden_states = tuple(restore(h) for h in all_hidden_states)
        return restore(hidden_states), all_hidden_states, None


class XfmrBigBirdLMHead(MaskedLMPredictionHead):
    """MLM head: dense -> activation -> LayerNorm -> decoder onto the vocabulary (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config.hidden_size, config.hidden_size, config.vocab_size, config.hidden_act,
                         config.layer_norm_eps)


# -- task heads (shared machinery in models/heads.py). Every head but QA has the pooler, as the reference's do
# (its weights convert both ways), even where the head reads the tokens instead.
class XfmrBigBirdForMaskedLM(MaskedLMHead, XfmrBigBirdPreTrainedModel):
    """MLM. Its pooler (kept so that the weights convert both ways) takes no part in the loss: it is frozen, as
    it gets no gradient anyway, so that DDP does not wait for one (no `find_unused_parameters` needed)."""

    base_model_class = XfmrBigBirdModel
    lm_head_class = XfmrBigBirdLMHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        if self.model.pooler is not None:
            self.model.pooler.requires_grad_(False)


@dataclass
class XfmrBigBirdForPreTrainingOutput(ModelOutput):
    """Output of `XfmrBigBirdForPreTraining`: MLM logits, NSP logits and their summed loss."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class XfmrBigBirdForPreTraining(TiedDecoderHead, TaskHead, XfmrBigBirdPreTrainedModel):
    """MLM + next-sentence prediction (NSP), BERT's pretraining objective."""

    base_model_class = XfmrBigBirdModel
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = XfmrBigBirdLMHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, next_sentence_label=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        """`labels` (B, T) as for MLM; `next_sentence_label` (B,): 0 = B follows A, 1 = B is random. The NSP loss
        is added to the MLM loss (it needs `labels`), as in the reference."""
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds, token_labels=labels,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        sparse = self.config.sparse_prediction and self.training
        logits, loss = masked_lm_logits_and_loss(self.lm_head, out.last_hidden_state, labels, sparse)
        nsp_logits = self.nsp_head(out.pooler_output)  # (B, 2)
        if loss is not None and next_sentence_label is not None:
            loss = loss + token_loss(nsp_logits, next_sentence_label)
        return self.finish(XfmrBigBirdForPreTrainingOutput(
            loss=loss, prediction_logits=logits, seq_relationship_logits=nsp_logits,
            hidden_states=out.hidden_states, attentions=out.attentions), return_dict)


class XfmrBigBirdClassificationHead(nn.Module):
    """Sequence classification on the first token: dropout -> dense -> `hidden_act` -> dropout -> linear."""

    def __init__(self, config, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, pooled):
        return self.out_proj(self.dropout(self.act(self.dense(self.dropout(pooled)))))  # (B, C) -> (B, outputs)


class XfmrBigBirdForSequenceClassification(SequenceClassificationHead, XfmrBigBirdPreTrainedModel):
    """First token -> dropout -> dense -> `hidden_act` -> dropout -> linear. Regression when `num_labels == 1`."""

    base_model_class = XfmrBigBirdModel
    pooling = "first"

    def build_classifier(self, config, num_outputs: int) -> nn.Module:
        return XfmrBigBirdClassificationHead(config, num_outputs, self.classifier_dropout_prob())


class XfmrBigBirdForTokenClassification(TokenClassificationHead, XfmrBigBirdPreTrainedModel):
    base_model_class = XfmrBigBirdModel


class XfmrBigBirdForMultipleChoice(MultipleChoiceHead, XfmrBigBirdPreTrainedModel):
    """Each (context, choice) pair is encoded separately; pooled [CLS] -> dropout (`hidden_dropout_prob`) ->
    one score per choice."""

    base_model_class = XfmrBigBirdModel
    pooling = "pooler"

    def build_classifier(self, config, num_outputs: int) -> nn.Module:
        return DropoutLinear(config.hidden_size, num_outputs, config.hidden_dropout_prob)


class XfmrBigBirdQAScorer(nn.Module):
    """dropout -> feed-forward block (up, act, down, dropout, residual, LayerNorm) -> (start, end) scores."""

    def __init__(self, config):
        super().__init__()
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.mlp = MLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                       dropout=config.hidden_dropout_prob)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.out_proj = nn.Linear(config.hidden_size, 2)

    def forward(self, hidden_states):
        hidden_states = self.norm(hidden_states + self.mlp(self.dropout(hidden_states)))  # (B, T, C)
        return self.out_proj(hidden_states)  # (B, T, 2)


def question_token_mask(question_lengths, seq_len: int):
    """(B, T) bool, True at the question's tokens (positions below `question_lengths` (B,) or (B, 1))."""
    positions = torch.arange(seq_len, device=question_lengths.device)[None, :]  # (1, T)
    return positions < question_lengths.reshape(-1, 1)


class XfmrBigBirdForQuestionAnswering(QuestionAnsweringHead, XfmrBigBirdPreTrainedModel):
    """Extractive QA. The question (up to the first [SEP], or `question_lengths`) is out of the competition: its
    start/end scores are lowered by 1e6 (not position 0), and without `token_type_ids` the question is type 0 and
    the rest type 1, as in the reference. Padding is masked as in BERT when unpadding (`unpad_inputs`)."""

    base_model_class = XfmrBigBirdModel
    base_model_kwargs = {"add_pooling_layer": False}

    def build_qa_outputs(self, config) -> nn.Module:
        return XfmrBigBirdQAScorer(config)

    def question_tokens(self, input_ids, question_lengths, shape):
        """(B, T) bool, True at each row's question: `question_lengths` tokens, by default up to and including the
        first `config.sep_token_id` of `input_ids`; None when neither tells (or for empty inputs, which the backbone
        refuses with its own message)."""
        if shape is None or 0 in shape:
            return None
        if question_lengths is None and input_ids is not None and self.config.sep_token_id is not None:
            question_lengths = (input_ids == self.config.sep_token_id).int().argmax(dim=-1) + 1  # (B,)
        return None if question_lengths is None else question_token_mask(question_lengths, shape[1])

    def forward(self, input_ids=None, attention_mask=None, question_lengths=None, token_type_ids=None,
                position_ids=None, inputs_embeds=None, start_positions=None, end_positions=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        """`question_lengths` (B,) or (B, 1): tokens of each row's question ([CLS] included); by default up to and
        including the first `config.sep_token_id` of `input_ids`. `start_positions` / `end_positions` (B,)."""
        shape = input_shape(input_ids, inputs_embeds)
        for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
            if positions is not None and shape is not None and positions.reshape(-1).shape[0] != shape[0]:
                raise ValueError(f"`{name}` must hold one index per sequence ({shape[0]}), "
                                 f"got shape {tuple(positions.shape)}.")
        question = self.question_tokens(input_ids, question_lengths, shape)  # (B, T) or None
        if question is not None and token_type_ids is None:
            token_type_ids = (~question).long()  # the question is segment A, the context segment B
        if question is not None:
            question[:, 0] = False  # [CLS] stays a candidate (the "no answer" span)
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.qa_outputs(out.last_hidden_state)  # (B, T, 2)
        if question is not None:
            logits = logits - question[..., None].to(logits.dtype) * 1e6
        if attention_mask is not None and attention_mask.dim() == 2 and self.masks_padding():
            logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))  # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions)
        return self.finish(self.task_output(QuestionAnsweringModelOutput, out, loss=loss, start_logits=start_logits,
                                            end_logits=end_logits), return_dict)


__all__ = [
    "XfmrBigBirdPreTrainedModel",
    "XfmrBigBirdModel",
    "XfmrBigBirdForPreTraining",
    "XfmrBigBirdForMaskedLM",
    "XfmrBigBirdForSequenceClassification",
    "XfmrBigBirdForTokenClassification",
    "XfmrBigBirdForQuestionAnswering",
    "XfmrBigBirdForMultipleChoice",
]
