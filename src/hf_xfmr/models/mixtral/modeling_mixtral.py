"""Mixtral: the Llama decoder with a sparse mixture-of-experts feed-forward block in every layer.

Paper: Jiang et al., 2024, "Mixtral of Experts", https://arxiv.org/abs/2401.04088 (8 SwiGLU experts, top-2 routing);
the load-balancing loss is Fedus et al., 2021, "Switch Transformers", eqs. 4-6. Parity reference: transformers'
`MixtralModel`, `MixtralForCausalLM` and heads, through `convert_mixtral.py`.

Everything but the feed-forward block is the Llama family's (`models/llama/modeling_llama.py`): attention, RoPE,
unpadding, packed sequences, the cache; its docstring lists the deviations from transformers, which hold here too.
The MoE block is `layers.moe.SparseMoeBlock`: every expert runs in one grouped matrix product (no loop over
experts, the same modules on every rank whatever the routing, as ZeRO-3 needs).

Deviations specific to Mixtral:
- unpadded (the default), the router sees the real tokens only; the router logits returned
  (`output_router_logits`) are (B * T, E) per layer as in transformers, with zeros at padding positions. The
  load-balancing loss leaves padding out, as transformers' does given the 2-D attention mask; with a cache its
  mask is the one of the new tokens (transformers pairs the whole mask with the new tokens' logits and fails).
- the load-balancing loss is added to the LM loss only when labels are given and `output_router_logits` is on,
  as in transformers; the classification heads return no router logits (transformers' generic heads neither).

Shapes: B batch, T new tokens, C hidden size, E experts, N real (unpadded) tokens.
"""

import contextlib

from transformers import initialization as init
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast

from ...layers.init import normal_init_
from ...layers.moe import GroupedExperts, SparseMoeBlock, load_balancing_loss
from ..causal_lm import CausalLMHead, lm_logits_and_loss
from ..heads import (
    DecoderTokenClassificationHead,
    LastTokenClassificationHead,
    QuestionAnsweringHead,
    input_shape,
)
from ..input_checks import check_labels_shape
from ..llama.modeling_llama import XfmrLlamaLayer, XfmrLlamaModel
from ..pretrained import XfmrPreTrainedModel
from .configuration_mixtral import XfmrMixtralConfig


class XfmrMixtralLayer(XfmrLlamaLayer):
    """Pre-norm block: x = x + Attn(RMSNorm(x)); x = x + MoE(RMSNorm(x))."""

    def build_mlp(self, config):
        return SparseMoeBlock(config.hidden_size, config.intermediate_size, config.num_local_experts,
                              config.num_experts_per_tok, config.hidden_act, config.router_jitter_noise)


class XfmrMixtralPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrMixtralConfig
    _no_split_modules = ["XfmrMixtralLayer"]
    _skip_keys_device_placement = ["past_key_values"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, GroupedExperts):  # stacked parameters: no nn.Linear for normal_init_ to find
            init.normal_(module.gate_up_proj, mean=0.0, std=std)
            init.normal_(module.down_proj, mean=0.0, std=std)
        else:
            normal_init_(module, std)


@contextlib.contextmanager
def recorded_router_logits(model, record: bool):
    """Within the block, every layer's router output (N, E) is appended, in layer order, to the list yielded
    (nothing when not `record`). A forward hook on each router, as transformers records them; removed on exit,
    so a gradient-checkpointing replay in the backward adds nothing."""
    logits = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda module, args, output: logits.append(output))
             for layer in model.layers] if record else []
    try:
        yield logits
    finally:
        for hook in hooks:
            hook.remove()


def padded_router_logits(logits, attention_mask, batch: int, seq_len: int):
    """Each layer's (N, E) router logits as (B * T, E), in the order transformers returns them: unchanged when
    the router saw every position, else the real tokens (those the (B, T) mask keeps) scattered, zeros elsewhere."""
    if not logits or logits[0].shape[0] == batch * seq_len:
        return tuple(logits)
    keep = attention_mask[:, -seq_len:].reshape(-1).bool()  # (B * T,)
    out = []
    for layer_logits in logits:
        full = layer_logits.new_zeros(batch * seq_len, layer_logits.shape[-1])  # (B * T, E)
        out.append(full.masked_scatter(keep.unsqueeze(-1), layer_logits))
    return tuple(out)


class XfmrMixtralModel(XfmrMixtralPreTrainedModel, XfmrLlamaModel):
    """The Llama decoder built of `XfmrMixtralLayer`s; returns the router logits on request."""

    layer_class = XfmrMixtralLayer

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                output_router_logits=None, return_dict=None, **packed):
        """As `XfmrLlamaModel.forward`; `output_router_logits` (default: the config's) adds `router_logits`, one
        (B * T, E) tensor per layer."""
        record = self.config.output_router_logits if output_router_logits is None else output_router_logits
        with recorded_router_logits(self, record) as logits:
            out = super().forward(input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, use_cache,
                                  output_attentions, output_hidden_states, return_dict=True, **packed)
        batch, seq_len = out.last_hidden_state.shape[:2]
        output = MoeModelOutputWithPast(
            last_hidden_state=out.last_hidden_state, cache=out.cache, hidden_states=out.hidden_states,
            attentions=out.attentions,
            router_logits=padded_router_logits(logits, attention_mask, batch, seq_len) if record else None,
        )
        return output if self.output_flags(None, None, return_dict)[2] else output.to_tuple()


def aux_loss_mask(attention_mask, seq_len: int):
    """The (B, T) mask of the new tokens for the load-balancing loss: a 2-D mask's last T columns, else None."""
    if attention_mask is None or attention_mask.dim() != 2:
        return None
    return attention_mask[:, -seq_len:]


# -- heads (shared machinery in models/heads.py and models/causal_lm.py) -----------------------------
class XfmrMixtralForCausalLM(CausalLMHead, XfmrMixtralPreTrainedModel):
    """Language model with `generate()`; with `output_router_logits`, the load-balancing loss (`aux_loss`) is
    returned and, with labels, added to the LM loss times `router_aux_loss_coef`, as transformers does."""

    base_model_class = XfmrMixtralModel
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def generation_position_limit(self):
        return None  # rotary positions: no table to run out of

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, logits_to_keep=0, output_attentions=None,
                output_hidden_states=None, output_router_logits=None, return_dict=None, num_items_in_batch=None,
                cache=None, **kwargs):
        """`labels` (B, T): usually the input ids, -100 on padding; shifted inside the model. `cache` is
        transformers 5.24's name for `past_key_values` (what `generate` passes)."""
        config = self.config
        record = config.output_router_logits if output_router_logits is None else output_router_logits
        past_key_values = cache if cache is not None else past_key_values
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states,
                          output_router_logits=record, token_labels=labels, **kwargs)
        chunked = config.chunked_lm_loss and self.training and labels is not None
        logits, loss = lm_logits_and_loss(
            self.lm_head, out.last_hidden_state, labels, shift=True, logits_to_keep=logits_to_keep,
            num_items_in_batch=num_items_in_batch, return_logits=not chunked,
        )
        aux_loss = None
        if record:
            seq_len = out.last_hidden_state.shape[1]
            aux_loss = load_balancing_loss(out.router_logits, config.num_experts_per_tok, config.num_local_experts,
                                           aux_loss_mask(attention_mask, seq_len))
            if loss is not None:
                loss = loss + config.router_aux_loss_coef * aux_loss
        return self.finish(MoeCausalLMOutputWithPast(
            loss=loss, aux_loss=aux_loss, logits=logits, cache=out.cache, hidden_states=out.hidden_states,
            attentions=out.attentions, router_logits=out.router_logits), return_dict)


class XfmrMixtralForSequenceClassification(LastTokenClassificationHead, XfmrMixtralPreTrainedModel):
    base_model_class = XfmrMixtralModel


class XfmrMixtralForTokenClassification(DecoderTokenClassificationHead, XfmrMixtralPreTrainedModel):
    base_model_class = XfmrMixtralModel


class XfmrMixtralForQuestionAnswering(QuestionAnsweringHead, XfmrMixtralPreTrainedModel):
    base_model_class = XfmrMixtralModel


__all__ = [
    "XfmrMixtralPreTrainedModel",
    "XfmrMixtralModel",
    "XfmrMixtralForCausalLM",
    "XfmrMixtralForSequenceClassification",
    "XfmrMixtralForTokenClassification",
    "XfmrMixtralForQuestionAnswering",
]
