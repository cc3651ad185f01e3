"""What every encoder-decoder (T5, BART) shares: decoder inputs from labels, the encoder entry point
`generate()` runs once, and the sequence-to-sequence LM head.

- `shift_tokens_right(labels, pad_token_id, decoder_start_token_id)`: teacher forcing. The decoder
  input at step t is the target at t - 1, the first one the start token; -100 (ignored targets) become
  the pad id. `check_decoder_inputs` rejects `labels` / `decoder_input_ids` that disagree in shape.
- `EncoderEntry`: what `get_encoder()` returns. transformers' `generate` calls it once with the
  prompt and then only the decoder, step by step, with the encoder output, a self-attention cache and
  the cross-attention keys/values computed on the first step (an `EncoderDecoderCache`).
- `check_encoder_batch` and `seq2seq_model_output`: the backbone's last steps, the encoder output and the
  decoder inputs checked against each other, and the decoder's and encoder's outputs as one
  `Seq2SeqModelOutput`. `SharedInputEmbeddings`: the accessors of the one token table (`shared`).
- `Seq2SeqAttention`: the query/key/value projections and the KV cache of an encoder-decoder attention
  layer: self-attention appends to the self-attention cache; cross-attention projects the encoder output
  on the first decoding step, keeps it in the cross-attention cache and reuses it afterwards.
- `DecoderInputsFromInputs` and `EosClassifier`: what the classification and QA heads of T5 and BART
  share (the decoder reads the input shifted right, and the output is transformers' Seq2Seq* class with
  the encoder's and decoder's states; dense -> tanh -> out_proj on the last <eos> state).
- `Seq2SeqLMHead`: backbone (`self.model`, returning a `Seq2SeqModelOutput`), then `lm_head`; the loss
  is computed by `layers.cross_entropy.linear_cross_entropy` in training (no (B, T, V) logits), and
  `generate()` (greedy, sampling, beam search) with the argument checks of `models/generation.py`.
  An architecture states its output scaling (`decoder_output_scale`: T5's d_model^-0.5 with a tied
  head) and an optional logits bias (`logits_bias`: BART's `final_logits_bias`).

The backbone's forward takes `input_ids, attention_mask, decoder_input_ids, decoder_attention_mask,
encoder_outputs, past_key_values, inputs_embeds, decoder_inputs_embeds, use_cache, output_attentions,
output_hidden_states, return_dict` and its `get_encoder()` returns an `EncoderEntry` (or a module with
the same call signature).

Shapes: B batch, S encoder tokens, T decoder tokens, C hidden size, V vocabulary.
"""

import math

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPast,
    QuestionAnsweringModelOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    Seq2SeqQuestionAnsweringModelOutput,
    Seq2SeqSequenceClassifierOutput,
    SequenceClassifierOutput,
)

from ..layers.dropout import Dropout
from ..layers.masks import ready_mask, visible_keys
from .causal_lm import lm_logits_and_loss
from .generation import (
    CheckedGenerationMixin,
    cached_length,
    check_decoder_mask,
    decoder_position_ids,
    prepare_cache,
    replayed_by_checkpointing,
)
from .heads import TaskHead
from .input_checks import check_4d_mask, check_attention_mask, check_encoder_inputs, check_id_dtype, check_tensor
from .losses import IGNORE_INDEX
from .packing import packed_sequence_starts


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int | None):
    """(B, T) labels -> (B, T) decoder inputs: [start, labels[:-1]] with -100 replaced by the pad id."""
    if decoder_start_token_id is None:
        raise ValueError(
            "`decoder_start_token_id` is not set in the model config, so decoder inputs cannot be derived from "
            "`labels`: set it (T5 uses the pad id, 0; BART the </s> id, 2), e.g. "
            "model.config.decoder_start_token_id = 0, or pass `decoder_input_ids` yourself."
        )
    if pad_token_id is None:
        raise ValueError("`pad_token_id` is not set in the model config; it replaces the ignored (-100) labels "
                         "in the decoder inputs. Set model.config.pad_token_id.")
    shifted = labels.new_full(labels.shape, decoder_start_token_id)  # (B, T)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill_(shifted == IGNORE_INDEX, pad_token_id)


def check_decoder_inputs(decoder_input_ids, decoder_inputs_embeds, labels) -> None:
    """`labels` must have one entry per decoder input when both are given."""
    check_id_dtype("decoder_input_ids", decoder_input_ids)
    check_tensor("decoder_inputs_embeds", decoder_inputs_embeds)
    check_tensor("labels", labels)
    if labels is None:
        return
    source = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
    if labels.dim() != 2:
        raise ValueError(f"`labels` must have shape (batch, target_len), got {tuple(labels.shape)}.")
    if source is not None and tuple(source.shape[:2]) != tuple(labels.shape):
        name = "decoder_input_ids" if decoder_input_ids is not None else "decoder_inputs_embeds"
        raise ValueError(
            f"`{name}` has shape {tuple(source.shape[:2])} but `labels` has shape {tuple(labels.shape)}: the decoder "
            f"predicts one label per input. Pass only `labels` (the decoder inputs are then the labels shifted "
            f"right) or decoder inputs of the labels' shape."
        )


def check_encoder_batch(encoder_hidden, decoder_embeds) -> None:
    """The decoder reads one target sequence per encoded input: (B, S, C) and (B, T, C) must share B."""
    if encoder_hidden.shape[0] != decoder_embeds.shape[0]:
        raise ValueError(f"The encoder batch has {encoder_hidden.shape[0]} rows but the decoder inputs "
                         f"{decoder_embeds.shape[0]}; pass one target sequence per input sequence.")


def seq2seq_model_output(decoder_outputs: tuple, encoder_outputs: BaseModelOutput, cache, return_dict: bool):
    """A backbone's result: the decoder stack's (hidden (B, T, C), hidden states, self-attention weights,
    cross-attention weights) and the encoder's output as a `Seq2SeqModelOutput` (a tuple without
    `return_dict`); `cache` is the `EncoderDecoderCache` to return, or None."""
    hidden, all_hidden, all_self, all_cross = decoder_outputs
    output = Seq2SeqModelOutput(
        last_hidden_state=hidden, cache=cache,
        decoder_hidden_states=all_hidden, decoder_attentions=all_self, cross_attentions=all_cross,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states, encoder_attentions=encoder_outputs.attentions,
    )
    return output if return_dict else output.to_tuple()


def cross_attention_mask(encoder_hidden_states, encoder_attention_mask):
    """(B, 1, 1, S) bool: the encoder tokens the decoder may read, or None when it may read them all. A (B, S)
    0/1 mask as it is; the encoder's ready-made (B, 1, S, S) mask by the keys some query may see (its padding)."""
    if encoder_hidden_states is None or encoder_attention_mask is None:
        return None
    if encoder_attention_mask.dim() == 4:
        return visible_keys(ready_mask(encoder_attention_mask))  # (B, 1, 1, S)
    if torch.compiler.is_compiling() or not bool(encoder_attention_mask.all()):
        return encoder_attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    return None


def refuse_packed_decoder(model, input_ids, inputs_embeds, attention_mask, position_ids, packed: dict) -> None:
    """A ValueError when an encoder-decoder's encoder input holds packed sequences: its decoder reads one target
    per row, so only the encoder (which keeps packed sequences apart) can take them."""
    source = input_ids if input_ids is not None else inputs_embeds
    if (position_ids is None and not packed) or source is None:
        return
    if packed_sequence_starts(model, *source.shape[:2], attention_mask, position_ids, packed=packed) is not None:
        raise ValueError(
            f"{type(model).__name__} got packed sequences (several per row), but its decoder reads one target "
            f"sequence per row and would attend across them. Run packed batches through the encoder alone "
            f"(`model.get_encoder()`, or the encoder model class), or pad one sequence per row."
        )


class SharedInputEmbeddings:
    """Mixin of an encoder-decoder backbone whose encoder and decoder read one token table, `self.shared`:
    the input-embedding accessors transformers uses to tie and resize it."""

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value

    def build_shared_embeddings(self, config) -> None:
        """`shared` (V, d_model) with its padding row, and `embed_scale`: sqrt(d_model) with `scale_embedding`."""
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0


def run_encoder_unless_given(model, encoder_outputs, input_ids, attention_mask, inputs_embeds, output_attentions,
                             output_hidden_states) -> BaseModelOutput:
    """`encoder_outputs` as a `BaseModelOutput` (a tuple is wrapped), or `model.run_encoder(...)`'s when None."""
    if encoder_outputs is None:
        return model.run_encoder(input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states)
    return encoder_outputs if isinstance(encoder_outputs, BaseModelOutput) else BaseModelOutput(*encoder_outputs)


def check_padding_mask(name, mask, embeds, values=True):
    """A 2-D padding mask: one 0/1 entry per token of `embeds` (B, T, C), or a ready-made (B, 1, T, T) one;
    `values=False` checks the shape alone (a mask whose values the encoder has just checked)."""
    check_attention_mask(name, mask if values else None)
    if mask is not None and mask.dim() == 4:
        check_4d_mask(mask, embeds.shape[0], embeds.shape[1], embeds.shape[1])
    elif mask is not None and tuple(mask.shape) != tuple(embeds.shape[:2]):
        raise ValueError(f"`{name}` has shape {tuple(mask.shape)} but the inputs have shape "
                         f"{tuple(embeds.shape[:2])}; it must be 2-D with one 0/1 entry per token.")


class SharedEmbeddingsEncoderDecoder(SharedInputEmbeddings):
    """Mixin of a BART-style encoder-decoder backbone (BART, BigBird-Pegasus): encoder and decoder reading one
    token table (`shared`, scaled by sqrt(d_model) with `scale_embedding`), the stacks `build_encoder(config)` and
    `build_decoder(config)` return, and the forward that returns the decoder output; without decoder inputs the
    decoder reads `input_ids` shifted right (the references' default). The family writes `run_encoder`."""

    def build_encoder(self, config) -> nn.Module:
        raise NotImplementedError

    def build_decoder(self, config) -> nn.Module:
        raise NotImplementedError

    def __init__(self, config):
        super().__init__(config)
        self.build_shared_embeddings(config)
        self.encoder = self.build_encoder(config)
        self.decoder = self.build_decoder(config)
        self.post_init()

    def get_encoder(self, modality=None):
        return EncoderEntry(self.run_encoder)

    def embed(self, input_ids, inputs_embeds, max_positions=None, ids_name="input_ids"):
        """(B, T) ids -> (B, T, C) scaled token embeddings (given embeddings are used as they are)."""
        check_encoder_inputs(input_ids, inputs_embeds, None, None, None, vocab_size=self.config.vocab_size,
                             type_vocab_size=None, max_positions=max_positions, ids_name=ids_name)
        return self.shared(input_ids) * self.embed_scale if inputs_embeds is None else inputs_embeds

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, inputs_embeds=None, decoder_inputs_embeds=None,
                use_cache=None, output_attentions=None, output_hidden_states=None, return_dict=None, cache=None,
                position_ids=None, **packed):
        """`past_key_values` (or `cache`): an `EncoderDecoderCache` from an earlier decoding step. Packed
        sequences are refused (`refuse_packed_decoder`): `get_encoder()` takes them."""
        config = self.config
        refuse_packed_decoder(self, input_ids, inputs_embeds, attention_mask, position_ids, packed)
        past_key_values = cache if cache is not None else past_key_values
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            if input_ids is None:
                raise ValueError(f"{type(self).__name__} needs `decoder_input_ids` (or `decoder_inputs_embeds`), or "
                                 f"`input_ids` for the decoder to read shifted right.")
            check_id_dtype("input_ids", input_ids)
            decoder_input_ids = shift_tokens_right(input_ids, config.pad_token_id, config.decoder_start_token_id)
        encoder_ran = encoder_outputs is None
        encoder_outputs = run_encoder_unless_given(self, encoder_outputs, input_ids, attention_mask, inputs_embeds,
                                                   output_attentions, output_hidden_states)
        if use_cache is None:
            use_cache = config.use_cache and not self.training
        if replayed_by_checkpointing(self.decoder.layers):  # the replay would write a cache twice
            use_cache, past_key_values = False, None
        past_key_values = prepare_cache(past_key_values, use_cache, config, cross_attention=True)
        embeds = self.embed(decoder_input_ids, decoder_inputs_embeds, ids_name="decoder_input_ids")  # (B, T, C)
        encoder_hidden = encoder_outputs.last_hidden_state  # (B, S, C)
        check_encoder_batch(encoder_hidden, embeds)
        if attention_mask is not None:
            check_padding_mask("attention_mask", attention_mask, encoder_hidden, values=not encoder_ran)
        past_length = cached_length(past_key_values.self_attention_cache) if past_key_values is not None else 0
        expected = (embeds.shape[0], past_length + embeds.shape[1])
        check_attention_mask("decoder_attention_mask", decoder_attention_mask)
        if decoder_attention_mask is not None and tuple(decoder_attention_mask.shape) != expected:
            cached = f" ({past_length} cached + {embeds.shape[1]} new)" if past_length else ""
            raise ValueError(f"`decoder_attention_mask` has shape {tuple(decoder_attention_mask.shape)} but must be "
                             f"{expected}{cached}: 2-D, one 0/1 entry per decoder token (the causal part is added "
                             f"by the model).")
        decoder_outputs = self.decoder(
            embeds, decoder_attention_mask, None, encoder_hidden, attention_mask, past_key_values=past_key_values,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        return seq2seq_model_output(decoder_outputs, encoder_outputs, past_key_values if use_cache else None,
                                    return_dict)


class DecoderAloneModel(SharedInputEmbeddings):
    """Mixin of the decoder alone of a BART-style encoder-decoder (`...ForCausalLM`'s backbone): token embeddings
    (`shared`, scaled by sqrt(d_model) with `scale_embedding`) and the decoder stack `build_decoder(config)`
    returns, whose cross-attention runs only when `encoder_hidden_states` are given. BART and BigBird-Pegasus."""

    def build_decoder(self, config) -> nn.Module:
        raise NotImplementedError

    def __init__(self, config):
        super().__init__(config)
        self.build_shared_embeddings(config)
        self.decoder = self.build_decoder(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, encoder_hidden_states=None, encoder_attention_mask=None, use_cache=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, cache=None, **packed):
        """attention_mask (B, P + T) 0/1 over cached and new tokens, or a ready-made (B, 1, T, P + T) mask;
        `past_key_values`: a transformers `Cache`; `packed`: the boundaries of packed sequences (`models.packing`;
        restarting `position_ids` mark them too), which then attend causally to themselves only."""
        config = self.config
        past_key_values = cache if cache is not None else past_key_values
        batch, seq_len = check_encoder_inputs(input_ids, inputs_embeds, None, None, None, vocab_size=config.vocab_size,
                                              type_vocab_size=None, max_positions=None)
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)
        if use_cache is None:
            use_cache = config.use_cache and not self.training
        if replayed_by_checkpointing(self.decoder.layers):
            use_cache, past_key_values = False, None
        past_key_values = prepare_cache(past_key_values, use_cache, config,
                                        cross_attention=encoder_hidden_states is not None)
        self_cache = (past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache)
                      else past_key_values)
        past_length = cached_length(self_cache)
        check_decoder_mask(attention_mask, batch, past_length, seq_len)
        check_attention_mask("encoder_attention_mask", encoder_attention_mask)
        starts = packed_sequence_starts(self, batch, seq_len, attention_mask, position_ids, past_length, packed)
        embeds = self.shared(input_ids) * self.embed_scale if inputs_embeds is None else inputs_embeds  # (B, T, C)
        if position_ids is None and attention_mask is not None and starts is None:
            if past_length + seq_len > config.max_position_embeddings:
                raise ValueError(f"{seq_len} tokens after {past_length} cached exceed the "
                                 f"{config.max_position_embeddings} positions this model has "
                                 f"(`max_position_embeddings`); truncate the inputs or lower `max_new_tokens`.")
            position_ids = decoder_position_ids(attention_mask, past_length, seq_len, embeds.device)  # (B, T)
        hidden, all_hidden, all_self, all_cross = self.decoder(
            embeds, attention_mask, position_ids, encoder_hidden_states, encoder_attention_mask,
            past_key_values=past_key_values, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, starts=starts,
        )
        output = BaseModelOutputWithPast(last_hidden_state=hidden, cache=past_key_values if use_cache else None,
                                         hidden_states=all_hidden, attentions=all_self)
        return output if return_dict else output.to_tuple()


class FinalLogitsBias:
    """Mixin of a BART-style `...ForConditionalGeneration`: the `final_logits_bias` buffer added to the logits,
    resized with the token embeddings."""

    def __init__(self, config):
        super().__init__(config)
        # A buffer, as in the reference: checkpoints store it, training leaves it alone.
        self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))

    def logits_bias(self):
        return self.final_logits_bias[0]  # (V,)

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        size, old = embeddings.weight.shape[0], self.final_logits_bias
        bias = old[:, :size] if size <= old.shape[1] else torch.cat([old, old.new_zeros(1, size - old.shape[1])], 1)
        self.register_buffer("final_logits_bias", bias)
        return embeddings


class EncoderEntry:
    """The encoder half of an encoder-decoder as a callable `generate()` can run on its own.

    `run(input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states, **packed)` must
    return a `BaseModelOutput`; `packed` are `position_ids` and the boundaries of packed sequences
    (`models.packing`), which the encoder keeps apart. Not a module: it owns no parameters (they stay in the model).
    """

    def __init__(self, run):
        self._run = run

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **packed):
        return self._run(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
                         output_attentions=output_attentions, output_hidden_states=output_hidden_states, **packed)

    __call__ = forward


class Seq2SeqAttention(nn.Module):
    """Base of T5's and BART's attention: `q_proj`, `k_proj`, `v_proj` (set by the subclass), `num_heads`,
    `head_dim`, `layer_idx`, `is_cross_attention`, and the projections with the cache."""

    def _project(self, proj, states):
        batch, length, _ = states.shape
        return proj(states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, D)

    def queries_keys_values(self, hidden_states, key_value_states=None, past_key_values=None):
        """hidden_states (B, T, C); key_value_states (B, S, C) for cross-attention; `past_key_values` an
        `EncoderDecoderCache`, a plain cache (a decoder-only model's self-attention), or None.
        Returns q (B, H, T, D) and k, v (B, H, K, D): K = S (cross) or P + T (self, P cached tokens)."""
        q = self._project(self.q_proj, hidden_states)  # (B, H, T, D)
        encoder_decoder = isinstance(past_key_values, EncoderDecoderCache)
        if self.is_cross_attention:
            cache = past_key_values.cross_attention_cache if encoder_decoder else None
            if cache is not None and past_key_values.is_updated.get(self.layer_idx):
                # encoder keys/values were projected on the first decoding step; reuse them
                return q, cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values  # (B, H, S, D)
            k = self._project(self.k_proj, key_value_states)  # (B, H, S, D)
            v = self._project(self.v_proj, key_value_states)  # (B, H, S, D)
            if cache is not None:
                k, v = cache.update(k, v, self.layer_idx)
                past_key_values.is_updated[self.layer_idx] = True
            return q, k, v
        k = self._project(self.k_proj, hidden_states)  # (B, H, T, D)
        v = self._project(self.v_proj, hidden_states)  # (B, H, T, D)
        if past_key_values is not None:
            cache = past_key_values.self_attention_cache if encoder_decoder else past_key_values
            k, v = cache.update(k, v, self.layer_idx)  # (B, H, P + T, D) each
        return q, k, v

    def unpadded_queries_keys_values(self, hidden_states):
        """Unpadded encoder tokens (N, C) -> q, k, v (N, H, D) (self-attention, no cache)."""
        tokens = hidden_states.shape[0]
        return tuple(proj(hidden_states).view(tokens, self.num_heads, self.head_dim)
                     for proj in (self.q_proj, self.k_proj, self.v_proj))


# The output class of a head over an encoder-decoder, as transformers' T5/BART heads return it.
SEQ2SEQ_OUTPUT_CLASSES = {
    SequenceClassifierOutput: Seq2SeqSequenceClassifierOutput,
    QuestionAnsweringModelOutput: Seq2SeqQuestionAnsweringModelOutput,
}


class DecoderInputsFromInputs:
    """Mixin (before a `models.heads` head) for encoder-decoder classification and QA heads: the decoder
    runs on the input shifted right unless decoder inputs are given, and the head reads the decoder side.

    The output is transformers' `Seq2SeqSequenceClassifierOutput` / `Seq2SeqQuestionAnsweringModelOutput`
    with the fields the reference fills: the decoder's hidden states and self- and cross-attentions, the
    encoder's last hidden state, hidden states and attentions, and the decoder's self- and cross-attention
    cache (`cache`, alias `past_key_values`) when the forward computes no loss. The cache follows the
    backbone's `use_cache` default (`config.use_cache`, in eval mode; the reference also builds one in
    training mode without labels).
    """

    def encode(self, **inputs):
        if inputs.get("decoder_input_ids") is None and inputs.get("decoder_inputs_embeds") is None:
            if inputs.get("input_ids") is None:
                raise ValueError(f"{type(self).__name__} needs `input_ids` (its decoder reads them shifted right) "
                                 f"or explicit `decoder_input_ids`.")
            check_id_dtype("input_ids", inputs["input_ids"])
            inputs["decoder_input_ids"] = shift_tokens_right(inputs["input_ids"], self.config.pad_token_id,
                                                             self.config.decoder_start_token_id)
        return super().encode(**inputs)  # a Seq2SeqModelOutput: `last_hidden_state` is the decoder's

    def task_output(self, output_class, backbone_output, **results):
        out = backbone_output
        return SEQ2SEQ_OUTPUT_CLASSES[output_class](
            **results, cache=out.cache if results.get("loss") is None else None,  # the reference: none with a loss
            decoder_hidden_states=out.decoder_hidden_states, decoder_attentions=out.decoder_attentions,
            cross_attentions=out.cross_attentions, encoder_last_hidden_state=out.encoder_last_hidden_state,
            encoder_hidden_states=out.encoder_hidden_states, encoder_attentions=out.encoder_attentions,
        )


class EosClassifier(nn.Module):
    """dropout -> dense -> tanh -> dropout -> out_proj: the sentence classifier of T5 and BART, applied to
    the decoder state at each row's last <eos>."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, num_outputs)

    def forward(self, x):
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(x)))))  # (B, num_outputs)


class Seq2SeqLMHead(TaskHead, CheckedGenerationMixin):
    """Encoder-decoder language model: backbone, then `lm_head` over the decoder output; `generate()`.

    Labels (B, T) are the target ids (-100 where nothing is predicted); without `decoder_input_ids` the
    decoder reads the labels shifted right (`shift_tokens_right`). In training mode with labels and
    `config.chunked_lm_loss` (default True) the loss is computed chunk by chunk and `logits` is None.
    """

    accepts_loss_kwargs = True  # `num_items_in_batch` is honoured (Trainer's gradient accumulation)

    def __init__(self, config):
        if config.tie_word_embeddings:  # the backbone's token embeddings are `shared` (T5, BART)
            self._tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
        super().__init__(config)
        self.lm_head = self.build_lm_head(config)
        self.post_init()

    # Hooks ----------------------------------------------------------------------------------------
    def build_lm_head(self, config) -> nn.Module:
        return nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def decoder_output_scale(self) -> float | None:
        """Factor applied to the decoder output before `lm_head` (None: none)."""
        return None

    def logits_bias(self) -> torch.Tensor | None:
        """(V,) tensor added to the logits (None: none)."""
        return None

    def generation_position_limit(self) -> int | None:
        return getattr(self.config, "max_position_embeddings", None)

    # transformers interface -----------------------------------------------------------------------
    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_encoder(self, modality=None):
        return self.model.get_encoder()

    def get_decoder(self):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor):
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, inputs_embeds=None, decoder_inputs_embeds=None,
                labels=None, use_cache=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                num_items_in_batch=None, logits_to_keep=0, cache=None, **kwargs):
        """`labels` (B, T): target ids, -100 where nothing is predicted. `cache` is transformers 5's name
        for `past_key_values` (what `generate` passes)."""
        past_key_values = cache if cache is not None else past_key_values
        check_decoder_inputs(decoder_input_ids, decoder_inputs_embeds, labels)
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
            past_key_values=past_key_values, inputs_embeds=inputs_embeds, decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache, output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            return_dict=True, **kwargs,
        )
        hidden_states = out.last_hidden_state  # (B, T, C)
        scale = self.decoder_output_scale()
        if scale is not None:
            hidden_states = hidden_states * scale
        chunked = getattr(self.config, "chunked_lm_loss", True) and self.training and labels is not None
        logits, loss = lm_logits_and_loss(
            self.lm_head, hidden_states, labels, shift=False, logits_to_keep=logits_to_keep,
            num_items_in_batch=num_items_in_batch, return_logits=not chunked, logits_bias=self.logits_bias(),
        )
        return self.finish(Seq2SeqLMOutput(
            loss=loss, logits=logits, cache=out.cache, decoder_hidden_states=out.decoder_hidden_states,
            decoder_attentions=out.decoder_attentions, cross_attentions=out.cross_attentions,
            encoder_last_hidden_state=out.encoder_last_hidden_state, encoder_hidden_states=out.encoder_hidden_states,
            encoder_attentions=out.encoder_attentions,
        ), return_dict)
