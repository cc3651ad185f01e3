"""Data pipeline for hf_xfmr: collators, pair builders, packing, corpora and tokenizer training.

Collators (all vectorized torch, seeded with `seed=` or `generator=`, usable as DataLoader `collate_fn`):
    DataCollatorForMLM   BERT/RoBERTa/DistilBERT/ModernBERT masking, whole words, ALBERT n-grams
    DataCollatorForPLM   XLNet permutation LM (official recipe: spans, perm_mask, target_mapping)
    DataCollatorForCLM   GPT causal LM, optional document isolation in packed rows
    DataCollatorForSpanCorruption   T5 span corruption (sentinels, EOS, no padding)
    DataCollatorForTextInfilling    BART text infilling (Poisson spans -> one <mask> each, sentence permutation)
    DataCollatorForGapSentences     PEGASUS gap sentences (top-ROUGE sentences -> one <mask> each; `gsg_examples`)
    DataCollatorForSFT   causal-LM SFT batches, padded or padding-free (rows from `tokenize_sft`)
    DataCollatorForSeq2SeqFinetuning   source / target rows for summarization and translation finetuning
Examples / rows:
    create_sop_examples, create_nsp_examples, tokenize_documents   ALBERT SOP / BERT NSP pairs
    pack_stream, PackedCLMDataset                                  CLM rows with carried remainder
    pack_documents, collate_packed, packing_efficiency             best-fit packing for encoders
    seq2seq_columns, tokenize_seq2seq, docstring_summaries         seq2seq finetuning rows; a task from the stdlib
    html_entity_names                                              a seq2seq task from the stdlib a tiny model learns
Corpora and tokenizers:
    default_corpus, load_corpus, iter_texts, train_tokenizer
"""

from .bart import DataCollatorForTextInfilling
from .clm import DataCollatorForCLM, PackedCLMDataset, pack_stream
from .corpus import default_corpus, iter_texts, load_corpus
from .gsg import DataCollatorForGapSentences, gsg_examples
from .mlm import DataCollatorForMLM, tokenize_for_mlm
from .packing import best_fit_bins, block_diagonal_mask, collate_packed, pack_documents, packing_efficiency
from .pairs import create_nsp_examples, create_sop_examples, tokenize_documents
from .plm import DataCollatorForPLM
from .seq2seq import (DataCollatorForSeq2SeqFinetuning, docstring_summaries, html_entity_names, seq2seq_columns,
                      tokenize_seq2seq)
from .sft import DataCollatorForSFT, sft_format, tokenize_sft
from .t5 import DataCollatorForSpanCorruption, compute_input_and_target_lengths
from .tokenizers import train_tokenizer

__all__ = [
    "DataCollatorForCLM",
    "DataCollatorForGapSentences",
    "DataCollatorForMLM",
    "DataCollatorForPLM",
    "DataCollatorForSFT",
    "DataCollatorForSeq2SeqFinetuning",
    "DataCollatorForSpanCorruption",
    "DataCollatorForTextInfilling",
    "PackedCLMDataset",
    "best_fit_bins",
    "compute_input_and_target_lengths",
    "block_diagonal_mask",
    "collate_packed",
    "create_nsp_examples",
    "create_sop_examples",
    "default_corpus",
    "docstring_summaries",
    "gsg_examples",
    "html_entity_names",
    "iter_texts",
    "load_corpus",
    "pack_documents",
    "pack_stream",
    "packing_efficiency",
    "seq2seq_columns",
    "sft_format",
    "tokenize_documents",
    "tokenize_for_mlm",
    "tokenize_seq2seq",
    "tokenize_sft",
    "train_tokenizer",
]
