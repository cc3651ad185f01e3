"""Benchmark cases for what most users run: finetuning and serving an existing encoder on padded batches.

Each case builds the transformers reference with random weights in sdpa (its fastest CPU setting), ours
converted from it by `hf_xfmr.from_transformers` in its default configuration (nothing switched on for
the benchmark), and one padded batch whose row lengths are uniform in [min_len, seq], right-padded to
`seq`, as `DataCollatorWithPadding(padding="max_length")` would give.

- `<arch>-seqcls-train-padded` (bert, roberta, albert, distilbert, modernbert): a sequence-classification
  finetuning step (forward + backward + AdamW), hidden 256, 4 layers, batch 32, lengths in [32, 256].
- `<arch>-seqcls-infer-padded`: the same model and batch under `torch.inference_mode` (serving).
- `bert-base-infer-padded`: `BertModel` feature extraction, hidden 384, 6 layers, 64 rows, lengths in
  [16, 256], no grad.

The end-to-end Trainer epoch on the VADER sentences is `hf_xfmr.bench.trainer` (`--cases trainer-vader`).
"""

import torch

from .converted import converted_case
from .harness import BenchCase, register_case

FIRST_ID = 5  # skip the special ids of every tokenizer style, so RoBERTa's positions count real tokens only
SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab=30522, batch=32, seq=256, min_len=32, num_labels=2)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab=512, batch=4, seq=32, min_len=8)
BASE_SIZES = dict(hidden=384, layers=6, heads=6, ffn=1536, vocab=30522, batch=64, seq=256, min_len=16)
ARCHS = ("bert", "roberta", "albert", "distilbert", "modernbert")


def padded_batch(*, batch: int, seq: int, min_len: int, vocab: int, seed: int, pad_id: int,
                 num_labels: int | None = None) -> dict:
    """Random ids in [FIRST_ID, vocab), row lengths uniform in [min_len, seq], right-padded with `pad_id`;
    class labels in [0, num_labels) when given. Seeded."""
    if not 0 < min_len <= seq:
        raise ValueError(f"min_len must be in [1, seq={seq}], got {min_len}")
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(FIRST_ID, vocab, (batch, seq), generator=g)
    lengths = torch.randint(min_len, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None] < lengths[:, None]).long()  # (B, T), 1 = real token
    out = {"input_ids": input_ids.masked_fill(mask == 0, pad_id), "attention_mask": mask}
    if num_labels is not None:
        out["labels"] = torch.randint(0, num_labels, (batch,), generator=g)
    return out


def _reference(arch: str, task: str, *, hidden, layers, heads, ffn, vocab, seq, num_labels):
    """(transformers model class, its config, the pad id) for `arch` at these sizes, in sdpa."""
    import transformers

    common = dict(vocab_size=vocab, num_labels=num_labels)
    if arch in ("bert", "roberta", "albert"):
        sizes = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
                     max_position_embeddings=seq + 2 if arch == "roberta" else seq)
        if arch == "albert":
            sizes["embedding_size"] = hidden // 2
        names = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert"}[arch]
    elif arch == "distilbert":
        sizes = dict(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=ffn, max_position_embeddings=seq)
        names = "DistilBert"
    elif arch == "modernbert":
        sizes = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
                     max_position_embeddings=max(seq, 512), pad_token_id=0, bos_token_id=1, eos_token_id=2,
                     cls_token_id=1, sep_token_id=2)
        names = "ModernBert"
    else:
        raise ValueError(f"unknown arch {arch!r}; one of {', '.join(ARCHS)}")
    config = getattr(transformers, f"{names}Config")(**common, **sizes)
    model_class = getattr(transformers, f"{names}{'Model' if task == 'base' else 'ForSequenceClassification'}")
    return model_class, config, config.pad_token_id or 0


def _padded_case(name: str, arch: str, task: str, *, mode: str, hidden: int, layers: int, heads: int, ffn: int,
                 vocab: int, batch: int, seq: int, min_len: int, num_labels: int = 2, dtype: str = "fp32",
                 device: str = "cpu", seed: int = 0) -> BenchCase:
    """Reference `<Arch>ForSequenceClassification` (or `<Arch>Model`, task "base") in sdpa with random
    weights; ours converted from it, default configuration. Padded batch as described in the module."""
    model_class, config, pad_id = _reference(arch, task, hidden=hidden, layers=layers, heads=heads, ffn=ffn,
                                             vocab=vocab, seq=seq, num_labels=num_labels)

    labelled = task != "base" and mode == "train"
    return converted_case(
        name, lambda: model_class._from_config(config, attn_implementation="sdpa"),
        lambda: padded_batch(batch=batch, seq=seq, min_len=min_len, vocab=vocab, seed=seed, pad_id=pad_id,
                             num_labels=num_labels if labelled else None),
        dict(mode=mode, dtype=dtype, device=device),
        f"{model_class.__name__} (sdpa) hidden {hidden}, {layers} layers, {heads} heads, FFN {ffn}, vocab {vocab}; "
        f"batch {batch}, lengths uniform in [{min_len}, {seq}] padded to {seq}; ours in its default configuration",
        loss_fn=None if labelled else (lambda out: out[0].float().pow(2).mean()),
    )


def _register(arch: str) -> None:
    @register_case(f"{arch}-seqcls-train-padded", tiny=TINY_SIZES)
    def train(**kw) -> BenchCase:
        return _padded_case(f"{arch}-seqcls-train-padded", arch, "sequence-classification",
                            **{"mode": "train", **SIZES, **kw})

    @register_case(f"{arch}-seqcls-infer-padded", tiny=TINY_SIZES)
    def infer(**kw) -> BenchCase:
        return _padded_case(f"{arch}-seqcls-infer-padded", arch, "sequence-classification",
                            **{"mode": "infer", **SIZES, **kw})

    train.__doc__ = (f"{arch} sequence-classification finetuning step, batch 32, lengths in [32, 256] "
                     f"padded to 256 (fp32).")
    infer.__doc__ = f"{arch} sequence-classification inference on the same padded batch (fp32, no grad)."


for _arch in ARCHS:
    _register(_arch)


@register_case("bert-base-infer-padded", tiny=TINY_SIZES)
def bert_base_infer_padded(**kw) -> BenchCase:
    """BertModel feature extraction, hidden 384 / 6 layers, 64 rows, lengths in [16, 256] (fp32, no grad)."""
    return _padded_case("bert-base-infer-padded", "bert", "base", **{"mode": "infer", **BASE_SIZES, **kw})
