"""`make demo`: pretrain a small BERT with masked language modelling, offline, on CPU, in a few minutes.

1. trains a WordPiece tokenizer on the embedded corpus (Python's own documentation: no download);
2. pretrains a small XfmrBertForMaskedLM with the whole-word MLM collator (15%, 80/10/10);
3. shows the loss falling, measures masked-token accuracy on held-out paragraphs against a
   most-frequent-token baseline, and fills masks with the transformers `fill-mask` pipeline;
4. saves it as safetensors, reloads it through `AutoModelForMaskedLM`, and converts it to transformers'
   `BertForMaskedLM` and back, checking that all three give the same logits.

Options: `python examples/demo.py --steps 1000 --output demo_output` (about 1-2 minutes on 2 cores).
"""

import argparse
import math
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import AutoModelForMaskedLM, pipeline

import hf_xfmr
from hf_xfmr.data import DataCollatorForMLM, default_corpus, tokenize_for_mlm, train_tokenizer
from hf_xfmr.data.corpus import document_text
from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps (default 1000)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--documents", type=int, default=600, help="documents of the embedded corpus to use")
    parser.add_argument("--output", type=Path, default=Path("demo_output"))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


@torch.no_grad()
def masked_token_accuracy(model, collator, train_examples, held_out, seed):
    """Top-1 accuracy on the masked positions of held-out paragraphs, and the accuracy of always
    predicting the most frequent training token (what a model that learned nothing but unigrams gets)."""
    counts = torch.bincount(torch.tensor([i for ex in train_examples for i in ex["input_ids"]]),
                            minlength=model.config.vocab_size)
    counts[collator.special_ids] = 0
    most_frequent = int(counts.argmax())
    collator = DataCollatorForMLM(collator.tokenizer, mlm_probability=0.15, whole_word_mask=True, seed=seed + 1)
    hits = baseline_hits = total = 0
    for start in range(0, len(held_out), 64):
        batch = collator(held_out[start:start + 64])
        labels = batch.pop("labels")
        logits = model(**batch).logits
        labelled = labels != -100
        hits += int((logits.argmax(-1)[labelled] == labels[labelled]).sum())
        baseline_hits += int((labels[labelled] == most_frequent).sum())
        total += int(labelled.sum())
    return hits / total, baseline_hits / total


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    start = time.perf_counter()

    corpus = default_corpus(max_documents=args.documents)
    tokenizer = train_tokenizer("wordpiece", corpus, vocab_size=args.vocab_size)
    print(f"[1/4] tokenizer: WordPiece, {len(tokenizer)} tokens, trained on {len(corpus)} embedded documents")

    texts = [p for doc in corpus for p in document_text(doc).split("\n") if len(p.split()) >= 8]
    encoded = tokenize_for_mlm(tokenizer, texts, max_length=args.seq_len)
    examples = [dict(zip(encoded, values)) for values in zip(*encoded.values())]
    held_out, examples = examples[:256], examples[256:]  # evaluation paragraphs never trained on
    collator = DataCollatorForMLM(tokenizer, mlm_probability=0.15, whole_word_mask=True, seed=args.seed)
    loader = DataLoader(examples, batch_size=args.batch_size, shuffle=True, collate_fn=collator,
                        generator=torch.Generator().manual_seed(args.seed), drop_last=True)

    config = XfmrBertConfig(
        vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=args.seq_len, pad_token_id=tokenizer.pad_token_id,
        sparse_prediction=True,
    )
    model = XfmrBertForMaskedLM(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
    )
    print(f"[2/4] pretraining {model.num_parameters() / 1e6:.1f}M-parameter BERT on {len(examples)} paragraphs")

    losses, step = [], 0
    with tqdm(total=args.steps, desc="MLM pretraining", unit="step") as bar:
        while step < args.steps:
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step(), schedule.step(), optimizer.zero_grad(set_to_none=True)
                losses.append(loss.item())
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
                if step == args.steps:
                    break
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    print(f"      loss {first:.3f} -> {last:.3f} (uniform guessing would be {math.log(len(tokenizer)):.3f})")
    if not last < first:
        raise SystemExit("demo failed: the MLM loss did not fall")

    model.eval()
    accuracy, baseline = masked_token_accuracy(model, collator, examples, held_out, args.seed)
    print(f"      held-out masked-token accuracy {accuracy:.1%} (always guessing the most frequent token: {baseline:.1%})")
    if not accuracy > baseline:
        raise SystemExit("demo failed: the model predicts masked tokens no better than the unigram baseline")
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=3)
    for sentence in ("Return a new list [MASK] the same elements.", "The try statement is used [MASK] exception handling."):
        guesses = ", ".join(f"{p['token_str']!r} ({p['score']:.2f})" for p in fill(sentence))
        print(f"[3/4] {sentence!r} -> {guesses}")

    args.output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    reloaded = AutoModelForMaskedLM.from_pretrained(args.output).eval()
    reference = hf_xfmr.to_transformers(model).eval()
    back = hf_xfmr.from_transformers(reference).eval()
    batch = tokenizer(texts[:4], return_tensors="pt", padding=True, truncation=True, max_length=args.seq_len)
    with torch.no_grad():
        ours = model(**batch).logits
        errors = {
            f"AutoModelForMaskedLM ({type(reloaded).__name__})": (reloaded(**batch).logits - ours).abs().max(),
            f"transformers {type(reference).__name__}": (reference(**batch).logits - ours).abs().max(),
            "converted back": (back(**batch).logits - ours).abs().max(),
        }
    for name, err in errors.items():
        print(f"[4/4] max |logit difference| vs {name}: {err:.2e}")
    if max(errors.values()) > 1e-4:
        raise SystemExit("demo failed: reloaded or converted model disagrees")
    print(f"saved to {args.output}/ (model.safetensors, config.json, tokenizer) in {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    main()
