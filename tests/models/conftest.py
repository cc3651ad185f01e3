import pytest
import torch
from transformers import BertConfig, RobertaConfig

import hf_xfmr  # noqa: F401  (registers the Auto classes)

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_hf_config(arch: str, **overrides):
    if arch == "bert":
        return BertConfig(**{**TINY, "max_position_embeddings": 64, **overrides})
    if arch == "roberta":
        return RobertaConfig(**{**TINY, "max_position_embeddings": 66, "type_vocab_size": 1, **overrides})
    raise ValueError(arch)


def padded_batch(arch: str, batch=3, seq_len=11, vocab=99, seed=0):
    """input_ids with right padding (row 1 keeps 7 tokens, row 2 keeps 4), a mask, and token types."""
    g = torch.Generator().manual_seed(seed)
    pad = 0 if arch == "bert" else 1
    ids = torch.randint(3, vocab, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    for row, keep in ((1, 7), (2, 4)):
        if row < batch:
            mask[row, keep:] = 0
    ids = ids.masked_fill(mask == 0, pad)
    types = torch.zeros_like(ids)
    if arch == "bert":
        types[:, seq_len // 2:] = 1
    return ids, mask, types


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
