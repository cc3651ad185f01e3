"""What every generating model shares: cache and position plumbing for a decoder backbone, and
argument checks in front of `generate()`. The causal-LM head and its loss live in `models/causal_lm.py`.

Two layers, each usable on its own (GPT uses both; an encoder-decoder's decoder the first, its
`ForConditionalGeneration` the second):

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

2. `CheckedGenerationMixin`: transformers' `GenerationMixin` (greedy, sampling, beam search, ...)
   behind checks that turn impossible settings into errors naming the argument and the fix:
   `max_new_tokens` < 1, a prompt (plus the tokens to generate) longer than the position table,
   beam settings that cannot work.

Shapes: B batch, T new tokens, P cached tokens, C hidden size, V vocabulary.
"""

import torch
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache

from ..layers.masks import document_ids_from_position_ids
from .input_checks import check_attention_mask, check_tensor


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


# -- 2. argument checks in front of generate() ---------------------------------------------------
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
