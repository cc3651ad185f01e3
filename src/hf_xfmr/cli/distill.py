"""`hf-xfmr distill`: a teacher MLM distilled into a smaller student (the DistilBERT recipe)."""

import argparse
import dataclasses
import os

from ..training.arguments import DistillArguments
from .command import Command, CommandError
from .inputs import checkpoint_folder


def run(settings: DistillArguments, args: argparse.Namespace) -> int:
    from hf_xfmr.training.distill import distill

    teacher = checkpoint_folder("--teacher", settings.teacher, settings.revision)
    if not (teacher / "config.json").is_file():
        raise CommandError(f"--teacher {teacher} is not a checkpoint folder (it has no config.json)")
    settings = dataclasses.replace(settings, teacher=str(teacher))
    try:
        result = distill(settings)
    except (ValueError, FileNotFoundError, FileExistsError, KeyError) as err:
        # distill raises these with a message meant for the user (bad sizes, incompatible student, ...).
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise CommandError(str(message)) from None
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():  # launched on several processes: gloo can hang at exit
            dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) != 0:  # the report once, from the main process
        return 0
    student_model = result.student
    print(f"distilled {student_model.config.model_type} student ({student_model.config.num_hidden_layers} layers) "
          f"from {teacher} in {settings.max_steps} steps; saved to {settings.output_dir}")
    if result.history:
        first, last = result.history[0], result.history[-1]
        print(f"loss {first['loss']:.4f} -> {last['loss']:.4f} (ce {last['ce']:.4f}, mlm {last['mlm']:.4f}, "
              f"cos {last['cos']:.4f})")
    if result.agreement_before is not None:
        print(f"top-1 agreement with the teacher (held-out): {result.agreement_before:.3f} -> "
              f"{result.agreement_after:.3f}")
    return 0


COMMAND = Command(
    "distill",
    help="distil a teacher MLM into a smaller student (DistilBERT recipe)",
    description=(
        "Distil a masked-language-model teacher (hf_xfmr or transformers checkpoint: BERT, RoBERTa, ...)\n"
        "into a shallower student of the same width, as DistilBERT was made from BERT. The student starts\n"
        "from the teacher's embeddings, MLM head and one layer out of two, and is trained on masked text with\n"
        "  loss = alpha_ce * T^2 * KL(teacher soft targets || student) + alpha_mlm * MLM\n"
        "       + alpha_cos * (1 - cosine(student, teacher last hidden states)),\n"
        "KL and cosine over non-pad tokens. The student, its tokenizer and distill_log.json go to --output_dir.\n"
        "It runs on the loop of `hf-xfmr pretrain`: checkpoints (--save_steps), exact --resume, DDP and\n"
        "DeepSpeed ZeRO (--deepspeed, under accelerate launch or torchrun).\n"
        "Each option also has a dashed spelling (--max-steps)."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr distill --teacher ./my-bert --output_dir ./my-distilbert          # embedded corpus\n"
        "  hf-xfmr distill --teacher ./my-roberta --output_dir ./distilroberta --corpus ./texts/ --max_steps 5000\n"
        "  hf-xfmr distill --teacher ./my-bert --output_dir ./small --student_layers 3 --student_layer_ids 0,5,11\n"
        "  hf-xfmr distill --teacher ./my-bert --output_dir ./my-distilbert --save_steps 500 --resume  # continue\n"
        "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli distill --teacher ./my-bert \\\n"
        "      --output_dir ./my-distilbert --deepspeed zero2"
    ),
    arguments=DistillArguments,
    run=run,
)
