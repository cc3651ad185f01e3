"""Compiled steps (`--compile` on pretrain and finetune): a model's forward compiled in place by `torch.compile`
with dynamic shapes, falling back to the eager forward (with one warning) when it cannot compile."""

import functools
import warnings

import torch

from ..layers.bf16_products import bf16_products_wanted

class CompileFallbackWarning(UserWarning):
    """`--compile` was asked for, but torch.compile cannot compile the model: it runs eagerly."""


class CompiledForward:
    """A model's `forward` compiled by `torch.compile` with dynamic shapes, falling back to the eager forward.

    `dynamic=True` traces every dimension symbolically from the first call, so batches of another length (and,
    for models that unpad behind a graph break, another number of real tokens) reuse the graphs compiled for the
    first batch instead of recompiling. A compilation error (a `TorchDynamoException`: dynamo cannot trace the
    model, or the backend fails to build it) is not the run's end, and neither is a model that recompiles for
    batch after batch (dynamo's `recompile_limit`, 8 by default, reached: its guards depend on the data): the same
    call runs eagerly and, if that succeeds, the model stays eager for good, with one `CompileFallbackWarning`
    naming the model and the reason. When the eager call fails too, the inputs are at fault and its error is
    raised as it is.
    """

    def __init__(self, model: torch.nn.Module, backend: str = "inductor"):
        self.eager = model.forward
        self.model_name = type(model).__name__
        self.backend = backend
        self.compiled = torch.compile(self.eager, backend=backend, dynamic=True)
        self.error: BaseException | None = None  # the compilation error, once the model fell back to eager
        self.said_bf16 = False  # the bf16-autocast fallback was announced
        functools.update_wrapper(self, self.eager)  # the forward's signature and docstring (Trainer reads them)

    def __call__(self, *args, **kwargs):
        if self.error is not None:
            return self.eager(*args, **kwargs)
        if bf16_products_wanted():
            # The compiled graph would run torch's bf16 kernels, the slow ones on this CPU (4-9x the eager step,
            # whose products run on the fp32 kernels: layers.bf16_products): bf16 autocast steps stay eager.
            if not self.said_bf16:
                self.said_bf16 = True
                warnings.warn(f"--compile: {self.model_name} runs eagerly under bf16 autocast on this CPU: its "
                              f"products run on the fp32 kernels there (no AMX; see HF_XFMR_BF16_PRODUCTS), which a "
                              f"compiled graph cannot use; compiled, its bf16 step would take 4-9x as long. fp32 "
                              f"steps are compiled.", CompileFallbackWarning, stacklevel=2)
            return self.eager(*args, **kwargs)
        from torch._dynamo import config, exc

        try:
            with config.patch(fail_on_recompile_limit_hit=True):
                return self.compiled(*args, **kwargs)
        except (exc.TorchDynamoException, exc.FailOnRecompileLimitHit) as err:
            outputs = self.eager(*args, **kwargs)
            self.error = err
            if isinstance(err, exc.FailOnRecompileLimitHit):
                reason = (f"it recompiled for every new batch until torch._dynamo.config.recompile_limit "
                          f"({config.recompile_limit}) was reached: its graphs depend on the data")
            else:  # a backend's failure names its own error as the cause
                cause = getattr(err, "inner_exception", None) or err.__cause__ or err
                first_line = (str(cause).strip().splitlines() or [""])[0][:300]
                reason = f"{type(err).__name__}" + (f", {type(cause).__name__}" if cause is not err else "") + \
                    f": {first_line}"
            warnings.warn(f"--compile: torch.compile (backend {self.backend!r}) cannot compile {self.model_name} "
                          f"({reason}); it runs eagerly instead.", CompileFallbackWarning, stacklevel=2)
            return outputs


def compile_model(model: torch.nn.Module, backend: str = "inductor") -> torch.nn.Module:
    """Compile `model`'s forward in place (`CompiledForward`: dynamic shapes, eager fallback) and return it.

    In place, so the module, its parameter names and its state dict stay what they were (no `_orig_mod.`
    prefix): checkpoints, DDP / DeepSpeed wrapping and `save_pretrained` see the plain model. Compilation happens
    at the first call. The unpadding helpers read the attention mask to the host (`.tolist()` in
    `layers.padding`); under torch.compile the encoders take the padded layout instead (the one decision per
    forward is skipped while compiling), and a model that always unpads (ModernBERT) breaks the graph there.
    Calling it again on a compiled model changes nothing. An unknown `backend` raises a ValueError listing them."""
    if not isinstance(model.forward, CompiledForward):
        try:
            model.forward = CompiledForward(model, backend)
        except torch._dynamo.exc.InvalidBackend:
            raise ValueError(f"--compile_backend {backend!r} is not a torch.compile backend; choose one of "
                             f"{', '.join(torch._dynamo.list_backends())} (inductor: the fast one).") from None
    return model


def compiled_forward(model: torch.nn.Module) -> CompiledForward | None:
    """The `CompiledForward` of a model `compile_model` compiled (None for an eager model)."""
    forward = getattr(model, "forward", None)
    return forward if isinstance(forward, CompiledForward) else None
