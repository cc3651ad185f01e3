"""`hf-xfmr pretrain --arch modernbert --objective mlm`: 30% masking, a loadable checkpoint."""

import torch
from transformers import AutoModelForMaskedLM

from hf_xfmr.training import read_log
from hf_xfmr.training.objectives import ObjectiveSettings, get_objective

from .test_pretrain import TRAIN_KEYS, _args


def test_modernbert_pretrains_with_30_percent_masking_and_saves_a_loadable_model(tmp_path):
    objective = get_objective("mlm")
    assert objective.resolve(ObjectiveSettings(arch="modernbert")).mlm_probability == 0.3
    result = pretrain_modernbert(tmp_path)
    train = [r for r in read_log(result.log_path) if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and set(train[0]) == TRAIN_KEYS
    assert all(r["loss"] > 0 for r in train)
    assert result.model.config.model_type == "xfmr-modernbert" and result.model.config.sparse_prediction
    assert result.model.config.chunked_lm_loss and result.model.config.unpad_inputs  # the benchmarked defaults
    loaded = AutoModelForMaskedLM.from_pretrained(result.model_dir).eval()
    ids = torch.tensor([[1, 10, 11, 12, 2]])
    result.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, result.model(input_ids=ids).logits)


def pretrain_modernbert(tmp_path):
    from hf_xfmr.training import pretrain

    return pretrain(_args(None, tmp_path / "out", arch="modernbert", objective="mlm", vocab_size=400))
