"""Knowledge distillation of a masked-language-model encoder into a shallower student (the DistilBERT recipe).

Sanh et al., 2019, "DistilBERT, a distilled version of BERT", https://arxiv.org/abs/1910.01108, sec. 2-3:

- the student keeps the teacher's width and is initialised from it: the embeddings, the MLM head and
  one layer out of two (`select_layers`: evenly spaced, first and last included; 12 -> 6 gives layers
  0, 2, 4, 7, 9, 11, the choice of the original extraction script);
- it is trained on masked text against the teacher with

      loss = alpha_ce * T^2 * KL(softmax(z_t / T) || softmax(z_s / T))    soft targets, every non-pad token
           + alpha_mlm * CE(z_s, labels)                                   the usual MLM loss, masked tokens
           + alpha_cos * (1 - cos(h_s, h_t))                               last hidden states, every non-pad token

  with T = 2, alpha_ce = 5, alpha_mlm = 2, alpha_cos = 1 by default. KL and cosine terms are averaged
  over non-pad positions (as the recipe's `batchmean` over selected positions), the MLM term over labels.

The teacher and the student are used through one small interface: called as
`model(input_ids=..., attention_mask=..., output_hidden_states=True)` they return `.logits` (B, T, V) and
`.hidden_states[-1]` (B, T, C). Any hf_xfmr or transformers MLM model qualifies (BERT, RoBERTa,
DistilBERT, ModernBERT, ...); only `init_student_from_teacher` reads weights, by their hf_xfmr names.

The run is the pretraining loop's (`Distiller`, a `Pretrainer`): it trains a `DistillationModel` (the student,
whose forward returns the loss, beside its frozen teacher), so logging, checkpoints, exact `--resume`, DDP and
DeepSpeed ZeRO are `hf-xfmr pretrain`'s. In one process a seed gives the student the loop `distill` had before
gave, bit for bit (its batches, masks, AdamW and schedule are kept).

Python:

    from hf_xfmr.training.distill import DistillArguments, distill
    result = distill(DistillArguments(teacher="my-bert", output_dir="my-distilbert", max_steps=1000))

Command line: `hf-xfmr distill --teacher my-bert --output_dir my-distilbert --max_steps 1000`: one flag per
`DistillArguments` field, each also spelled with dashes (`--max-steps`). Errors name the flag (`--max_steps`);
those of the building blocks below name their keyword and the flag that sets it (`num_layers`, --student_layers).

Shapes: B batch, T sequence length, V vocabulary, C hidden size, N non-pad positions.
"""

import base64
import contextlib
import copy
import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformers.utils import ModelOutput

from ..models.losses import token_loss
from . import checkpoint as ckpt
from .arguments import PretrainArguments
from .batches import mix_seed, to_device
from .objectives import Objective
from .optim import build_optimizer, micro_batches_before, parameter_groups
from .pretrain import Pretrainer

# Student architectures `init_student_from_teacher` can build other than the teacher's own, with the
# teachers whose weights they take by name. DistilBERT numbers positions from 0 and has no token types,
# so it fits BERT-style teachers (RoBERTa's positions are offset by its padding id: use a RoBERTa student).
STUDENT_ARCHITECTURES = {"xfmr-distilbert": ("xfmr-bert", "xfmr-distilbert")}


# ----------------------------------------------------------------------------------------------
# Student initialisation
# ----------------------------------------------------------------------------------------------


def select_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """Indices of the teacher layers a student of `student_layers` layers starts from: evenly spaced,
    first and last included ("one layer out of two" when the student has half the depth)."""
    if not isinstance(student_layers, int) or student_layers < 1:
        raise ValueError(f"`num_layers` (--student_layers) must be a positive integer, got {student_layers!r}.")
    if student_layers > teacher_layers:
        raise ValueError(
            f"The student would be deeper ({student_layers} layers, `num_layers` / --student_layers) than its "
            f"teacher ({teacher_layers} layers): each student layer starts as a copy of a teacher layer. Use at "
            f"most {teacher_layers} (DistilBERT uses half: {max(1, teacher_layers // 2)})."
        )
    if student_layers == 1:
        return [0]
    return [round(i * (teacher_layers - 1) / (student_layers - 1)) for i in range(student_layers)]


def _as_ours(model):
    """An hf_xfmr model for `model` (transformers models are converted; ours are returned as they are)."""
    if getattr(model.config, "model_type", "").startswith("xfmr-"):
        return model
    import hf_xfmr

    return hf_xfmr.from_transformers(model)


def _teacher_layer_count(teacher) -> int:
    layers = getattr(getattr(teacher, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"Cannot take layers from a {type(teacher).__name__}: a teacher must keep its encoder layers as "
            f"`model.layers` (BERT, RoBERTa, DistilBERT, ModernBERT do; ALBERT shares one set of layers "
            f"across depth, so there is nothing to pick from)."
        )
    return len(layers)


def _student_config(teacher, student, num_layers):
    """The student config from the `student` argument of `init_student_from_teacher`."""
    teacher_config = teacher.config
    model_type = teacher_config.model_type
    if student is None:  # the recipe's student: DistilBERT for a BERT teacher, else the teacher's architecture
        student = "distilbert" if model_type in STUDENT_ARCHITECTURES["xfmr-distilbert"] else "same"
    if isinstance(student, str):
        depth = num_layers if num_layers is not None else max(1, math.ceil(_teacher_layer_count(teacher) / 2))
        if student == "same":
            config = copy.deepcopy(teacher_config)
            config.num_hidden_layers = depth
            return config
        if student == "distilbert":
            _check_student_fits("xfmr-distilbert", model_type)
            from ..models.distilbert import XfmrDistilBertConfig

            return XfmrDistilBertConfig(
                vocab_size=teacher_config.vocab_size, max_position_embeddings=teacher_config.max_position_embeddings,
                dim=teacher_config.hidden_size, n_layers=depth, n_heads=teacher_config.num_attention_heads,
                hidden_dim=getattr(teacher_config, "intermediate_size", None) or teacher_config.hidden_dim,
                activation=getattr(teacher_config, "hidden_act", None) or teacher_config.activation,
                dropout=getattr(teacher_config, "hidden_dropout_prob", getattr(teacher_config, "dropout", 0.1)),
                attention_dropout=getattr(teacher_config, "attention_probs_dropout_prob",
                                          getattr(teacher_config, "attention_dropout", 0.1)),
                initializer_range=teacher_config.initializer_range, pad_token_id=teacher_config.pad_token_id,
                tie_word_embeddings=teacher_config.tie_word_embeddings,
            )
        raise ValueError(
            f"`student`={student!r} is not a student architecture; pass None (the recipe's default), 'same' "
            f"(the teacher's architecture), 'distilbert', or a config of the student."
        )
    # A config: its own depth; a different architecture only where the weights fit by name.
    if num_layers is not None and num_layers != student.num_hidden_layers:
        raise ValueError(f"`num_layers`={num_layers} contradicts the student config's num_hidden_layers="
                         f"{student.num_hidden_layers}; give one of them.")
    if student.model_type != model_type:
        _check_student_fits(student.model_type, model_type)
    return student


def _check_student_fits(student_type, teacher_type):
    teachers = STUDENT_ARCHITECTURES.get(student_type, ())
    if teacher_type not in teachers:
        raise ValueError(
            f"A {student_type} student cannot start from a {teacher_type} teacher's weights"
            + (f" (it fits {', '.join(teachers)} teachers)" if teachers else "")
            + "; use a student of the teacher's own architecture (`student='same'`)."
        )


def init_student_from_teacher(teacher, student=None, *, num_layers: int | None = None,
                              layers: list[int] | None = None):
    """A student MLM model initialised from `teacher` (DistilBERT recipe, sec. 3).

    Args:
        teacher: an MLM model, hf_xfmr or transformers (converted first), e.g. `XfmrBertForMaskedLM`.
        student: None for the recipe's student (a DistilBERT for a BERT teacher, the teacher's own
            architecture otherwise), "same", "distilbert", or a config (its width must be the teacher's).
        num_layers: student depth; default `len(layers)` if given, else half the teacher's, rounded up.
        layers: which teacher layers to copy, in order (default: `select_layers`).

    The student copies every weight it shares by name with the teacher: embeddings, the MLM head, and
    layer j from teacher layer `layers[j]`. A teacher's segment-A token-type vector, which the teacher
    adds to every token when given no token types, is folded into a student without token types (added
    to its position embeddings), so the student computes exactly what the teacher's chosen layers do.
    """
    teacher = _as_ours(teacher)
    if layers is not None and num_layers is None and (student is None or isinstance(student, str)):
        num_layers = len(layers)
    config = _student_config(teacher, student, num_layers)
    teacher_hidden, student_hidden = teacher.config.hidden_size, config.hidden_size
    if teacher_hidden != student_hidden:
        raise ValueError(
            f"Hidden size mismatch: the student has hidden size {student_hidden} but the teacher "
            f"{teacher_hidden}. The student starts from the teacher's weights and the cosine loss compares "
            f"their hidden states, so the widths must match: give the student hidden size {teacher_hidden}."
        )
    teacher_depth = _teacher_layer_count(teacher)
    depth = config.num_hidden_layers
    select_layers(teacher_depth, depth)  # validates the depth ("deeper than its teacher", ...)
    if layers is None:
        layers = select_layers(teacher_depth, depth)
    else:
        layers = list(layers)
        if len(layers) != depth:
            raise ValueError(f"`layers` (--student_layer_ids) names {len(layers)} teacher layers for a student of "
                             f"{depth} layers (`num_layers` / --student_layers).")
        if any(not isinstance(i, int) or not 0 <= i < teacher_depth for i in layers) or layers != sorted(set(layers)):
            raise ValueError(f"`layers` (--student_layer_ids) {layers} must be increasing indices of the teacher's "
                             f"{teacher_depth} layers (0 to {teacher_depth - 1}).")

    from ..models.registry import get_architecture

    student_class = get_architecture(config).model_class("masked-lm")
    model = student_class._from_config(config, dtype=teacher.dtype)
    model.load_state_dict(_student_state(teacher.state_dict(), model.state_dict(), layers))
    return model.to(teacher.device).train(teacher.training)


def _student_state(teacher_state: dict, student_state: dict, layers: list[int]) -> dict:
    """The student's state dict taken from the teacher's by name (student layer j <- teacher layer layers[j])."""
    out, problems = {}, []
    for key, target in student_state.items():
        source = key
        parts = key.split(".")
        if len(parts) > 3 and parts[:2] == ["model", "layers"]:
            source = ".".join(["model", "layers", str(layers[int(parts[2])]), *parts[3:]])
        value = teacher_state.get(source)
        if value is None:
            problems.append(f"{key} (the teacher has no {source})")
        elif value.shape != target.shape:
            problems.append(f"{key} (shape {tuple(target.shape)}, the teacher's {source} is {tuple(value.shape)})")
        else:
            out[key] = value.detach().clone()
    if problems:
        raise ValueError(
            "The student's weights do not all exist in the teacher: " + "; ".join(problems[:5])
            + (f" and {len(problems) - 5} more" if len(problems) > 5 else "")
            + ". Use a student of the teacher's architecture and sizes (student='same')."
        )
    token_types = teacher_state.get("model.embeddings.token_type_embeddings.weight")
    positions = "model.embeddings.position_embeddings.weight"
    if token_types is not None and "model.embeddings.token_type_embeddings.weight" not in student_state \
            and positions in out:
        out[positions] = out[positions] + token_types[0]  # (P, C) + (C,)
    return out


# ----------------------------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------------------------


@dataclass
class DistillationLossOutput:
    """The weighted total and its three unweighted terms (each a scalar tensor)."""

    loss: torch.Tensor
    ce: torch.Tensor
    mlm: torch.Tensor
    cos: torch.Tensor


class DistillationLoss(nn.Module):
    """alpha_ce * T^2 * KL(teacher soft targets || student) + alpha_mlm * MLM + alpha_cos * (1 - cosine).

    KL and cosine terms are averaged over non-pad positions (`attention_mask`), the MLM term over
    labelled positions. Logits are upcast to float32.
    """

    def __init__(self, temperature: float = 2.0, alpha_ce: float = 5.0, alpha_mlm: float = 2.0,
                 alpha_cos: float = 1.0):
        super().__init__()
        check_distillation_loss(temperature, alpha_ce, alpha_mlm, alpha_cos)
        self.temperature, self.alpha_ce, self.alpha_mlm, self.alpha_cos = temperature, alpha_ce, alpha_mlm, alpha_cos

    def forward(self, student_logits, teacher_logits, student_hidden=None, teacher_hidden=None,
                attention_mask=None, labels=None) -> DistillationLossOutput:
        """student/teacher logits (B, T, V), hidden states (B, T, C), attention_mask (B, T), labels (B, T)."""
        if student_logits.shape != teacher_logits.shape:
            raise ValueError(
                f"Student logits {tuple(student_logits.shape)} and teacher logits {tuple(teacher_logits.shape)} "
                f"differ: the student must predict over the teacher's vocabulary (same tokenizer, same vocab_size)."
            )
        keep = torch.ones(student_logits.shape[:-1], dtype=torch.bool, device=student_logits.device) \
            if attention_mask is None else attention_mask.bool()  # (B, T)
        count = keep.sum().clamp(min=1)
        zero = student_logits.new_zeros((), dtype=torch.float32)

        ce = zero
        if self.alpha_ce > 0:
            t = self.temperature
            s = F.log_softmax(student_logits[keep].float() / t, dim=-1)  # (N, V)
            p = F.log_softmax(teacher_logits[keep].float() / t, dim=-1)  # (N, V)
            ce = F.kl_div(s, p, log_target=True, reduction="sum") / count * t**2
        mlm = zero
        if self.alpha_mlm > 0:
            if labels is None:
                raise ValueError("alpha_mlm > 0 needs MLM `labels` (set alpha_mlm=0 to distil without them).")
            mlm = token_loss(student_logits, labels)
        cos = zero
        if self.alpha_cos > 0:
            if student_hidden is None or teacher_hidden is None:
                raise ValueError("alpha_cos > 0 needs both models' last hidden states (or set alpha_cos=0).")
            if student_hidden.shape != teacher_hidden.shape:
                raise ValueError(
                    f"Hidden size mismatch: student hidden states {tuple(student_hidden.shape)}, teacher "
                    f"{tuple(teacher_hidden.shape)}. The cosine loss needs equal widths: give the student the "
                    f"teacher's hidden size, or set alpha_cos=0."
                )
            similarity = F.cosine_similarity(student_hidden[keep].float(), teacher_hidden[keep].float(), dim=-1)
            cos = (1.0 - similarity).sum() / count
        loss = self.alpha_ce * ce + self.alpha_mlm * mlm + self.alpha_cos * cos
        return DistillationLossOutput(loss=loss, ce=ce.detach(), mlm=mlm.detach(), cos=cos.detach())


def _forward(model, batch):
    """The small interface: (logits (B, T, V), last hidden states (B, T, C))."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    return out.logits, out.hidden_states[-1]


@torch.no_grad()
def top1_agreement(student, teacher, batches) -> float:
    """Share of non-pad positions where the student's most likely token is the teacher's."""
    was_training = student.training
    student.eval(), teacher.eval()
    same = total = 0
    for batch in batches:
        keep = batch["attention_mask"].bool()
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        s, t = student(**inputs).logits, teacher(**inputs).logits
        same += int((s.argmax(-1) == t.argmax(-1))[keep].sum())
        total += int(keep.sum())
    student.train(was_training)
    return same / max(total, 1)


# ----------------------------------------------------------------------------------------------
# The training run
# ----------------------------------------------------------------------------------------------


# The options dataclass lives with the other training arguments; re-exported here, where it always was.
from .arguments import DistillArguments, check_distillation_loss  # noqa: E402


@dataclass
class DistillResult:
    """The trained student, one log entry per optimizer step, and the held-out top-1 agreement with the
    teacher before and after training (None without `eval_sequences`)."""

    student: Any
    tokenizer: Any
    history: list[dict] = field(default_factory=list)
    agreement_before: float | None = None
    agreement_after: float | None = None


def _load_teacher(source, revision=None):
    if isinstance(source, nn.Module):
        return _as_ours(source), None
    from ..models.hub_loading import resolve_checkpoint

    path = resolve_checkpoint(source, revision=revision)  # a Hub repo id: its cached snapshot
    if not path.is_dir():
        raise FileNotFoundError(f"Teacher {source!r} is not a checkpoint folder (config.json + weights).")
    from ..models.conversion import load_checkpoint
    from ..models.weights import check_weight_files

    check_weight_files(path)  # the message every command gives for a truncated or missing weights file
    return _as_ours(load_checkpoint(path, task="masked-lm")), path


def _load_student(source, teacher, args):
    """The student: initialised from the teacher, or an existing MLM model / folder to keep training."""
    if isinstance(source, nn.Module) or (isinstance(source, (str, os.PathLike)) and Path(source).is_dir()):
        if args.student_layers is not None or args.student_layer_ids is not None:
            raise ValueError("--student_layers / --student_layer_ids only apply when the student is built from "
                             "the teacher; an existing student keeps its own layers.")
        if isinstance(source, nn.Module):
            student = _as_ours(source)
        else:
            from ..models.conversion import load_checkpoint
            from ..models.weights import check_weight_files

            check_weight_files(source)
            student = _as_ours(load_checkpoint(Path(source), task="masked-lm"))
        if args.alpha_cos > 0 and student.config.hidden_size != teacher.config.hidden_size:
            raise ValueError(
                f"Hidden size mismatch: the student has hidden size {student.config.hidden_size} but the teacher "
                f"{teacher.config.hidden_size}; the cosine loss compares their hidden states. Use a student of "
                f"the teacher's width, or set --alpha_cos 0."
            )
        if student.config.vocab_size != teacher.config.vocab_size:
            raise ValueError(f"The student's vocabulary ({student.config.vocab_size}) differs from the teacher's "
                             f"({teacher.config.vocab_size}); both must use the same tokenizer.")
        return student
    if isinstance(source, (str, os.PathLike)) and source not in ("same", "distilbert"):
        raise FileNotFoundError(f"Student {source!r} is neither 'same', 'distilbert' nor a checkpoint folder.")
    return init_student_from_teacher(teacher, source, num_layers=args.student_layers,
                                     layers=args.student_layer_ids)


def _sequences(tokenizer, args) -> list[list[int]]:
    """Token id sequences of at most `max_seq_length` (with special tokens) from the corpus."""
    from ..data import iter_texts, load_corpus

    corpus = load_corpus(args.corpus, text_column=args.text_column, max_documents=args.max_documents)
    sequences = []
    for texts in iter_texts(corpus, batch_size=256):
        encoded = tokenizer(texts, truncation=True, max_length=args.max_seq_length, return_overflowing_tokens=True,
                            return_attention_mask=False, return_token_type_ids=False)
        sequences.extend(ids for ids in encoded["input_ids"] if len(ids) >= 4)
    if not sequences:
        raise ValueError("The corpus yields no sequence of at least 4 tokens; give it more text.")
    return sequences


@dataclass
class DistillationOutput(ModelOutput):
    """What `DistillationModel` returns: the weighted loss, its three unweighted terms and the student's logits."""

    loss: torch.Tensor | None = None
    ce: torch.Tensor | None = None
    mlm: torch.Tensor | None = None
    cos: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    teacher_logits: torch.Tensor | None = None


class DistillationModel(nn.Module):
    """The module the training loop trains: the student, whose forward returns the distillation loss.

    The teacher is held beside it, not as a submodule: it is not trained, not checkpointed (a resumed run
    loads it again from --teacher), not wrapped by DDP and not partitioned by ZeRO-3 (every process runs it
    whole, without collectives). `config` is the student's, against which checkpoints are validated; a
    checkpoint's `model/` holds the `student.*` weights (`checkpoint.save_model_state`).
    """

    def __init__(self, student, teacher, loss_fn: DistillationLoss):
        super().__init__()
        self.student, self.loss_fn = student, loss_fn
        self._teacher = (teacher,)  # a tuple: not registered as a submodule

    @property
    def teacher(self):
        return self._teacher[0]

    @property
    def config(self):
        return self.student.config

    def forward(self, input_ids, attention_mask, labels=None, **unused) -> DistillationOutput:
        """input_ids, attention_mask, labels (B, T): an MLM batch (the student and the teacher see the same
        masked input); other batch fields (token types, special-token masks) are not used."""
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        with torch.no_grad():
            t_logits, t_hidden = _forward(self.teacher, batch)  # (B, T, V), (B, T, C)
        s_logits, s_hidden = _forward(self.student, batch)
        terms = self.loss_fn(s_logits, t_logits, s_hidden, t_hidden, attention_mask, labels)
        return DistillationOutput(loss=terms.loss, ce=terms.ce, mlm=terms.mlm, cos=terms.cos, logits=s_logits,
                                  teacher_logits=t_logits)


# What the loop reads of the run's objective: its name (checkpoints, run settings) and the loss terms it logs.
# The data are the `Distiller`'s own (not in the objective table): the builders are never called.
DISTILLATION = Objective(
    name="distillation", description="knowledge distillation into a student (DistilBERT recipe)", task="masked-lm",
    build_examples=lambda *a: [], make_collator=lambda *a: None, logged_outputs=("ce", "mlm", "cos"))


def _encode_generator(generator: torch.Generator) -> str:
    return base64.b64encode(generator.get_state().numpy().tobytes()).decode("ascii")


def _decode_generator(generator: torch.Generator, text: str) -> None:
    generator.set_state(torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8))


class DistillBatches:
    """Endless shuffled micro-batches of the training sequences, resumable (checkpoints keep `state()`).

    Each pass over the sequences is a permutation drawn from `order`; it is cut into global batches of
    `batch_size * world_size` rows, of which this process takes rows `rank * batch_size ...` (one short batch
    when a single process has less text than a batch). Masks come from the collator's generator `masks`, one
    stream per process. Both generators' states go into the checkpoint, so a resumed run draws exactly the
    batches and masks the uninterrupted one would have. In one process this is the order of the loop
    `hf-xfmr distill` had before it ran on the `Pretrainer`, so a seed gives the same student as then.
    """

    def __init__(self, sequences, collator, masks: torch.Generator, order: torch.Generator, batch_size: int,
                 world_size: int, rank: int, state: dict | None = None):
        rows = batch_size * world_size
        if world_size > 1 and len(sequences) < rows:
            raise ValueError(f"The corpus gives {len(sequences)} training sequences, fewer than one global batch of "
                             f"{rows} (--batch_size {batch_size} x {world_size} processes): give more text or lower "
                             "--batch_size.")
        self.sequences, self.collator, self.masks, self.order = sequences, collator, masks, order
        self.batch_size, self.rows, self.rank = batch_size, rows, rank
        self.epoch, self.position, self.m = 0, 0, 0
        self._permutation, self._order_state = None, None
        if state:
            self.epoch, self.position, self.m = int(state["epoch"]), int(state["position"]), int(state["m"])
            _decode_generator(order, state["order"])  # the state before this pass's permutation was drawn
            _decode_generator(masks, state["masks"])

    def state(self) -> dict:
        order = self._order_state if self._order_state is not None else _encode_generator(self.order)
        return {"epoch": self.epoch, "position": self.position, "m": self.m, "order": order,
                "masks": _encode_generator(self.masks)}

    def __iter__(self):
        n = len(self.sequences)
        while True:
            if self._permutation is None:
                self._order_state = _encode_generator(self.order)
                self._permutation = torch.randperm(n, generator=self.order).tolist()
            while self.position <= max(n - self.rows, 0):
                start = self.position + self.rank * self.batch_size
                picked = self._permutation[start:start + self.batch_size]
                self.position += self.rows
                m, self.m = self.m, self.m + 1
                yield m, self.collator([{"input_ids": self.sequences[i]} for i in picked])
            self.epoch, self.position, self._permutation = self.epoch + 1, 0, None


def _loop_arguments(args: DistillArguments, output_dir: str, overwrite: bool) -> PretrainArguments:
    """The `PretrainArguments` of the shared loop for a distillation run: AdamW with betas (0.9, 0.98), a
    linear schedule, the run settings of `args`."""
    return PretrainArguments(
        output_dir=output_dir, overwrite_output_dir=overwrite, seed=args.seed, max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_seq_length=args.max_seq_length, learning_rate=args.learning_rate, weight_decay=args.weight_decay,
        optimizer="adamw", adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=args.adam_epsilon, lr_scheduler="linear",
        warmup_steps=round(args.warmup_ratio * args.max_steps), max_grad_norm=args.max_grad_norm,
        mixed_precision="bf16" if args.bf16 else "no", deepspeed=args.deepspeed, resume=args.resume,
        eval_steps=0, save_steps=args.save_steps, save_total_limit=args.save_total_limit,
        logging_steps=args.logging_steps, progress_bar=args.progress, report_to_tensorboard=False)


HISTORY_FILE = "distill_history.json"  # in each checkpoint: the per-step history so far


class Distiller(Pretrainer):
    """A distillation run on the pretraining loop (`Pretrainer`): the loop trains a `DistillationModel`
    (student + frozen teacher) on `DistillBatches`; what differs from pretraining is how the models and the
    data are built (`_prepare_data`, `_build_model`), what is evaluated (the top-1 agreement with the teacher)
    and what is written (the student). Logging, checkpoints, exact resume, DDP and ZeRO are the loop's."""

    def __init__(self, args: DistillArguments, callbacks=()):
        self.distill_args = args
        self.scratch = None  # no --output_dir (Python): the run's files go to a temporary folder
        output_dir, overwrite = args.output_dir, args.overwrite_output_dir
        if output_dir is None:
            if int(os.environ.get("WORLD_SIZE", "1")) > 1 or args.resume or args.deepspeed:
                raise ValueError("Pass --output_dir (Python: output_dir=): a run over several processes, with "
                                 "--deepspeed or --resume keeps its checkpoints there.")
            self.scratch = tempfile.TemporaryDirectory(prefix="hf-xfmr-distill-")
            output_dir, overwrite = self.scratch.name, True
        super().__init__(_loop_arguments(args, output_dir, overwrite), callbacks)
        self.history: list[dict] = []
        self.force_cpu = args.device == "cpu"

    def _resolve(self) -> None:
        self.arch, self.objective, self.model_class = None, DISTILLATION, None
        if self.distill_args.resume is None:
            _check_output_dir(self.distill_args)

    def _description(self) -> str:
        return "distill"

    def _prepare_data(self) -> None:
        """The teacher, the student and its tokenizer (seeded as the run), then the corpus's sequences: the
        first `eval_sequences` of a seeded order (at most a fifth) held out, the rest for training."""
        from ..data import DataCollatorForMLM

        args = self.distill_args
        torch.manual_seed(args.seed)
        with self._whole_models():
            self.teacher, self.student, self.tokenizer = _build_models(args)
        sequences = _sequences(self.tokenizer, args)
        self.order_generator = torch.Generator().manual_seed(args.seed)
        held_out = min(args.eval_sequences, len(sequences) // 5)
        order = torch.randperm(len(sequences), generator=self.order_generator).tolist()
        eval_seqs = [sequences[i] for i in order[:held_out]]
        self.train_sequences = [sequences[i] for i in order[held_out:]]
        eval_collator = DataCollatorForMLM(self.tokenizer, mlm_probability=args.mlm_probability, seed=args.seed + 1)
        self.eval_sets = [eval_collator([{"input_ids": s} for s in eval_seqs[i:i + args.batch_size]])
                          for i in range(0, len(eval_seqs), args.batch_size)]
        self.train_examples, self.plan = None, None

    @contextlib.contextmanager
    def _whole_models(self):
        """Models built in this context are whole, not partitioned by ZeRO-3's `zero.Init` (which transformers
        applies to `from_pretrained` / `_from_config` while a ZeRO-3 config is alive): the teacher runs whole on
        every process and the student starts from its weights; `accelerator.prepare` partitions the student."""
        from transformers.integrations import is_deepspeed_zero3_enabled, set_hf_deepspeed_config, \
            unset_hf_deepspeed_config

        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        config = getattr(plugin, "dschf", None)
        if config is None or not is_deepspeed_zero3_enabled():
            yield
            return
        unset_hf_deepspeed_config()
        try:
            yield
        finally:
            set_hf_deepspeed_config(config)

    def _build_model(self):
        """The `DistillationModel`, the checks of a checkpoint to resume, and AdamW on the student."""
        args, loop = self.distill_args, self.args
        model = DistillationModel(self.student, self.teacher,
                                  DistillationLoss(args.temperature, args.alpha_ce, args.alpha_mlm, args.alpha_cos))
        self.teacher.to(self.accelerator.device)
        self.resume_settings = {
            "arch": self.student.config.model_type, "objective": DISTILLATION.name, "seed": args.seed,
            "world_size": self.world, "per_device_train_batch_size": args.batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps, "batch_size_warmup_steps": 0,
            "max_seq_length": args.max_seq_length, "num_train_examples": len(self.train_sequences),
            "deepspeed": self.deepspeed, "teacher": _fingerprint(self.teacher),
        }
        self.trainer_state = {}
        if self.resume_path is not None:
            self.trainer_state = ckpt.validate_checkpoint(self.resume_path, model.config, self.resume_settings,
                                                          self.world)
        optimizer = build_optimizer(loop.optimizer, parameter_groups(model, args.weight_decay), lr=args.learning_rate,
                                    betas=(loop.adam_beta1, loop.adam_beta2), eps=args.adam_epsilon,
                                    weight_decay=args.weight_decay)
        if self.resume_path is not None:
            self.checkpointer.restore(self.resume_path, model, optimizer, prepared=False)
        return model, optimizer

    def _start_batches(self, data_state: dict | None) -> None:
        from ..data import DataCollatorForMLM

        args, device = self.distill_args, self.accelerator.device
        self.micro_batches = micro_batches_before(self.step, args.gradient_accumulation_steps, 0)
        masks = torch.Generator().manual_seed(args.seed if self.rank == 0 else mix_seed(args.seed, self.rank))
        collator = DataCollatorForMLM(self.tokenizer, mlm_probability=args.mlm_probability, generator=masks)
        self.stream = DistillBatches(self.train_sequences, collator, masks, self.order_generator, args.batch_size,
                                     self.world, self.rank, data_state)
        self.batches = iter(self.stream)
        self.eval_list = [to_device(batch, device) for batch in self.eval_sets]
        self.run.objective_state = {}

    def learning_rate(self, step: int) -> float:
        """Linear warmup from 0 over `warmup_ratio` of the steps, then linear decay to 0 (step `step` uses
        the multiplier `get_linear_schedule_with_warmup` gives it, as before the shared loop)."""
        args, warmup = self.distill_args, self.args.warmup
        if step < warmup:
            return args.learning_rate * step / warmup
        return args.learning_rate * max(0.0, (args.max_steps - step) / max(1, args.max_steps - warmup))

    def train_step(self) -> dict:
        record = super().train_step()
        self.history.append({"step": record["step"], **{k: round(record[k], 6) if record[k] is not None else None
                                                         for k in ("loss", "ce", "mlm", "cos")},
                             "lr": self.learning_rate(record["step"])})  # after the step, as the schedule reports it
        return record

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The top-1 agreement of the student with the teacher on the held-out batches (`top1_agreement`),
        through the prepared model (under ZeRO-3 its forward gathers the student's weights); every process
        scores them all, so every process runs the same modules."""
        model = self.run.model
        model.eval()
        same = total = 0
        try:
            for batch in self.eval_list:
                outputs = model(**batch)
                keep = batch["attention_mask"].bool()
                same += int((outputs.logits.argmax(-1) == outputs.teacher_logits.argmax(-1))[keep].sum())
                total += int(keep.sum())
        finally:
            model.train()
        return {"eval_top1_agreement": same / max(total, 1)}

    def _on_checkpoint(self, folder: Path) -> None:
        if self.is_main:
            (folder / HISTORY_FILE).write_text(json.dumps(self.history))
        super()._on_checkpoint(folder)

    def resume(self, path: Path) -> dict | None:
        data_state = super().resume(path)
        history = path / HISTORY_FILE
        self.history = json.loads(history.read_text()) if history.is_file() else []
        return data_state

    def _fresh_model(self):
        from ..models.registry import get_architecture

        student_class = get_architecture(self.student.config).model_class("masked-lm")
        student = student_class(self.student.config)  # not `_from_config`: no zero.Init, the weights come next
        return DistillationModel(student, self.teacher, self.run.unwrapped_model.loss_fn)

    def _write_final(self, model, folder: Path):
        model.student.save_pretrained(folder)
        return model.student


def _fingerprint(model) -> float:
    """A number that tells teachers apart (the sum of their weights): a checkpoint resumes with its own."""
    with torch.no_grad():
        return round(float(sum(p.double().sum() for p in model.parameters())), 6)


def distill(args: DistillArguments, callbacks=()) -> DistillResult:
    """Train a student against a teacher with the DistilBERT recipe; see the module docstring.

    The run is a `Distiller` (the pretraining loop, `Pretrainer`): setup (output folder, teacher, tokenizer,
    student, data, optimizer; a checkpoint with --resume), the agreement before, training, the agreement
    after, and the student, its tokenizer and `distill_log.json` in --output_dir."""
    trainer = Distiller(args, callbacks)
    try:
        trainer.setup()
        result = DistillResult(student=trainer.student, tokenizer=trainer.tokenizer)
        if trainer.eval_list:
            result.agreement_before = trainer.evaluate()["eval_top1_agreement"]
        started = time.perf_counter()
        run = trainer.train()
        result.history = trainer.history
        result.agreement_after = run.eval_metrics.get("eval_top1_agreement")
        result.student = (run.model if run.model is not None else trainer.student).train(False)
        if args.output_dir is not None and trainer.is_main:
            _save(result, trainer.teacher, args, seconds=time.perf_counter() - started)
    finally:
        if trainer.scratch is not None:
            trainer.scratch.cleanup()
    return result


def _check_output_dir(args: DistillArguments) -> None:
    """Refuse an output folder that is a file, or holds files, before anything is loaded."""
    if args.output_dir is None:
        return
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--output_dir {out} is a file, not a folder: choose another path.")
    if out.exists() and any(out.iterdir()) and not args.overwrite_output_dir:
        raise FileExistsError(f"--output_dir {out} exists and is not empty; pass --overwrite_output_dir "
                              "(Python: overwrite_output_dir=True) to write into it, or --resume to continue the "
                              "run it holds, or choose another folder.")


def _build_models(args: DistillArguments):
    """(teacher, student, the student's tokenizer): the teacher frozen in eval mode, the student in train mode
    (the training loop puts them on its device)."""
    from transformers import AutoTokenizer

    from ..data.tokenizers import fit_tokenizer_to_model

    teacher, teacher_path = _load_teacher(args.teacher, args.revision)
    tokenizer = args.tokenizer
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        folder = tokenizer or teacher_path
        if folder is None:
            raise ValueError("Pass `tokenizer` (a tokenizer or a folder): the teacher was given as a model.")
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as err:
            raise ValueError(f"No tokenizer could be loaded from {folder}: {err}. Pass --tokenizer DIR "
                             "(Python: tokenizer=).") from None
    if len(tokenizer) > teacher.config.vocab_size:
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but the teacher only {teacher.config.vocab_size} "
                         f"embeddings: use the teacher's own tokenizer.")
    student = _load_student(args.student, teacher, args)
    # The student's own tokenizer: the teacher's, emitting what the student takes (a DistilBERT student of a
    # BERT teacher takes no token_type_ids). A copy, so a tokenizer passed in is left as it was.
    tokenizer = fit_tokenizer_to_model(copy.copy(tokenizer), student)
    teacher.eval()
    student.train()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, student, tokenizer


def _save(result: DistillResult, teacher, args: DistillArguments, seconds: float) -> None:
    """`distill_log.json` (settings, agreement, history) beside the student and tokenizer in --output_dir."""
    out, student = Path(args.output_dir), result.student
    settings = {k: (v if isinstance(v, (str, int, float, bool, list, type(None))) else repr(v))
                for k, v in asdict(args).items()}
    log = {"arguments": settings, "teacher": teacher.config.model_type, "student": student.config.model_type,
           "student_layers": student.config.num_hidden_layers, "seconds": round(seconds, 2),
           "agreement_before": result.agreement_before, "agreement_after": result.agreement_after,
           "history": result.history}
    (out / "distill_log.json").write_text(json.dumps(log, indent=1))


__all__ = [
    "DistillArguments",
    "DistillResult",
    "DistillationLoss",
    "DistillationLossOutput",
    "distill",
    "init_student_from_teacher",
    "select_layers",
    "top1_agreement",
]
