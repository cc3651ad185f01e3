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

Python:

    from hf_xfmr.training.distill import DistillArguments, distill
    result = distill(DistillArguments(teacher="my-bert", output_dir="my-distilbert", max_steps=1000))

Command line: `hf-xfmr distill --teacher my-bert --output_dir my-distilbert --max_steps 1000`: one flag per
`DistillArguments` field, each also spelled with dashes (`--max-steps`). Errors name the flag (`--max_steps`);
those of the building blocks below name their keyword and the flag that sets it (`num_layers`, --student_layers).

Shapes: B batch, T sequence length, V vocabulary, C hidden size, N non-pad positions.
"""

import copy
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..models.losses import token_loss
from .batches import to_device
from .optim import parameter_groups

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


def _batches(sequences, collator, batch_size, generator):
    """Endless shuffled full batches (a new permutation each pass; one short batch if there is too little text)."""
    while True:
        order = torch.randperm(len(sequences), generator=generator).tolist()
        for start in range(0, max(len(order) - batch_size, 0) + 1, batch_size):
            yield collator([{"input_ids": sequences[i]} for i in order[start:start + batch_size]])


def distill(args: DistillArguments) -> DistillResult:
    """Train a student against a teacher with the DistilBERT recipe; see the module docstring.

    The run's named steps: check the output folder, build the models (teacher, tokenizer, student), prepare
    the data (held-out and training batches), measure the agreement, train, measure again, save."""
    _check_output_dir(args)
    torch.manual_seed(args.seed)
    teacher, student, tokenizer, device = _build_models(args)
    eval_batches, batches = _prepare_data(tokenizer, args, device)
    result = DistillResult(student=student, tokenizer=tokenizer)
    if eval_batches:
        result.agreement_before = top1_agreement(student, teacher, eval_batches)
    started = time.perf_counter()
    result.history = _train(student, teacher, batches, args, device)
    if eval_batches:
        result.agreement_after = top1_agreement(student, teacher, eval_batches)
    student.train(False)
    if args.output_dir is not None:
        _save(result, teacher, args, seconds=time.perf_counter() - started)
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
                              "(Python: overwrite_output_dir=True) to write into it, or choose another folder.")


def _build_models(args: DistillArguments):
    """(teacher, student, the student's tokenizer, device): the teacher frozen in eval mode, the student in
    train mode, both on the device."""
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
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    teacher.to(device).eval()
    student.to(device).train()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, student, tokenizer, device


def _prepare_data(tokenizer, args: DistillArguments, device):
    """(held-out batches on the device, endless training batches): the corpus's sequences in a seeded
    order, the first `eval_sequences` (at most a fifth) held out, each side masked by its own collator."""
    from ..data import DataCollatorForMLM

    sequences = _sequences(tokenizer, args)
    generator = torch.Generator().manual_seed(args.seed)
    held_out = min(args.eval_sequences, len(sequences) // 5)
    order = torch.randperm(len(sequences), generator=generator).tolist()
    eval_seqs = [sequences[i] for i in order[:held_out]]
    train_seqs = [sequences[i] for i in order[held_out:]]
    eval_collator = DataCollatorForMLM(tokenizer, mlm_probability=args.mlm_probability, seed=args.seed + 1)
    eval_batches = [to_device(eval_collator([{"input_ids": s} for s in eval_seqs[i:i + args.batch_size]]), device)
                    for i in range(0, len(eval_seqs), args.batch_size)]
    collator = DataCollatorForMLM(tokenizer, mlm_probability=args.mlm_probability, seed=args.seed)
    return eval_batches, _batches(train_seqs, collator, args.batch_size, generator)


def _train(student, teacher, batches, args: DistillArguments, device) -> list[dict]:
    """`max_steps` AdamW steps (linear warmup and decay) on the distillation loss; one history entry per step."""
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    loss_fn = DistillationLoss(args.temperature, args.alpha_ce, args.alpha_mlm, args.alpha_cos)
    optimizer = torch.optim.AdamW(parameter_groups(student, args.weight_decay), lr=args.learning_rate,
                                  eps=args.adam_epsilon, betas=(0.9, 0.98))
    scheduler = get_linear_schedule_with_warmup(optimizer, round(args.warmup_ratio * args.max_steps), args.max_steps)
    history = []
    bar = tqdm(total=args.max_steps, desc="distill", unit="step", disable=not args.progress)
    for step in range(1, args.max_steps + 1):
        totals = dict(loss=0.0, ce=0.0, mlm=0.0, cos=0.0)
        for _ in range(args.gradient_accumulation_steps):
            batch = to_device(next(batches), device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
                with torch.no_grad():
                    t_logits, t_hidden = _forward(teacher, batch)
                s_logits, s_hidden = _forward(student, batch)
                terms = loss_fn(s_logits, t_logits, s_hidden, t_hidden, batch["attention_mask"], batch["labels"])
            (terms.loss / args.gradient_accumulation_steps).backward()
            for name in totals:
                totals[name] += getattr(terms, name).item() / args.gradient_accumulation_steps
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(student.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        history.append({"step": step, **{k: round(v, 6) for k, v in totals.items()}, "lr": scheduler.get_last_lr()[0]})
        bar.update(1)
        if step % args.logging_steps == 0 or step == args.max_steps:
            bar.set_postfix(loss=f"{totals['loss']:.3f}", ce=f"{totals['ce']:.3f}", mlm=f"{totals['mlm']:.3f}",
                            cos=f"{totals['cos']:.3f}")
    bar.close()
    return history


def _save(result: DistillResult, teacher, args: DistillArguments, seconds: float) -> None:
    """The student and its tokenizer in --output_dir, with `distill_log.json` (settings, agreement, history)."""
    out, student = Path(args.output_dir), result.student
    out.mkdir(parents=True, exist_ok=True)
    student.save_pretrained(out)
    result.tokenizer.save_pretrained(out)
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
