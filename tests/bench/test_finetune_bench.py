"""The finetuning / serving benchmark cases (bench/finetune.py) and the Trainer epoch (bench/trainer.py)."""

import pytest
import torch

from hf_xfmr.bench import make_case
from hf_xfmr.bench.finetune import ARCHS, FIRST_ID, padded_batch


def test_padded_batch_lengths_padding_and_labels():
    batch = padded_batch(batch=64, seq=40, min_len=8, vocab=100, seed=3, pad_id=1, num_labels=3)
    mask = batch["attention_mask"]
    lengths = mask.sum(1)
    assert lengths.min() >= 8 and lengths.max() <= 40 and len(set(lengths.tolist())) > 5  # spread, in range
    # right padding: every row is ones then zeros
    assert torch.equal(mask, (torch.arange(40)[None] < lengths[:, None]).long())
    ids = batch["input_ids"]
    assert (ids[mask == 0] == 1).all() and (ids[mask == 1] >= FIRST_ID).all() and (ids < 100).all()
    assert batch["labels"].shape == (64,) and set(batch["labels"].tolist()) <= {0, 1, 2}
    again = padded_batch(batch=64, seq=40, min_len=8, vocab=100, seed=3, pad_id=1, num_labels=3)
    assert all(torch.equal(batch[k], again[k]) for k in batch)  # seeded
    with pytest.raises(ValueError, match="min_len"):
        padded_batch(batch=2, seq=8, min_len=9, vocab=100, seed=0, pad_id=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_seqcls_cases_compare_padded_models_in_the_default_configuration(arch):
    train = make_case(f"{arch}-seqcls-train-padded", tiny=True)
    infer = make_case(f"{arch}-seqcls-infer-padded", tiny=True)
    assert train.mode == "train" and infer.mode == "infer"
    assert "labels" in train.make_batch() and "labels" not in infer.make_batch()
    assert (train.make_batch()["attention_mask"] == 0).any()  # the point: padded rows
    ours, ref = train.build_pair()
    assert ref.config._attn_implementation == "sdpa"
    assert type(ours).__name__.endswith("ForSequenceClassification")


def test_bert_base_case_is_feature_extraction():
    case = make_case("bert-base-infer-padded", tiny=True)
    ours, ref = case.build_pair()
    assert type(ref).__name__ == "BertModel" and type(ours).__name__ == "XfmrBertModel"
    assert case.mode == "infer"


def test_trainer_epoch_reports_both_sides():
    from hf_xfmr.bench.trainer import TINY_SIZES, markdown_table, trainer_epoch

    sizes = {**TINY_SIZES, "max_train_rows": 64, "max_test_rows": 32}
    row = trainer_epoch(**sizes, num_threads=1)
    assert row["train_rows"] == 64 and row["test_rows"] == 32
    assert row["ours_s"] > 0 and row["ref_s"] > 0 and row["ratio"] == pytest.approx(row["ref_s"] / row["ours_s"])
    assert 0 <= row["ours_accuracy"] <= 1 and 0 <= row["ref_accuracy"] <= 1
    assert "| trainer-vader |" in markdown_table([row])
