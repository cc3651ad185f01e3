"""What new users hit in the shared heads and input checks: label shapes, empty batches, position
limits, sparse prediction under Trainer evaluation, torch.compile. Each test failed before its fix."""

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import Trainer, TrainingArguments

from hf_xfmr.models.bert import (
    XfmrBertConfig,
    XfmrBertForMaskedLM,
    XfmrBertForMultipleChoice,
    XfmrBertForPreTraining,
    XfmrBertForQuestionAnswering,
    XfmrBertForSequenceClassification,
    XfmrBertForTokenClassification,
    XfmrBertModel,
)
from hf_xfmr.models.roberta import XfmrRobertaConfig, XfmrRobertaModel

TINY = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny(cls, **overrides):
    torch.manual_seed(0)
    return cls(XfmrBertConfig.from_preset("tiny", **{**TINY, **overrides}))


@pytest.mark.parametrize("cls", [XfmrBertForMaskedLM, XfmrBertForTokenClassification, XfmrBertForPreTraining])
@pytest.mark.parametrize("sparse", [False, True])
def test_token_level_labels_of_the_wrong_shape_are_rejected(cls, sparse):
    model = tiny(cls, sparse_prediction=sparse).train()
    ids = torch.randint(5, 1000, (2, 8))
    labels = torch.randint(0, 2, (2, 7))
    with pytest.raises(ValueError, match=r"`labels` has shape \(2, 7\) but the inputs have shape \(2, 8\)"):
        model(input_ids=ids, labels=labels)


def test_sequence_level_labels_must_match_the_batch():
    ids = torch.randint(5, 1000, (3, 8))
    with pytest.raises(ValueError, match="`labels` has 2 rows but the batch has 3"):
        tiny(XfmrBertForSequenceClassification)(input_ids=ids, labels=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="`start_positions` must hold one index per sequence"):
        tiny(XfmrBertForQuestionAnswering)(input_ids=ids, start_positions=torch.zeros(2, dtype=torch.long),
                                           end_positions=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="one choice index per example"):
        tiny(XfmrBertForMultipleChoice)(input_ids=ids.view(3, 1, 8), labels=torch.zeros(2, dtype=torch.long))


@pytest.mark.parametrize("sparse", [False, True])
def test_a_batch_with_nothing_to_predict_gives_zero_loss_and_zero_gradient(sparse):
    model = tiny(XfmrBertForMaskedLM, sparse_prediction=sparse).train()
    ids = torch.randint(5, 1000, (2, 8))
    out = model(input_ids=ids, labels=torch.full_like(ids, -100))
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.count_nonzero(g) == 0 for g in grads)

    tagger = tiny(XfmrBertForTokenClassification)
    loss = tagger(input_ids=ids, labels=torch.full_like(ids, -100)).loss
    assert torch.isfinite(loss) and loss.item() == 0.0


def test_num_items_in_batch_divides_the_summed_loss():
    model = tiny(XfmrBertForMaskedLM).eval()
    ids = torch.randint(5, 1000, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, :3] = ids[0, :3]
    mean = model(input_ids=ids, labels=labels).loss
    assert_close(model(input_ids=ids, labels=labels, num_items_in_batch=6).loss, mean / 2)


@pytest.mark.parametrize("shape", [(0, 8), (2, 0)])
def test_empty_inputs_get_a_clear_error(shape):
    with pytest.raises(ValueError, match="The inputs are empty"):
        tiny(XfmrBertModel)(input_ids=torch.zeros(shape, dtype=torch.long))


def test_roberta_length_limit_counts_its_position_offset():
    config = XfmrRobertaConfig.from_preset("tiny", max_position_embeddings=130, **TINY)
    model = XfmrRobertaModel(config).eval()
    # pad_token_id=1: positions run from 2, so 128 tokens fit and 129 do not.
    assert model(input_ids=torch.full((1, 128), 5)).last_hidden_state.shape == (1, 128, 32)
    with pytest.raises(ValueError, match="Sequence length 129 exceeds the 128 positions"):
        model(input_ids=torch.full((1, 129), 5))


@pytest.mark.parametrize("model_class,config_class", [(XfmrBertModel, XfmrBertConfig),
                                                      (XfmrRobertaModel, XfmrRobertaConfig)])
def test_position_ids_beyond_the_table_are_rejected(model_class, config_class):
    model = model_class(config_class.from_preset("tiny", max_position_embeddings=64)).eval()
    ids = torch.full((1, 4), 5)
    with pytest.raises(ValueError, match="`position_ids` contains 64, outside the position table \\[0, 64\\)"):
        model(input_ids=ids, position_ids=torch.tensor([[0, 1, 2, 64]]))
    with pytest.raises(ValueError, match="`position_ids` contains -1"):
        model(input_ids=ids, position_ids=torch.tensor([[-1, 1, 2, 3]]))


def test_unknown_inputs_to_a_head_name_the_backbone():
    model = tiny(XfmrBertForSequenceClassification)
    with pytest.raises(ValueError, match="XfmrBertModel does not take `mems`"):
        model(input_ids=torch.randint(5, 1000, (2, 8)), mems=torch.zeros(1))


def _masked_batches(n_batches=3, batch=4, seq_len=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_batches * batch):
        ids = torch.randint(5, 1000, (seq_len,), generator=g)
        length = int(torch.randint(6, seq_len + 1, (1,), generator=g))
        mask = torch.zeros(seq_len, dtype=torch.long)
        mask[:length] = 1
        ids = ids.masked_fill(mask == 0, 0)
        labels = torch.where((torch.rand(seq_len, generator=g) < 0.3) & (mask == 1), ids, -100)
        labels[0] = ids[0]
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def _preprocess_logits_for_metrics(logits, labels):
    """run_mlm.py's recipe, verbatim in spirit: argmax of the logits."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _compute_metrics(eval_pred):
    """run_mlm.py's recipe: accuracy over labelled positions, aligning predictions with label_ids."""
    preds, labels = eval_pred
    labels = labels.reshape(-1)
    preds = preds.reshape(-1)
    mask = labels != -100
    return {"accuracy": float((preds[mask] == labels[mask]).mean())}


@pytest.mark.parametrize("arch", ["albert", "bert", "distilbert", "roberta"])  # every MLM with sparse_prediction
def test_sparse_prediction_works_under_trainer_evaluation_and_equals_dense(arch, tmp_path):
    from hf_xfmr.models import get_architecture

    data = _masked_batches()
    metrics = {}
    for sparse in (False, True):
        config = get_architecture(arch).config_class.from_preset("tiny", sparse_prediction=sparse)
        torch.manual_seed(0)  # the same weights for both
        model = get_architecture(arch).model_class("masked-lm")(config)
        args = TrainingArguments(output_dir=str(tmp_path / str(sparse)), per_device_eval_batch_size=4,
                                 report_to="none", use_cpu=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, eval_dataset=data, compute_metrics=_compute_metrics,
                          preprocess_logits_for_metrics=_preprocess_logits_for_metrics)
        metrics[sparse] = trainer.evaluate()
        predictions = trainer.predict(data)
        assert predictions.predictions.shape == predictions.label_ids.shape  # aligned, (N, T)
        # A training step still takes the sparse path (logits of the labelled positions only).
        model.train()
        batch = {k: torch.stack([row[k] for row in data[:4]]) for k in data[0]}
        logits = model(**batch).logits
        labelled = int((batch["labels"] != -100).sum())
        assert logits.shape[:-1] == ((labelled,) if sparse else batch["labels"].shape)
    assert metrics[True]["eval_accuracy"] == metrics[False]["eval_accuracy"]
    assert np.isclose(metrics[True]["eval_loss"], metrics[False]["eval_loss"], rtol=1e-6)


def test_fullgraph_compile_with_and_without_mask_and_checks_stay_effective():
    model = tiny(XfmrBertForSequenceClassification).eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    ids = torch.randint(5, 1000, (2, 8))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.no_grad():
        assert_close(compiled(input_ids=ids).logits, model(input_ids=ids).logits)
        assert_close(compiled(input_ids=ids, attention_mask=mask).logits,
                     model(input_ids=ids, attention_mask=mask).logits)
        with pytest.raises(RuntimeError, match="`input_ids` has values outside the vocabulary"):
            compiled(input_ids=torch.full((2, 8), 1000), attention_mask=mask)
