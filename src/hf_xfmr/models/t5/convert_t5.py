"""T5 <-> transformers `T5*`: the only place that knows transformers' T5 key layout.

transformers nests each block's sub-layers as `block.{i}.layer.{k}` (k = 0 self-attention, 1 cross-
attention in the decoder, last the feed-forward block), keeps the relative bias table in block 0's
self-attention, stores the shared embedding three times (`shared`, `encoder.embed_tokens`,
`decoder.embed_tokens`, all tied), and keeps the backbone at the top level of `T5ForConditionalGeneration`
and `T5ForQuestionAnswering` but under `transformer.` in the classification heads. A gated
feed-forward block has two input matrices (`wi_0`, `wi_1`) where ours has one fused `up_proj`.

Tying: transformers 5 always ties T5's `lm_head` to `shared`; the config's `tie_word_embeddings=False`
only turns the d_model^-0.5 output scaling off, and a v1.1 checkpoint is untied only because its
`lm_head` weights differ after loading. So the head is read from the weights: ours is tied exactly when
transformers scales the output and `lm_head` equals `shared`.
"""

import re

import torch
from torch import nn

from ..conversion import Conversion, task_classes
from . import modeling_t5

TASKS = task_classes(modeling_t5, ("base", "seq2seq-lm", "encoder", "sequence-classification", "token-classification",
                                   "question-answering"), ours="T5")
# Where the backbone sits inside each model, on either side.
_HF_PREFIX = {"sequence-classification": "transformer.", "token-classification": "transformer."}
_OUR_PREFIX = {"base": "", "encoder": ""}
# Head parameters: (ours, theirs) key prefixes per task (full-model names).
_HEADS = {
    "seq2seq-lm": (("lm_head.", "lm_head."),),
    "sequence-classification": (("classifier.dense.", "classification_head.dense."),
                                ("classifier.out_proj.", "classification_head.out_proj."),),
    "token-classification": (("classifier.", "classifier."),),
    "question-answering": (("qa_outputs.", "qa_outputs."),),
}
_TIED_COPIES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")

_PROJ = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}
_HF_KEY = re.compile(
    r"^(?P<stack>encoder|decoder)\.block\.(?P<i>\d+)\.layer\.(?P<k>\d)\."
    r"(?:(?P<attn>SelfAttention|EncDecAttention)\.(?P<proj>[qkvo]|relative_attention_bias)"
    r"|(?P<ff>DenseReluDense)\.(?P<w>wi|wo|wi_0|wi_1)|(?P<norm>layer_norm))\.weight$"
)
_OUR_KEY = re.compile(
    r"^(?P<stack>encoder|decoder)\.layers\.(?P<i>\d+)\."
    r"(?P<part>attn|cross_attn|mlp|attn_norm|cross_attn_norm|mlp_norm)(?:\.(?P<proj>\w+))?\.weight$"
)


def _ff_index(stack: str) -> int:
    return 2 if stack == "decoder" else 1


def body_key_from_hf(key: str) -> str | None:
    """A backbone key of transformers -> ours (None if unknown). wi_0 / wi_1 map to `up_proj` halves,
    handled by the caller."""
    if key == "shared.weight":
        return key
    match = re.match(r"^(encoder|decoder)\.final_layer_norm\.weight$", key)
    if match:
        return f"{match[1]}.norm.weight"
    match = _HF_KEY.match(key)
    if match is None:
        return None
    stack, i, k = match["stack"], match["i"], int(match["k"])
    if match["proj"] == "relative_attention_bias":
        return f"{stack}.relative_attention_bias.weight"
    if match["attn"]:
        part = "cross_attn" if match["attn"] == "EncDecAttention" else "attn"
        return f"{stack}.layers.{i}.{part}.{_PROJ[match['proj']]}.weight"
    if match["ff"]:
        return f"{stack}.layers.{i}.mlp.{'down_proj' if match['w'] == 'wo' else 'up_proj'}.weight"
    part = {0: "attn_norm", 1: "cross_attn_norm" if stack == "decoder" else "mlp_norm", 2: "mlp_norm"}[k]
    return f"{stack}.layers.{i}.{part}.weight"


def body_key_to_hf(key: str, gated: bool) -> list[str] | None:
    """A backbone key of ours -> transformers' key(s) (two for a gated `up_proj`)."""
    if key == "shared.weight":
        return ["shared.weight", *_TIED_COPIES]
    match = re.match(r"^(encoder|decoder)\.(norm|relative_attention_bias)\.weight$", key)
    if match:
        stack = match[1]
        if match[2] == "norm":
            return [f"{stack}.final_layer_norm.weight"]
        return [f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    match = _OUR_KEY.match(key)
    if match is None:
        return None
    stack, i, part, proj = match["stack"], match["i"], match["part"], match["proj"]
    block = f"{stack}.block.{i}.layer"
    ff = _ff_index(stack)
    if part in ("attn", "cross_attn"):
        name = "SelfAttention" if part == "attn" else "EncDecAttention"
        k = 0 if part == "attn" else 1
        return [f"{block}.{k}.{name}.{proj[0]}.weight"]
    if part == "mlp":
        if proj == "down_proj":
            return [f"{block}.{ff}.DenseReluDense.wo.weight"]
        if gated:
            return [f"{block}.{ff}.DenseReluDense.wi_0.weight", f"{block}.{ff}.DenseReluDense.wi_1.weight"]
        return [f"{block}.{ff}.DenseReluDense.wi.weight"]
    k = {"attn_norm": 0, "cross_attn_norm": 1, "mlp_norm": ff}[part]
    return [f"{block}.{k}.layer_norm.weight"]


def _head_key(key: str, task: str, to_hf: bool) -> str | None:
    for ours, theirs in _HEADS.get(task, ()):
        src, dst = (ours, theirs) if to_hf else (theirs, ours)
        if key.startswith(src):
            return dst + key[len(src):]
    return None


class T5Conversion(Conversion):
    """The generic `Conversion` with T5's own key mapping (see the module docstring)."""

    # -- configs ---------------------------------------------------------------------------------
    def config_from_model(self, source_model):
        hf_config = source_model.config
        scaled = getattr(hf_config, "scale_decoder_outputs", True)
        tied = scaled
        lm_head = getattr(source_model, "lm_head", None)
        if lm_head is not None:
            shared = source_model.get_input_embeddings().weight
            same = lm_head.weight is shared or (lm_head.weight.shape == shared.shape
                                                and torch.equal(lm_head.weight, shared))
            if scaled and not same:
                raise ValueError(
                    "This T5 model scales its decoder output (T5 v1.0, tie_word_embeddings=True) but its lm_head "
                    "differs from the shared embeddings: hf_xfmr's T5 scales only a tied head. Tie them "
                    "(model.tie_weights()) or load it with tie_word_embeddings=False (T5 v1.1)."
                )
            tied = scaled and same
        return self._our_config(hf_config, tied)

    def config_from_transformers(self, hf_config):
        return self._our_config(hf_config, getattr(hf_config, "scale_decoder_outputs", True))

    def _our_config(self, hf_config, tied: bool):
        config = super().config_from_transformers(hf_config)
        config.tie_word_embeddings = tied
        start = getattr(hf_config, "decoder_start_token_id", None)
        config.decoder_start_token_id = hf_config.pad_token_id if start is None else start
        return config

    def config_to_transformers(self, config):
        hf_config = super().config_to_transformers(config)
        hf_config.scale_decoder_outputs = bool(config.tie_word_embeddings)
        hf_config.decoder_start_token_id = config.decoder_start_token_id
        return hf_config

    def prepare_transformers_model(self, hf_model, model) -> None:
        if not model.config.tie_word_embeddings and hasattr(hf_model, "lm_head"):
            hf_model.config.tie_word_embeddings = False  # so a later tie_weights() keeps them apart
            hf_model.lm_head.weight = nn.Parameter(hf_model.lm_head.weight.detach().clone())

    # -- state dicts -----------------------------------------------------------------------------
    def state_dict_from_transformers(self, state_dict: dict, task: str) -> dict:
        hf_prefix, our_prefix = _HF_PREFIX.get(task, ""), _OUR_PREFIX.get(task, "model.")
        out, halves = {}, {}
        for key, value in state_dict.items():
            if key.startswith(hf_prefix):
                body = key[len(hf_prefix):]
                if body in _TIED_COPIES:
                    continue
                if task == "encoder" and body.startswith("decoder."):
                    continue  # the encoder of a full model
                new = body_key_from_hf(body)
                if new is not None:
                    if body.endswith(("wi_0.weight", "wi_1.weight")):
                        halves.setdefault(our_prefix + new, {})[body[-len("wi_0.weight"):][:4]] = value
                    else:
                        out[our_prefix + new] = value
                    continue
            new = _head_key(key, task, to_hf=False)
            if new is None and task in ("base", "encoder") and key.startswith(("lm_head.", "qa_outputs.")):
                continue  # the backbone of a model with a head
            if new is None:
                raise KeyError(f"Unexpected parameter {key!r} in a t5 checkpoint (task {task!r}); hf_xfmr does "
                               f"not know where it belongs.")
            out[new] = value
        for key, parts in halves.items():
            out[key] = torch.cat([parts["wi_0"], parts["wi_1"]], dim=0)  # (2F, C): activation half first
        return out

    def state_dict_to_transformers(self, state_dict: dict, task: str) -> dict:
        hf_prefix, our_prefix = _HF_PREFIX.get(task, ""), _OUR_PREFIX.get(task, "model.")
        # A gated block's fused up_proj (2F, C) has twice the rows of down_proj's (C, F) columns.
        gated = any(key.endswith("mlp.up_proj.weight") and key.replace("up_proj", "down_proj") in state_dict
                    and value.shape[0] == 2 * state_dict[key.replace("up_proj", "down_proj")].shape[1]
                    for key, value in state_dict.items())
        out = {}
        for key, value in state_dict.items():
            if key.startswith(our_prefix):
                names = body_key_to_hf(key[len(our_prefix):], gated)
                if names is not None:
                    values = value.chunk(2, dim=0) if len(names) == 2 and "wi_0" in names[0] else [value] * len(names)
                    for name, tensor in zip(names, values, strict=True):
                        out[hf_prefix + name] = tensor
                    continue
            new = _head_key(key, task, to_hf=True)
            if new is None:
                raise KeyError(f"No transformers name for parameter {key!r} (t5, task {task!r}).")
            out[new] = value
        if task in ("encoder", "token-classification"):
            out.pop(hf_prefix + "decoder.embed_tokens.weight", None)  # an encoder alone has no decoder copy
        if task == "seq2seq-lm" and "lm_head.weight" not in out:
            out["lm_head.weight"] = out["shared.weight"]  # tied: transformers stores the head under its own name
        return out


CONVERSION = T5Conversion(
    hf_model_type="t5",
    tasks=TASKS,
    hf_base_prefix="transformer",
    body_rules=(),
    config_extras=("classifier_dropout",),
)
