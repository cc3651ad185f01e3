"""What every decoder language model shares: cache and position plumbing for the backbone, the
causal-LM head, and argument checks in front of `generate()`.

Three layers, each usable on its own (GPT uses all three; an encoder-decoder's decoder uses the first,
its `ForConditionalGeneration` the second's loss function and the third):

1. Backbone plumbing, called at the top of a decoder's `forward`:
   - `prepare_cache(past_key_values, use_cache, config, cross_attention=False)`: a
     `DynamicCache(config=...)` when caching is asked for and none was given (an `EncoderDecoderCache`
     with `cross_attention`); tuple caches are rejected with a clear error. `cached_length(cache)`.
   - `check_decoder_mask(attention_mask, batch, past_length, seq_len)`: a 2-D mask covers cached and
     new tokens, a 4-D one is (B, 1, T, P + T); clear errors otherwise.
   - `decoder_position_ids(attention_mask, past_length, seq_len)`: positions of the new tokens when the
     caller gave none. Without padding they are `past_length + arange(seq_len)`; with a 2-D mask each
     real token is numbered by the real tokens before it, so a left-padded row gets the positions it
     would have alone (transformers numbers left-padded rows from the first pad instead).
   - `packed_document_ids(position_ids, past_length)`: document ids when `position_ids` restart at 0
     inside a row (packed documents, `hf_xfmr.data` CLM packing), for a block-diagonal causal mask
     (`layers.masks.decoder_attention_mask`), so no token attends across documents.
   Inside attention, `k, v = past_key_values.update(k, v, layer_idx)`.

2. `lm_logits_and_loss(...)` and the `CausalLMHead` mixin: the next-token loss (labels are the
   inputs; shifted inside) computed by `layers.cross_entropy.linear_cross_entropy`, chunk by chunk,
   so training never holds the (B, T, V) logits; `logits_to_keep`; Trainer's `num_items_in_batch`.

3. `CheckedGenerationMixin`: transformers' `GenerationMixin` (greedy, sampling, beam search, ...)
   behind checks that turn impossible settings into errors naming the argument and the fix:
   `max_new_tokens` < 1, a prompt (plus the tokens to generate) longer than the position table,
   beam settings that cannot work.

Shapes: B batch, T new tokens, P cached tokens, C hidden size, V vocabulary.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..layers.cross_entropy import linear_cross_entropy
from ..layers.masks import document_ids_from_position_ids
from .heads import TaskHead, _input_shape
from .input_checks import check_attention_mask, check_labels_shape, check_tensor
from .losses import IGNORE_INDEX, mean_over_items, token_loss


# -- 1. backbone plumbing --------------------------------------------------------------------------
def prepare_cache(past_key_values, use_cache: bool, config, cross_attention: bool = False):
    """The cache a decoder forward should fill: the given one, a new `DynamicCache` when `use_cache`
    and none was given, else None. With `cross_attention` (encoder-decoders) a new cache is an
    `EncoderDecoderCache` (self-attention and cross-attention halves), and a plain one given is wrapped."""
    if past_key_values is not None and not isinstance(past_key_values, Cache):
        raise TypeError(
            f"`past_key_values` must be a transformers `Cache` (e.g. `DynamicCache`), got "
            f"{type(past_key_values).__name__}; tuples of (key, value) tensors are not supported. Pass the "
            f"`past_key_values` returned by the previous call, or `DynamicCache(config=model.config)`."
        )
    if use_cache and past_key_values is None:
        past_key_values = DynamicCache(config=config)
    if cross_attention and past_key_values is not None and not isinstance(past_key_values, EncoderDecoderCache):
        past_key_values = EncoderDecoderCache(past_key_values, DynamicCache(config=config))
    return past_key_values


def replayed_by_checkpointing(layers) -> bool:
    """True when gradient checkpointing will run `layers` again in the backward pass. A cache they wrote
    would be written a second time by the replay, so such a forward runs without one (as transformers'
    layers do; done here because transformers renamed the cache argument it clears between releases)."""
    first = layers[0] if len(layers) else None
    return (first is not None and first.training and torch.is_grad_enabled()
            and any(getattr(layer, "gradient_checkpointing", False) for layer in layers))


def cached_length(past_key_values) -> int:
    """Number of tokens already in the cache (0 without one)."""
    return 0 if past_key_values is None else past_key_values.get_seq_length()


def check_decoder_mask(attention_mask, batch: int, past_length: int, seq_len: int) -> None:
    """A 2-D mask must cover cached and new tokens and hold 0/1; a 4-D one must be (B or 1, 1, T, P + T)."""
    check_tensor("attention_mask", attention_mask)
    if attention_mask is None:
        return
    total = past_length + seq_len
    if attention_mask.dim() == 2:
        if tuple(attention_mask.shape) != (batch, total):
            cached = f" ({past_length} cached + {seq_len} new)" if past_length else ""
            raise ValueError(
                f"`attention_mask` has shape {tuple(attention_mask.shape)} but must be ({batch}, {total}){cached}: "
                f"one entry per token, the cached ones included (append a 1 per new token)."
            )
        check_attention_mask("attention_mask", attention_mask)
    elif attention_mask.dim() == 4:
        if attention_mask.shape[0] not in (1, batch) or tuple(attention_mask.shape[1:]) != (1, seq_len, total):
            raise ValueError(
                f"A 4-D `attention_mask` must have shape ({batch}, 1, {seq_len}, {total}) (True or 0.0 = may "
                f"attend), got {tuple(attention_mask.shape)}."
            )
    else:
        raise ValueError(
            f"`attention_mask` must be 2-D (batch, seq_len) or 4-D (batch, 1, seq_len, seq_len), got shape "
            f"{tuple(attention_mask.shape)}."
        )


def decoder_position_ids(attention_mask, past_length: int, seq_len: int, device) -> torch.Tensor:
    """Default positions of the T new tokens: (1, T) `past_length + arange(T)`, or (B, T) from a 2-D
    mask where each real token's position is the number of real tokens before it.

    For unpadded and right-padded rows both are the same numbers (pads keep their index), so outputs
    equal transformers' there; for left-padded rows the real tokens start at 0, as they would alone.
    """
    index = torch.arange(past_length + seq_len, device=device)  # (P + T,)
    if attention_mask is None or attention_mask.dim() != 2:
        return index[past_length:].unsqueeze(0)  # (1, T)
    real = attention_mask.bool()  # (B, P + T)
    counted = real.long().cumsum(-1) - 1  # (B, P + T): real tokens before and including this one, minus 1
    return torch.where(real, counted, index)[:, past_length:]  # (B, T)


def packed_document_ids(position_ids, past_length: int):
    """(B, T) document ids when `position_ids` restart at 0 after the first token of a row (documents
    packed into one row), else None. Only for a forward without cached tokens."""
    if position_ids is None or past_length > 0 or position_ids.shape[-1] < 2:
        return None
    if not torch.compiler.is_compiling() and not bool((position_ids[:, 1:] == 0).any()):
        return None
    return document_ids_from_position_ids(position_ids)  # (B, T)


# -- 2. the causal-LM head -------------------------------------------------------------------------
def keep_positions(hidden_states: torch.Tensor, logits_to_keep) -> torch.Tensor:
    """The positions whose logits are wanted: all for 0, the last n for an int n, or the given indices
    (a 1-D tensor along T), as transformers' `logits_to_keep`."""
    if isinstance(logits_to_keep, int):
        return hidden_states if logits_to_keep == 0 else hidden_states[:, -logits_to_keep:]
    return hidden_states[:, logits_to_keep]


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) labels -> (B, T) targets of each position: the next label, -100 at the end.

    Padding the end (rather than dropping the last hidden state) keeps the hidden states as they are:
    no copy of the (B, T, C) activations, and the ignored last row contributes nothing.
    """
    return torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def lm_logits_and_loss(lm_head: nn.Module, hidden_states, labels=None, *, shift: bool = True, logits_to_keep=0,
                       num_items_in_batch=None, return_logits: bool = True, logits_bias=None):
    """Logits and loss of a language-model head over (B, T, C) hidden states.

    Args:
        lm_head: the vocabulary projection. When it is a plain `nn.Linear` the loss is computed chunk by
            chunk from its weight (`linear_cross_entropy`) whenever the full logits are not needed, so
            the (B, T, V) logits and their gradient never exist; any other module (e.g. a PEFT wrapper)
            is called and the loss taken from its logits.
        labels: (B, T) target ids, -100 where nothing is predicted.
        shift: next-token prediction (position t predicts `labels[t + 1]`): decoder-only LMs. False for
            encoder-decoders, whose decoder inputs are already the labels shifted right.
        logits_to_keep: which positions get logits (`keep_positions`); the loss always covers all.
        num_items_in_batch: divide the summed loss by this (Trainer's count over gradient-accumulation
            micro-batches) instead of by the number of targets in this batch.
        return_logits: False skips the logits unless `logits_to_keep` asks for some (training).
        logits_bias: optional (V,) tensor added to the logits (BART's `final_logits_bias`).

    Returns (logits (B, T', V) or None, loss or None). Loss: mean cross-entropy over targets != -100,
    0 (not NaN) when there is none.
    """
    wants_all = isinstance(logits_to_keep, int) and logits_to_keep == 0
    logits = None
    if return_logits or not wants_all:
        logits = lm_head(keep_positions(hidden_states, logits_to_keep))  # (B, T', V)
        if logits_bias is not None:
            logits = logits + logits_bias
    if labels is None:
        return logits, None
    targets = shift_labels(labels) if shift else labels  # (B, T)
    if logits is not None and wants_all:
        return logits, token_loss(logits, targets, num_items_in_batch)
    if type(lm_head) is nn.Linear:
        bias = lm_head.bias
        if logits_bias is not None:
            bias = logits_bias if bias is None else bias + logits_bias
        total = linear_cross_entropy(hidden_states, lm_head.weight, bias, targets)
        return logits, mean_over_items(total, targets, num_items_in_batch)
    full = lm_head(hidden_states) if logits_bias is None else lm_head(hidden_states) + logits_bias
    return logits, token_loss(full, targets, num_items_in_batch)


class CheckedGenerationMixin(GenerationMixin):
    """transformers' `GenerationMixin` with its arguments checked first (see `check_generate_arguments`).

    A model may override `generation_position_limit()`: the size of the position table that prompt
    and generated tokens share (None: no limit, e.g. relative positions).
    """

    @classmethod
    def can_generate(cls) -> bool:
        return True

    def generation_position_limit(self) -> int | None:
        return getattr(self.config, "max_position_embeddings", None)

    def generate(self, inputs=None, generation_config=None, **kwargs):
        check_generate_arguments(self, inputs, generation_config, kwargs)
        return super().generate(inputs, generation_config, **kwargs)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_generate_arguments(model, inputs, generation_config, kwargs: dict) -> None:
    """Raise a ValueError naming the argument and the fix for settings `generate()` cannot honour.

    Reads each setting from `kwargs`, else `generation_config`, else the model's generation config.
    """
    config = generation_config if generation_config is not None else model.generation_config

    def setting(name):
        return kwargs[name] if kwargs.get(name) is not None else getattr(config, name, None)

    max_new_tokens = setting("max_new_tokens")
    if max_new_tokens is not None and (not _is_count(max_new_tokens) or max_new_tokens < 1):
        raise ValueError(
            f"`max_new_tokens` must be a positive integer (how many tokens to generate), got {max_new_tokens!r}; "
            f"pass e.g. max_new_tokens=20."
        )
    num_beams = setting("num_beams") if setting("num_beams") is not None else 1
    if not _is_count(num_beams) or num_beams < 1:
        raise ValueError(f"`num_beams` must be a positive integer (1 = no beam search), got {num_beams!r}.")
    num_return = setting("num_return_sequences") if setting("num_return_sequences") is not None else 1
    if not _is_count(num_return) or num_return < 1:
        raise ValueError(f"`num_return_sequences` must be a positive integer, got {num_return!r}.")
    if num_return > num_beams and not setting("do_sample"):
        raise ValueError(
            f"`num_return_sequences`={num_return} needs `num_beams` >= {num_return} (beam search returns its best "
            f"beams) or `do_sample=True` (independent samples); greedy search has only one answer."
        )
    groups = setting("num_beam_groups")
    if _is_count(groups) and groups > 1 and num_beams % groups:
        raise ValueError(f"`num_beams`={num_beams} must be divisible by `num_beam_groups`={groups}.")

    limit = model.generation_position_limit()
    if limit is None:
        return
    prompt_len, padded_len = _prompt_length(model, inputs, kwargs)
    if prompt_len > limit:
        raise ValueError(
            f"The prompt has {prompt_len} tokens but the model has only {limit} positions "
            f"(`max_position_embeddings`); truncate it, e.g. tokenizer(..., truncation=True, "
            f"max_length={limit - 1}), leaving room for the tokens to generate."
        )
    if max_new_tokens is not None:
        new_tokens = max_new_tokens
    else:
        max_length = setting("max_length")
        new_tokens = max_length - padded_len if max_length is not None else 0
    # The last generated token is never fed back, so generating n tokens uses prompt + n - 1 positions.
    if new_tokens > 0 and prompt_len + new_tokens - 1 > limit:
        most = limit - prompt_len + 1
        name = "max_new_tokens" if max_new_tokens is not None else "max_length"
        fix = f"max_new_tokens={most}" if max_new_tokens is not None else f"max_length={padded_len + most}"
        raise ValueError(
            f"Generating {new_tokens} tokens after a {prompt_len}-token prompt needs {prompt_len + new_tokens - 1} "
            f"positions but the model has {limit} (`max_position_embeddings`); lower `{name}` ({fix}) or "
            f"shorten the prompt."
        )


def _prompt_length(model, inputs, kwargs) -> tuple[int, int]:
    """(positions the prompt takes, its padded length) for the position-table check.

    Decoder-only: the longest row of real tokens (left padding does not use positions) plus any
    cached tokens. Encoder-decoder: the decoder prompt only (the start token unless given).
    """
    given = kwargs.get("cache", kwargs.get("past_key_values"))
    cached = cached_length(given) if isinstance(given, Cache) else 0
    if getattr(model.config, "is_encoder_decoder", False):
        decoder_ids = kwargs.get("decoder_input_ids")
        length = 1 if decoder_ids is None else decoder_ids.shape[-1]
        return length, length
    prompt = inputs if inputs is not None else kwargs.get("input_ids", kwargs.get("inputs_embeds"))
    if prompt is None:
        return 1, 1  # generate() starts from the BOS token
    padded = prompt.shape[1]
    mask = kwargs.get("attention_mask")
    real = int(mask.sum(-1).max()) if mask is not None and mask.dim() == 2 and mask.numel() else padded
    # A mask over cached + new tokens already counts the cached ones.
    return (real if mask is not None and mask.dim() == 2 else real + cached), padded


class CausalLMHead(TaskHead, CheckedGenerationMixin):
    """Decoder language model: the backbone, then `lm_head` (hidden -> vocabulary), plus `generate()`.

    Labels are the input ids (-100 where nothing is predicted); the model shifts them, so position t
    is trained to predict token t + 1. In training mode with labels, and `config.chunked_lm_loss`
    (default True), the loss is computed chunk by chunk from the hidden states and `lm_head.weight`
    and `logits` is None (unless `logits_to_keep` asks for some): the (B, T, V) logits and their
    gradient are never formed, the largest tensors of LM training. In eval mode (Trainer.evaluate,
    predict, pipelines) the logits are returned as usual.

    The backbone's forward must accept `past_key_values` and `use_cache` and return them in its
    output (see the plumbing above). Override `build_lm_head(config)` for another projection
    (default: a bias-free linear layer, tied to the input embeddings when `tie_word_embeddings`).
    """

    accepts_loss_kwargs = True  # `num_items_in_batch` is honoured (Trainer's gradient accumulation)
    shift_labels = True

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = self.build_lm_head(config)
        self.post_init()

    def build_lm_head(self, config) -> nn.Module:
        return nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                past_key_values=None, inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0,
                output_attentions=None, output_hidden_states=None, return_dict=None, num_items_in_batch=None,
                cache=None, **kwargs):
        """`labels` (B, T): usually the input ids, -100 on padding; shifted inside the model. `cache` is
        transformers 5.24's name for `past_key_values` (what `generate` passes)."""
        past_key_values = cache if cache is not None else past_key_values
        check_labels_shape("labels", labels, _input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, past_key_values=past_key_values, inputs_embeds=inputs_embeds,
                          use_cache=use_cache, output_attentions=output_attentions, token_labels=labels,
                          output_hidden_states=output_hidden_states, **kwargs)
        chunked = getattr(self.config, "chunked_lm_loss", True) and self.training and labels is not None
        logits, loss = lm_logits_and_loss(
            self.lm_head, out.last_hidden_state, labels, shift=self.shift_labels, logits_to_keep=logits_to_keep,
            num_items_in_batch=num_items_in_batch, return_logits=not chunked,
        )
        return self.finish(CausalLMOutputWithPast(
            loss=loss, logits=logits, past_key_values=getattr(out, "past_key_values", None),
            hidden_states=out.hidden_states, attentions=out.attentions), return_dict)
