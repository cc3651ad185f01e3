"""A seq2seq finetuning step under transformers' `Seq2SeqTrainer`, transformers' model against ours (T5, BART).

What a transformers user runs to finetune a summarizer: tokenized rows of different lengths,
`DataCollatorForSeq2Seq` with a tokenizer of the architecture's recipe, given the model (right-padding the sources,
padding the labels with -100 and building `decoder_input_ids` from them), and `Seq2SeqTrainer`. The reference is `T5ForConditionalGeneration` /
`BartForConditionalGeneration` in sdpa with random weights (the machine is offline); ours is
`hf_xfmr.from_transformers` of that same model before any training, in its default configuration. Both train with
the same `Seq2SeqTrainingArguments`, seed, rows and collator; only the model differs.

Each batch holds `rows` rows whose source lengths are uniform in [min_source, max_source] and target lengths
uniform in [min_target, max_target] (random ids, seeded). A step is timed by a Trainer callback from
`on_step_begin` to `on_step_end` (forward, backward, clipping, AdamW, scheduler); the first `warmup` steps are
dropped and the median of the others is reported. With `rounds` > 1 the two sides alternate whole runs (ours, ref,
ours, ref, ...) and the median over every timed step is reported.

    from hf_xfmr.bench.seq2seq import SIZES, seq2seq_finetune_step, markdown_table
    rows = [seq2seq_finetune_step(arch, **SIZES, num_threads=2) for arch in ("t5", "bart")]
    print(markdown_table(rows))
"""

import statistics
import tempfile
import time

import torch

from .harness import table_lines, torch_threads

ARCHS = ("t5", "bart")
SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=32128, rows=16, min_source=32, max_source=512,
             min_target=8, max_target=64, steps=6, warmup=1, learning_rate=1e-4)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, rows=4, min_source=8, max_source=48,
                  min_target=4, max_target=12, steps=3, warmup=1, learning_rate=1e-3)
FIRST_ID = 4  # random ids above every special id of T5 (pad 0, eos 1) and BART (bos 0, pad 1, eos 2, unk 3)


def _reference(arch: str, *, hidden: int, layers: int, heads: int, ffn: int, vocab: int, max_source: int,
               max_target: int):
    """transformers' `ForConditionalGeneration` of `arch` at these sizes, random weights, sdpa."""
    import transformers

    if arch == "t5":
        config = transformers.T5Config(vocab_size=vocab, d_model=hidden, d_kv=hidden // heads, d_ff=ffn,
                                       num_layers=layers, num_heads=heads, decoder_start_token_id=0)
        model_class = transformers.T5ForConditionalGeneration
    elif arch == "bart":
        config = transformers.BartConfig(vocab_size=vocab, d_model=hidden, encoder_layers=layers,
                                         decoder_layers=layers, encoder_attention_heads=heads,
                                         decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                                         max_position_embeddings=max(max_source, max_target, 1024))
        model_class = transformers.BartForConditionalGeneration
    else:
        raise ValueError(f"unknown arch {arch!r}; one of {', '.join(ARCHS)}")
    return model_class._from_config(config, attn_implementation="sdpa")


def _rows(count: int, *, vocab: int, min_source: int, max_source: int, min_target: int, max_target: int,
          eos: int, seed: int) -> list[dict]:
    """`count` tokenized rows: random ids ending in `eos`, lengths uniform in the given ranges. Seeded."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        source = int(torch.randint(min_source, max_source + 1, (), generator=g))
        target = int(torch.randint(min_target, max_target + 1, (), generator=g))
        ids = torch.randint(FIRST_ID, vocab, (source + target,), generator=g).tolist()
        rows.append({"input_ids": ids[:source - 1] + [eos], "attention_mask": [1] * source,
                     "labels": ids[source:source + target - 1] + [eos]})
    return rows


def _padding_tokenizer(arch: str):
    """A small tokenizer of `arch`'s recipe (its pad id is the model's): the collator pads with it; the rows are
    ids already."""
    from ..data.corpus import default_corpus
    from ..data.tokenizers import train_tokenizer

    return train_tokenizer(arch, default_corpus(max_documents=20), vocab_size=300)


def _step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Wall-clock of each optimizer step, from on_step_begin to on_step_end."""

        def __init__(self):
            self.seconds: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self._start)

    return StepTimer()


def _train_steps(model, tokenizer, rows: list[dict], *, rows_per_batch: int, steps: int, learning_rate: float,
                 seed: int) -> list[float]:
    """`steps` Seq2SeqTrainer steps on `model`: the seconds of each."""
    import datasets
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    timer = _step_timer()
    with tempfile.TemporaryDirectory() as out:
        args = Seq2SeqTrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=rows_per_batch, learning_rate=learning_rate,
            warmup_steps=0, seed=seed, data_seed=seed, save_strategy="no", eval_strategy="no", report_to="none",
            use_cpu=True, disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0,
            remove_unused_columns=False,
        )
        collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
        trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                 data_collator=collator, callbacks=[timer])
        trainer.train()
    return timer.seconds


def seq2seq_finetune_step(arch: str, *, hidden: int, layers: int, heads: int, ffn: int, vocab: int, rows: int,
                          min_source: int, max_source: int, min_target: int, max_target: int, steps: int,
                          warmup: int, learning_rate: float, rounds: int = 1, seed: int = 0,
                          num_threads: int | None = None) -> dict:
    """Time Seq2SeqTrainer steps of transformers' `arch` model and ours (same initial weights, rows, settings).

    Returns {"case", "ours_s", "ref_s" (median seconds per step), "ratio" (ref / ours), "steps", "description"}.
    """
    import hf_xfmr

    if rounds < 1 or steps <= warmup:
        raise ValueError(f"rounds must be >= 1 and steps > warmup; got rounds={rounds}, steps={steps}, "
                         f"warmup={warmup}")
    sizes = dict(hidden=hidden, layers=layers, heads=heads, ffn=ffn, vocab=vocab, max_source=max_source,
                 max_target=max_target)
    if arch == "bart" and vocab == SIZES["vocab"]:
        sizes["vocab"] = vocab = 50265  # BART's own vocabulary at full size
    tokenizer = _padding_tokenizer(arch)
    times = {"ours": [], "ref": []}
    with torch_threads(num_threads):
        for _ in range(rounds):
            torch.manual_seed(seed)
            ref = _reference(arch, **sizes)
            config = ref.config
            if tokenizer.pad_token_id != config.pad_token_id:
                raise ValueError(f"the {arch} tokenizer pads with {tokenizer.pad_token_id}, the model with "
                                 f"{config.pad_token_id}")
            data = _rows(rows * steps, vocab=vocab, min_source=min_source, max_source=max_source,
                         min_target=min_target, max_target=max_target, eos=config.eos_token_id, seed=seed)
            models = {"ours": hf_xfmr.from_transformers(ref), "ref": ref}  # identical initial weights
            for side, model in models.items():
                seconds = _train_steps(model.train(), tokenizer, data, rows_per_batch=rows, steps=steps,
                                       learning_rate=learning_rate, seed=seed)
                times[side].extend(seconds[warmup:])
            del models, ref
    ours_s, ref_s = statistics.median(times["ours"]), statistics.median(times["ref"])
    return {
        "case": f"{arch}-seq2seq-finetune", "ours_s": ours_s, "ref_s": ref_s, "ratio": ref_s / ours_s,
        "steps": len(times["ours"]),
        "description": (f"Seq2SeqTrainer step, {arch} ForConditionalGeneration (sdpa) hidden {hidden}, "
                        f"{layers}+{layers} layers, FFN {ffn}, vocab {vocab}, random init; {rows} rows, sources uniform in "
                        f"[{min_source}, {max_source}], targets in [{min_target}, {max_target}], "
                        f"DataCollatorForSeq2Seq; median of {len(times['ours'])} step(s) per side, fp32"),
    }


def markdown_table(rows: list[dict]) -> str:
    """The rows of `seq2seq_finetune_step` as a markdown table, with a legend."""
    lines = table_lines(["case", "ours s/step", "ref s/step", "speed ratio", "timed steps"], "lrrrr",
                        [[r["case"], f"{r['ours_s']:.3f}", f"{r['ref_s']:.3f}", f"{r['ratio']:.2f}x", r["steps"]]
                         for r in rows])
    lines.append("")
    lines.append("s/step: median wall-clock of one Seq2SeqTrainer optimizer step. speed ratio = ref / ours "
                 "(> 1: ours faster).")
    return "\n".join(lines)
