"""What the model cases share: ours is the transformers reference converted by `hf_xfmr.from_transformers`
(identical weights), and generation is timed as one step by wrapping `generate` in a module.

    build_pair = converted_pair(lambda: transformers.GPT2LMHeadModel(config), chunked_lm_loss=True)
    case = converted_case("gpt-clm-train", build_ref, make_batch, settings, description, chunked_lm_loss=True)
    case = generation_case("gpt-generate", build_ref, make_batch, new_tokens=128, device="cpu", description=...)
"""

from collections.abc import Callable
from typing import Any

from torch import nn

from .harness import BenchCase, case_sizes, dtype_from_name

# What an encoder-decoder's generation case takes besides its sizes. `target` (the training case's label
# length) is accepted and unused, so that one set of overrides serves both cases of an architecture.
SEQ2SEQ_GENERATE_SETTINGS = dict(target=0, new_tokens=64, device="cpu", seed=0)


def converted_pair(build_ref: Callable[[], nn.Module], *, task: str | None = None,
                   **config: Any) -> Callable[[], tuple[nn.Module, nn.Module]]:
    """A `BenchCase.build_pair`: the reference from `build_ref()`, ours converted from it (`task` as given to
    `from_transformers`, else the reference's own), then each of `config` set on ours' config
    (e.g. `sparse_prediction=False`: what the case compares)."""

    def build_pair() -> tuple[nn.Module, nn.Module]:
        import hf_xfmr

        ref = build_ref()
        ours = hf_xfmr.from_transformers(ref) if task is None else hf_xfmr.from_transformers(ref, task=task)
        for name, value in config.items():
            setattr(ours.config, name, value)
        return ours, ref

    return build_pair


def converted_case(name: str, build_ref: Callable[[], nn.Module], make_batch: Callable[[], dict],
                   settings: dict[str, Any], description: str, *, task: str | None = None,
                   loss_fn: Callable | None = None, **config: Any) -> BenchCase:
    """A case comparing `build_ref()` with ours converted from it (see `converted_pair`).

    `settings` holds the case's `device`, `dtype` ("fp32" or an autocast dtype name) and `mode` (default
    "train"); `config` is set on ours' config.
    """
    return BenchCase(
        name=name, build_pair=converted_pair(build_ref, task=task, **config), make_batch=make_batch,
        mode=settings.get("mode", "train"), autocast_dtype=dtype_from_name(settings["dtype"]),
        device=settings["device"], loss_fn=loss_fn, description=description,
    )


class Generate(nn.Module):
    """Calls `model.generate(**batch, **settings)` from `forward`, so the harness can time generation.
    `wrapped` is the model (the harness tests look through it)."""

    def __init__(self, model, **settings):
        super().__init__()
        self.wrapped = model
        self.settings = settings

    def forward(self, **batch):
        return self.wrapped.generate(**batch, **self.settings)


def greedy_settings(new_tokens: int) -> dict[str, Any]:
    """`generate` keywords for exactly `new_tokens` greedy tokens (no early stop: both sides do the same work)."""
    return dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1)


def generation_case(name: str, build_ref: Callable[[], nn.Module], make_batch: Callable[[], dict], *,
                    new_tokens: int, device: str, description: str) -> BenchCase:
    """Greedy generation of `new_tokens` tokens by the reference and by ours converted from it (fp32, inference)."""
    convert = converted_pair(build_ref)
    settings = greedy_settings(new_tokens)

    def build_pair():
        ours, ref = convert()
        return Generate(ours, **settings), Generate(ref, **settings)

    return BenchCase(name=name, build_pair=build_pair, make_batch=make_batch, mode="infer", device=device,
                     description=description)


def seq2seq_generation_case(name: str, model_name: str, sizes: dict[str, Any], overrides: dict[str, Any],
                            reference: Callable[[dict], nn.Module], make_batch: Callable[[dict], dict]) -> BenchCase:
    """Greedy generation by an encoder-decoder (BART, T5): the encoder once, then the decoder with its
    self-attention cache and cached cross-attention keys/values. `sizes` (with `d_model`, `layers`, `vocab`,
    `batch`, `seq`) and `SEQ2SEQ_GENERATE_SETTINGS` changed by `overrides` are given, resolved, to
    `reference` and `make_batch`."""
    s = case_sizes(name, {**sizes, **SEQ2SEQ_GENERATE_SETTINGS}, overrides)
    return generation_case(
        name, lambda: reference(s), lambda: make_batch(s), new_tokens=s["new_tokens"], device=s["device"],
        description=(f"{model_name}.generate greedy, {s['new_tokens']} new tokens, input {s['batch']} x {s['seq']}; "
                     f"d_model {s['d_model']}, {s['layers']}+{s['layers']} layers, vocab {s['vocab']}"),
    )
