"""`XfmrPreTrainedModel`: the base every architecture's `Xfmr<Arch>PreTrainedModel` derives from.

It holds what was the same in all nine: the backbone under `model` (`base_model_prefix`), `input_ids` as
the main input, gradient checkpointing, the kernels (sdpa yes; flash-attn and flex no unless the
architecture says so), conversion of transformers checkpoints on load (`load_hook.ConvertsOnLoad`), the
default initialisation (`layers.init.normal_init_` with `config.initializer_range`) and the defaults of
the three output switches of a forward (`output_flags`). An architecture states its `config_class` and
`_no_split_modules` and overrides what differs. `collect` gathers the per-layer outputs a forward returns
on request.
"""

import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from ..layers.bf16_products import bf16_products, keep_bf16_products
from ..layers.init import normal_init_
from ..malloc import on_training_forward
from .load_hook import ConvertsOnLoad


def collect(collected: tuple | None, item) -> tuple | None:
    """`collected + (item,)`, or None when nothing is being collected (the output was not asked for): every
    stack's `output_hidden_states` / `output_attentions` tuples, one entry per layer."""
    return None if collected is None else collected + (item,)


def _in_machine_settings(forward):
    """A model class's `forward`, run inside `bf16_products()` (so the choice is made where autocast is already
    on, whoever entered it: a user around the call, or Accelerate and Trainer, which wrap the forward itself), and
    telling `malloc.on_training_forward` when the model trains."""

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        if self.training and torch.is_grad_enabled():
            on_training_forward(self)
        with bf16_products():
            return forward(self, *args, **kwargs)

    run.machine_settings = True
    return run


class XfmrPreTrainedModel(ConvertsOnLoad, PreTrainedModel):
    """Shared class attributes and defaults of the hf_xfmr models (see the module docstring)."""

    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = False  # padded batches would need unpadding (ModernBERT unpads and says True)
    _supports_flex_attn = False

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """True: every attention layer reads `config._attn_implementation` at each call and picks its kernel
        through `layers.attention.resolve_kernel` (transformers' AttentionInterface), so
        `set_attn_implementation` takes effect. (transformers guesses this from the modeling file's source,
        which names the interface only through `resolve_kernel`.)"""
        return True

    def __init_subclass__(cls, **kwargs):
        """Every model class's forward runs bf16 autocast's products through the fp32 kernels on CPUs without AMX
        (`layers.bf16_products`: the same bf16 results, at the fp32 kernels' speed), and the first forward that
        trains has the process keep freed memory for reuse (`hf_xfmr.malloc`)."""
        super().__init_subclass__(**kwargs)
        if cls.forward is not nn.Module.forward and not getattr(cls.forward, "machine_settings", False):
            cls.forward = _in_machine_settings(cls.forward)

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=checkpoint,
                                    every_n_layers: int = 1):
        """transformers' switch, with the replayed layers running their products as the forward ran them."""
        super()._set_gradient_checkpointing(enable, keep_bf16_products(gradient_checkpointing_func), every_n_layers)

    def _init_weights(self, module):
        normal_init_(module, self.config.initializer_range)

    @property
    def is_gradient_checkpointing(self) -> bool:
        """transformers 5's deprecated alias of `is_activation_checkpointing`, without its FutureWarning: PEFT
        reads this name whenever it wraps a model (`get_peft_model`), which is nothing a user can act on."""
        return any(getattr(m, "gradient_checkpointing", False) for m in self.modules())

    def output_flags(self, output_attentions, output_hidden_states, return_dict) -> tuple[bool, bool, bool]:
        """(output_attentions, output_hidden_states, return_dict) of a forward: each as given, else the config's."""
        config = self.config
        return (config.output_attentions if output_attentions is None else output_attentions,
                config.output_hidden_states if output_hidden_states is None else output_hidden_states,
                config.return_dict if return_dict is None else return_dict)
