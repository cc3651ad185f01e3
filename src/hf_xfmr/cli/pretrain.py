"""`hf-xfmr pretrain`: an architecture pretrained with its objective (Accelerate; DeepSpeed ZeRO-2/3, FSDP2)."""

import argparse
import os
import shlex
import sys
from pathlib import Path

from ..training.arguments import PretrainArguments
from .catalog import ARCHITECTURE_OBJECTIVES, OBJECTIVES
from .command import PROG, Command, CommandError


def run(settings: PretrainArguments, args: argparse.Namespace) -> int:
    from hf_xfmr import training  # `training.pretrain` at call time: tests replace it

    try:
        result = training.pretrain(settings)
    except KeyboardInterrupt as err:  # Ctrl-C: say where the run stands and how to continue it
        if os.environ.get("RANK", "0") == "0":
            print(interrupted_message(args, settings, err), file=sys.stderr)
        return 130
    except training.CheckpointError as err:
        raise CommandError(f"cannot resume: {err}") from None
    except (training.NonFiniteLossError, training.CollectiveError) as err:
        print(f"{PROG} pretrain: error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        raise CommandError(str(err)) from None
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if result.model is not None:  # the main process
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in result.eval_metrics.items())
        loss = f"{result.final_loss:.4f}" if result.final_loss is not None else "n/a"
        print(f"pretrained {type(result.model).__name__} for {result.step} steps on {result.world_size} process(es): "
              f"final loss {loss}" + (f"; {metrics}" if metrics else "") +
              f"\nmodel and tokenizer: {result.model_dir}/  log: {result.log_path}")
    return 0


def options_without(options: list[str], names: set[str]) -> list[str]:
    """`options` without the options `names` (either spelling, `--name=value` or `--name [value]`)."""
    kept, drop_value = [], False
    for token in options:
        if drop_value and not token.startswith("-"):
            drop_value = False
            continue
        drop_value = False
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag[2:].replace("-", "_") in names:
            drop_value = "=" not in token
            continue
        kept.append(token)
    return kept


def interrupted_message(args: argparse.Namespace, settings: PretrainArguments, err: KeyboardInterrupt) -> str:
    """What `hf-xfmr pretrain` prints after Ctrl-C: the last complete checkpoint and the command that
    resumes from it (or, before the first checkpoint, the command that starts over)."""
    from hf_xfmr.training.checkpoint import latest_checkpoint
    from hf_xfmr.training.logs import LOG_FILE

    output_dir = Path(settings.output_dir)
    step = getattr(err, "step", None)
    when = f"after step {step}" if step is not None else "before training started"
    argv = list(getattr(args, "argv", None) or [])
    options = argv[argv.index("pretrain") + 1:] if "pretrain" in argv else argv
    options = options_without(options, {"resume", "overwrite_output_dir"})
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is not None:
        head = f"interrupted {when}; the last complete checkpoint is {checkpoint}."
        todo, extra = "To continue from it, run", ["--resume"]
    else:
        save = f"--save_steps {settings.save_steps}" if settings.save_steps else "--save_steps 0: only at the end"
        head = f"interrupted {when}, before the first checkpoint ({save}): there is nothing to resume."
        # a log without checkpoints is still an earlier run that pretrain will not overwrite silently
        todo, extra = "To start again, run", ["--overwrite_output_dir"] if (output_dir / LOG_FILE).exists() else []
    launcher = [PROG]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # a resumed run needs the same number of processes
        todo += f" with the same launcher and {world} processes, e.g."
        launcher = ["accelerate", "launch", "--multi_gpu", "--num_processes", str(world), "-m", "hf_xfmr.cli"]
    return f"{PROG} pretrain: {head}\n{todo}:\n  {shlex.join([*launcher, 'pretrain', *options, *extra])}"


_ARCHITECTURES = "\n".join(f"  {name:<12} objectives: {', '.join(objectives)}"
                           for name, objectives in ARCHITECTURE_OBJECTIVES)

COMMAND = Command(
    "pretrain",
    help="pretrain an architecture with its objective (Accelerate; DeepSpeed ZeRO-2/3 with --deepspeed, FSDP2 with "
         "--fsdp)",
    description=(
        "Pretrain an hf_xfmr architecture from scratch with its objective, in one process or under\n"
        "`accelerate launch` / `torchrun` (DDP, DeepSpeed ZeRO-2/3, FSDP2). Writes the model (safetensors) and\n"
        "tokenizer to --output_dir, a JSON-lines log (log.jsonl), and checkpoints that --resume\n"
        "continues exactly. Settings come from the options below and/or a YAML file (--config).\n\n"
        f"architectures:\n{_ARCHITECTURES}\nobjectives with a training recipe: {', '.join(OBJECTIVES)}"
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr pretrain --arch bert --objective wwm --max_steps 200 --output_dir out/bert\n"
        "  hf-xfmr pretrain --config run.yaml --resume\n"
        "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli pretrain --arch roberta --output_dir out/r\n"
        "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli pretrain --deepspeed zero3 ...\n"
        "  accelerate launch --multi_gpu --num_processes 2 -m hf_xfmr.cli pretrain --fsdp full_shard ..."
    ),
    arguments=PretrainArguments,
    run=run,
)
