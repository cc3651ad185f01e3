"""The causal language-model head: the backbone's hidden states -> vocabulary logits and the
next-token loss, plus `generate()`.

- `lm_logits_and_loss(...)`: logits of the wanted positions (`keep_positions`, transformers'
  `logits_to_keep`) and the loss over (shifted, `shift_labels`) labels, computed chunk by chunk by
  `layers.cross_entropy.linear_cross_entropy` when the head is a plain linear layer, so training never
  holds the (B, T, V) logits; Trainer's `num_items_in_batch`. Encoder-decoders use it unshifted.
- `CausalLMHead`: the task-head mixin of every decoder LM (GPT, BART's decoder), with
  `generation.CheckedGenerationMixin` in front of transformers' `generate()`.

Shapes: B batch, T tokens, T' positions kept, C hidden size, V vocabulary.
"""

import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..layers.cross_entropy import linear_cross_entropy
from .generation import CheckedGenerationMixin
from .heads import TaskHead, input_shape
from .input_checks import check_labels_shape
from .losses import IGNORE_INDEX, mean_over_items, token_loss


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


# Decoding on a CPU: at most this many rows and at least this many vocabulary entries take the transposed product.
SKINNY_ROWS, LARGE_VOCABULARY = 64, 8192


def project_to_vocabulary(lm_head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """`lm_head(hidden)`: (..., C) -> (..., V). A generation step projects a few rows onto a large vocabulary, a
    product bound by reading the (V, C) weight; on a CPU, without autograd, it runs as (W @ h^T)^T, the same
    products, which the CPU BLAS streams ~1.7x faster than h @ W^T for a skinny h (8 x 256 against 32,000 x 256:
    4.3 ms vs 7.4 ms on 2 threads)."""
    rows = hidden.numel() // max(1, hidden.shape[-1])
    if (type(lm_head) is not nn.Linear or hidden.device.type != "cpu" or torch.is_grad_enabled()
            or rows > SKINNY_ROWS or lm_head.out_features < LARGE_VOCABULARY):
        return lm_head(hidden)
    weight, bias = lm_head.weight, lm_head.bias
    logits = torch.matmul(weight, hidden.reshape(rows, -1).t()).t()  # (rows, V)
    if bias is not None:
        logits = logits + bias
    return logits.reshape(*hidden.shape[:-1], weight.shape[0])


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
        logits = project_to_vocabulary(lm_head, keep_positions(hidden_states, logits_to_keep))  # (B, T', V)
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


class CausalLMHead(TaskHead, CheckedGenerationMixin):
    """Decoder language model: the backbone, then `lm_head` (hidden -> vocabulary), plus `generate()`.

    Labels are the input ids (-100 where nothing is predicted); the model shifts them, so position t
    is trained to predict token t + 1. In training mode with labels, and `config.chunked_lm_loss`
    (default True), the loss is computed chunk by chunk from the hidden states and `lm_head.weight`
    and `logits` is None (unless `logits_to_keep` asks for some): the (B, T, V) logits and their
    gradient are never formed, the largest tensors of LM training. In eval mode (Trainer.evaluate,
    predict, pipelines) the logits are returned as usual.

    The backbone's forward must accept `past_key_values` and `use_cache` and return them in its
    output (see `generation.prepare_cache`). Override `build_lm_head(config)` for another projection
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
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
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
            loss=loss, logits=logits, cache=getattr(out, "cache", None),
            hidden_states=out.hidden_states, attentions=out.attentions), return_dict)
