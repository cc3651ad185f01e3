"""Replaced-token detection (RTD): ELECTRA's generator and discriminator trained as one model.

Paper: Clark et al., 2020, https://arxiv.org/abs/2003.10555, sec. 2 and 3.2. transformers has the two halves
(`ElectraForMaskedLM`, `ElectraForPreTraining`) but no model that trains them together.

    input_ids (MLM-masked), labels (originals at masked positions, -100 elsewhere)
        |
    generator (XfmrElectraForMaskedLM, `generator_size_ratio` of the width) --> MLM loss on the masked positions
        |  sample one token per masked position from its softmax (no gradient through the sample)
    discriminator input = input_ids with the samples at the masked positions
        |  replaced = sample != original (a correct guess counts as original, sec. 2)
    discriminator (XfmrElectraForPreTraining) --> binary loss on every real token
        |  (optional, `discriminator_mlm_weight` > 0: its MLM head --> MLM loss on the masked positions)
    loss = generator_loss_weight x MLM loss + discriminator_loss_weight x binary loss   (1 and 50 in the paper)
           + discriminator_mlm_weight x the discriminator's MLM loss                   (0: the paper's ELECTRA)

The generator's word, position and type embeddings and the embedding LayerNorm ARE the discriminator's (one
set of modules, trained by both losses, as in the official code); each model keeps its own E -> C projection
(`embeddings.hidden_proj`, absent where E equals its width), and the generator's decoder is tied to the
shared word embeddings (`tie_word_embeddings`).

Deviation (off by default): `discriminator_mlm_weight` > 0 adds an MLM loss on the discriminator, which predicts
the original token at every masked position from the corrupted input (the paper's "Replace MLM", sec. 3.2, there
a model of its own), through `discriminator_lm_head` (the generator's head shape, C -> E -> GELU -> LayerNorm ->
E -> V, its decoder tied to the shared word embeddings): a dense signal, for budgets at which a binary one on
~13% of the tokens teaches the discriminator no context (at the budget of examples/compare_objectives.py it did
not help either: docs/compare_objectives.md). The head is a training aid: it is not part of the saved
discriminator (`save_pretrained` writes the two parts only; training checkpoints keep it), so a model loaded to
continue training starts it afresh. At 0 no head is built and the model is the paper's, weight for weight.

Saving: `save_pretrained(folder)` writes the discriminator to `folder` as an ordinary `XfmrElectraForPreTraining`
checkpoint and the generator to `folder/generator` as an `XfmrElectraForMaskedLM` one; each loads on its own.
`save_pretrained(folder, transformers_format=True)` writes them converted (transformers' `ElectraForPreTraining`
and `ElectraForMaskedLM`, which load without hf_xfmr); `from_pretrained(folder)` reads either back into one
model, the embeddings shared again.

Sampling uses the Gumbel-max trick (argmax of logits + Gumbel noise), an exact sample from the softmax, as the
official code does, with noise from the global torch RNG (`torch.manual_seed` fixes it). It runs on the
masked positions only: the generator's head projects just those onto the vocabulary.

Shapes: B batch, T sequence length, V vocabulary size, N masked positions.
"""

import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.modeling_outputs import ModelOutput

from ..conversion import to_transformers
from ..heads import masked_lm_logits_and_loss
from ..losses import IGNORE_INDEX
from .modeling_electra import (
    XfmrElectraEmbeddings,
    XfmrElectraForMaskedLM,
    XfmrElectraForPreTraining,
    XfmrElectraForPreTrainingOutput,
    XfmrElectraGeneratorHead,
    XfmrElectraPreTrainedModel,
    replaced_token_loss,
)

GENERATOR_FOLDER = "generator"  # where `save_pretrained` puts the generator, inside the discriminator's folder


@dataclass
class XfmrElectraForReplacedTokenDetectionOutput(ModelOutput):
    """Output of `XfmrElectraForReplacedTokenDetection`.

    loss: generator_loss_weight x generator_loss + discriminator_loss_weight x discriminator_loss
    (+ discriminator_mlm_weight x discriminator_mlm_loss where that weight is above 0).
    generator_loss: the generator's MLM loss on the masked positions (0 when nothing is masked);
    discriminator_loss: the binary loss on the real tokens. generator_accuracy: how often the generator's most
    likely token is the original (masked positions); replaced_accuracy / original_accuracy: the discriminator's
    accuracy on the replaced / on the original real tokens (each accuracy NaN when a batch has no such token).
    logits: (B, T) the discriminator's (> 0: replaced); generator_logits: (N, V) at the masked positions, in
    row-major order; discriminator_input_ids: (B, T) the ids the discriminator read; replaced: (B, T) 1 where
    they differ from the originals, 0 elsewhere. discriminator_mlm_loss / discriminator_mlm_accuracy: the
    discriminator's MLM loss and argmax accuracy on the masked positions (None when `discriminator_mlm_weight` is 0).
    """

    loss: torch.Tensor | None = None
    generator_loss: torch.Tensor | None = None
    discriminator_loss: torch.Tensor | None = None
    generator_accuracy: torch.Tensor | None = None
    replaced_accuracy: torch.Tensor | None = None
    original_accuracy: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    generator_logits: torch.Tensor | None = None
    discriminator_input_ids: torch.Tensor | None = None
    replaced: torch.Tensor | None = None
    discriminator_mlm_loss: torch.Tensor | None = None
    discriminator_mlm_accuracy: torch.Tensor | None = None


@torch.no_grad()
def sample_tokens(logits: torch.Tensor) -> torch.Tensor:
    """One id per row of (N, V) `logits`, drawn from their softmax (Gumbel-max: argmax(logits + G), G ~ Gumbel(0, 1),
    from the global torch RNG)."""
    uniform = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(torch.finfo(torch.float32).tiny)))
    return (logits.float() + gumbel).argmax(dim=-1)  # (N,)


def _accuracy(correct: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Share of `where` that is `correct` (both bool), as a float tensor; NaN where `where` is empty."""
    return (correct & where).sum().float() / where.sum().float()


@torch.no_grad()
def accuracies(generator_logits, targets, logits, replaced, attention_mask=None) -> dict:
    """The output's three accuracies: the generator's argmax against the N `targets` (its (N, V) logits), and the
    discriminator's (B, T) `logits` against `replaced` on the replaced and on the original real tokens."""
    real = torch.ones_like(replaced) if attention_mask is None or attention_mask.dim() != 2 else attention_mask == 1
    predicted = logits > 0
    return {"generator_accuracy": (generator_logits.argmax(-1) == targets).float().mean(),
            "replaced_accuracy": _accuracy(predicted, replaced & real),
            "original_accuracy": _accuracy(~predicted, ~replaced & real)}


def _part_state(state_dict: dict, part: str) -> dict:
    """The entries of an RTD model's `state_dict` that belong to `part` ("discriminator" or "generator"), named as
    in that part. The shared embeddings are the generator's too: a state dict that lists each tensor once (as
    DeepSpeed gathers them) holds them under the discriminator only."""
    own = {k[len(part) + 1:]: v for k, v in state_dict.items() if k.startswith(f"{part}.")}
    if part == "generator":
        shared = tuple(f"model.embeddings.{name}." for name in XfmrElectraEmbeddings.shared_parts)
        for key, value in state_dict.items():
            if key.startswith("discriminator.") and key[len("discriminator."):].startswith(shared):
                own.setdefault(key[len("discriminator."):], value)
    return own


class XfmrElectraForReplacedTokenDetection(XfmrElectraPreTrainedModel):
    """A generator and a discriminator trained together on replaced-token detection (see the module docstring).

    `config` is the discriminator's; the generator's is `config.generator_config()`. `from_parts` builds one
    around existing models (a published discriminator and generator pair)."""

    def __init__(self, config, discriminator=None, generator=None):
        super().__init__(config)
        self.discriminator = discriminator if discriminator is not None else XfmrElectraForPreTraining(config)
        self.generator = generator if generator is not None else XfmrElectraForMaskedLM(config.generator_config())
        # Built only when used: at weight 0 the model (and the random draws that initialise it) is the paper's.
        if config.discriminator_mlm_weight > 0:
            self.discriminator_lm_head = XfmrElectraGeneratorHead(config)  # (..., C) -> (..., V)
        self.share_embeddings()
        self.post_init()

    @classmethod
    def from_parts(cls, discriminator: XfmrElectraForPreTraining, generator: XfmrElectraForMaskedLM):
        """An RTD model around a trained discriminator and generator (their weights are kept); the generator's
        embeddings are replaced by the discriminator's (a warning says so when they differ: the published pairs
        were trained with them shared, so they are equal)."""
        if not (isinstance(discriminator, XfmrElectraForPreTraining) and isinstance(generator, XfmrElectraForMaskedLM)):
            raise TypeError(f"from_parts takes an XfmrElectraForPreTraining and an XfmrElectraForMaskedLM, got "
                            f"{type(discriminator).__name__} and {type(generator).__name__}.")
        ours, theirs = discriminator.model.embeddings, generator.model.embeddings
        differ = [name for name in type(ours).shared_parts
                  if getattr(ours, name).weight.shape == getattr(theirs, name).weight.shape
                  and not all(torch.equal(a, b) for a, b in zip(getattr(ours, name).state_dict().values(),
                                                                getattr(theirs, name).state_dict().values()))]
        if differ:
            warnings.warn(f"The generator's embeddings ({', '.join(differ)}) differ from the discriminator's; the "
                          f"discriminator's are used by both.", UserWarning, stacklevel=2)
        # transformers initialises only modules not initialised yet: the parts keep their weights (tested).
        model = cls(discriminator.config, discriminator=discriminator, generator=generator)
        return model.train(discriminator.training)

    def share_embeddings(self) -> None:
        """Give the generator the discriminator's embedding modules (its projection stays its own) and tie its
        decoder (and the discriminator's MLM head's, where there is one) to the shared word embeddings."""
        ours, theirs = self.discriminator.model.embeddings, self.generator.model.embeddings
        for name in type(ours).shared_parts:
            shapes = tuple(getattr(ours, name).weight.shape), tuple(getattr(theirs, name).weight.shape)
            if shapes[0] != shapes[1]:
                raise ValueError(
                    f"The generator's embeddings.{name} has shape {shapes[1]}, the discriminator's {shapes[0]}: a "
                    f"replaced-token-detection pair shares them, so `vocab_size`, `embedding_size`, "
                    f"`max_position_embeddings` and `type_vocab_size` must be the same in both.")
            setattr(theirs, name, getattr(ours, name))
        if self.generator.config.tie_word_embeddings:
            self.generator.lm_head.decoder.weight = ours.word_embeddings.weight
        if hasattr(self, "discriminator_lm_head"):
            self.discriminator_lm_head.decoder.weight = ours.word_embeddings.weight

    def get_input_embeddings(self):
        return self.discriminator.get_input_embeddings()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                return_dict=None, **kwargs):
        """`input_ids` (B, T): the MLM-masked input; `labels` (B, T): the original ids at the masked positions,
        -100 elsewhere (the format of `hf_xfmr.data`'s MLM collators). Other keywords (packed-sequence boundaries)
        go to both models."""
        if input_ids is None or labels is None:
            raise ValueError("Replaced-token detection needs `input_ids` (the masked input) and `labels` (the original "
                             "ids at the masked positions, -100 elsewhere), as an MLM collator gives them.")
        if labels.shape != input_ids.shape:
            raise ValueError(f"`labels` has shape {tuple(labels.shape)} but `input_ids` {tuple(input_ids.shape)}; "
                             f"pass one label per token (-100 where nothing was masked).")
        inputs = dict(attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
                      **kwargs)
        generator_logits, generator_loss, targets = self.run_generator(input_ids, labels, inputs)
        masked = labels != IGNORE_INDEX  # (B, T)
        disc_ids = input_ids.masked_scatter(masked, sample_tokens(generator_logits))  # samples in row-major order
        replaced = disc_ids != torch.where(masked, labels, input_ids)  # (B, T) bool
        config = self.config
        if config.discriminator_mlm_weight > 0:
            disc, mlm_loss, mlm_accuracy = self.run_discriminator_with_mlm(disc_ids, replaced, labels, targets, inputs)
        else:
            disc = self.discriminator(input_ids=disc_ids, labels=replaced.long(), return_dict=True, **inputs)
            mlm_loss = mlm_accuracy = None
        loss = config.generator_loss_weight * generator_loss + config.discriminator_loss_weight * disc.loss
        if mlm_loss is not None:
            loss = loss + config.discriminator_mlm_weight * mlm_loss
        output = XfmrElectraForReplacedTokenDetectionOutput(
            loss=loss, generator_loss=generator_loss, discriminator_loss=disc.loss,
            **accuracies(generator_logits, targets, disc.logits, replaced, attention_mask),
            logits=disc.logits, generator_logits=generator_logits, discriminator_input_ids=disc_ids,
            replaced=replaced.long(), discriminator_mlm_loss=mlm_loss, discriminator_mlm_accuracy=mlm_accuracy)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def run_generator(self, input_ids, labels, inputs: dict):
        """The generator on the masked input: (logits (N, V) at the masked positions only, its MLM loss, the N
        original ids there)."""
        generator = self.generator
        out = generator.encode(input_ids=input_ids, token_labels=labels, **inputs)
        logits, loss = masked_lm_logits_and_loss(generator.lm_head, out.last_hidden_state, labels, sparse=True)
        flat = labels.reshape(-1)
        return logits, loss, flat[flat != IGNORE_INDEX]  # targets (N,), in the order of the logits' rows

    def run_discriminator_with_mlm(self, disc_ids, replaced, labels, targets, inputs: dict):
        """The discriminator on its (B, T) input, as its own forward runs it, plus the MLM head on its hidden states
        at the masked positions: (its output: binary loss and (B, T) logits, the MLM loss, the MLM accuracy)."""
        discriminator = self.discriminator
        hidden = discriminator.encode(input_ids=disc_ids, **inputs).last_hidden_state  # (B, T, C)
        logits = discriminator.discriminator_head(hidden)  # (B, T)
        disc = XfmrElectraForPreTrainingOutput(
            loss=replaced_token_loss(logits, replaced.long(), inputs.get("attention_mask")), logits=logits)
        mlm_logits, mlm_loss = masked_lm_logits_and_loss(self.discriminator_lm_head, hidden, labels, sparse=True)
        with torch.no_grad():
            mlm_accuracy = (mlm_logits.argmax(-1) == targets).float().mean()
        return disc, mlm_loss, mlm_accuracy

    # -- saving and loading: two ordinary checkpoints ---------------------------------------------------
    def save_pretrained(self, save_directory, state_dict=None, transformers_format: bool = False, **kwargs):
        """Write the discriminator to `save_directory` (an `XfmrElectraForPreTraining` checkpoint) and the
        generator to `save_directory/generator` (an `XfmrElectraForMaskedLM` one). A `state_dict` of this
        model (e.g. gathered from ZeRO-3 shards) is split between the two. `transformers_format=True` writes
        them converted instead (transformers' `ElectraForPreTraining` and `ElectraForMaskedLM`), for code that
        loads them without hf_xfmr (`ElectraForSequenceClassification.from_pretrained(save_directory)`)."""
        if transformers_format and state_dict is not None:
            raise ValueError("transformers_format=True converts the model's own weights; load `state_dict` into the "
                             "model first (or save in hf_xfmr's format and convert with `hf-xfmr convert`).")
        for name, part in (("discriminator", self.discriminator), ("generator", self.generator)):
            part_state = None
            if state_dict is not None:
                part_state = _part_state(state_dict, name)
            if transformers_format:
                part = to_transformers(part)
            folder = Path(save_directory) if name == "discriminator" else Path(save_directory) / GENERATOR_FOLDER
            part.save_pretrained(folder, state_dict=part_state, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """Read a folder (or Hub repo id) written by `save_pretrained`: the discriminator at its root, the
        generator in `generator/`; keywords go to both `from_pretrained` calls (config fields among them, e.g.
        `discriminator_loss_weight=20.0`, set the loaded config's). The loaded generator's width is the one
        used: its `generator_size_ratio` is recorded, and a different ratio asked for is refused."""
        if model_args:
            raise TypeError("XfmrElectraForReplacedTokenDetection.from_pretrained takes keyword arguments only.")
        ratio = kwargs.pop("generator_size_ratio", None)
        discriminator = XfmrElectraForPreTraining.from_pretrained(pretrained_model_name_or_path, **kwargs)
        subfolder = f"{kwargs.pop('subfolder')}/{GENERATOR_FOLDER}" if kwargs.get("subfolder") else GENERATOR_FOLDER
        generator = XfmrElectraForMaskedLM.from_pretrained(pretrained_model_name_or_path, subfolder=subfolder,
                                                           **kwargs)
        config = discriminator.config
        loaded = generator.config.num_attention_heads / config.num_attention_heads
        if ratio is not None:
            config.generator_size_ratio = ratio
            expected = config.generator_config().hidden_size
            if expected != generator.config.hidden_size:
                raise ValueError(
                    f"generator_size_ratio {ratio} asks for a generator of hidden size {expected}, but the one in "
                    f"{pretrained_model_name_or_path} has {generator.config.hidden_size} (ratio {loaded:g}): a "
                    f"trained generator keeps its width; drop the ratio (--generator_size_ratio) to continue it.")
        config.generator_size_ratio = loaded
        return cls.from_parts(discriminator, generator)
