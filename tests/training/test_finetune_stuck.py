"""A classification finetune that stays at chance (training loss at log(num_labels), or every validation
prediction one class) past a share of its steps warns with what to try; one that learns does not."""

import logging
import math
from types import SimpleNamespace

import numpy as np

from hf_xfmr.training.finetune import STUCK_AFTER, finetune, stuck_finetune_callback

from .finetune_helpers import one_thread, quick_args, sentiment_dataset  # noqa: F401  (autouse fixture)


def _callback(result):
    (callback,) = [c for c in result.trainer.callback_handler.callbacks if hasattr(c, "watch")]
    return callback


def test_stuck_finetune_warns_with_what_to_try(tmp_path, wordpiece_tokenizer, caplog):
    # A learning rate of ~0: the weights never move, so the loss stays at log(2) and the answers stay alike.
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
        result = finetune(quick_args(tmp_path, learning_rate=1e-12), dataset=sentiment_dataset(),
                          tokenizer=wordpiece_tokenizer)
    message = _callback(result).message
    assert message is not None and message in caplog.text
    assert caplog.text.count("looks stuck at chance") == 1  # once per run
    assert "of 24 steps" in message
    step = int(message.split("stuck at chance after ")[1].split()[0])
    assert STUCK_AFTER * 24 <= step <= 24
    for advice in ("--learning_rate", "--warmup_steps", "--num_train_epochs", "--label_column", "random weights"):
        assert advice in message


def test_learning_finetune_does_not_warn(tmp_path, wordpiece_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.training.finetune"):
        result = finetune(quick_args(tmp_path, learning_rate=1e-2, max_steps=48), dataset=sentiment_dataset(),
                          tokenizer=wordpiece_tokenizer)
    assert result.metrics["eval"]["eval_accuracy"] >= 0.9
    assert _callback(result).message is None and "stuck" not in caplog.text


def _state(step, max_steps=100):
    return SimpleNamespace(global_step=step, max_steps=max_steps)


def test_stuck_callback_waits_for_its_share_of_the_steps():
    callback = stuck_finetune_callback(2, ["negative", "positive"])
    chance = math.log(2)
    for step in range(2, 30, 2):  # at chance, but before 30% of the steps: no verdict yet
        callback.on_log(None, _state(step), None, logs={"loss": chance})
    assert callback.message is None
    callback.on_log(None, _state(30), None, logs={"loss": chance + 0.01})
    assert "the training loss is 0.6" in callback.message and "log(2) = 0.693" in callback.message


def test_stuck_callback_reads_falling_loss_and_mixed_answers_as_learning():
    callback = stuck_finetune_callback(3)
    metrics = callback.watch(lambda p: {"accuracy": 0.5})
    for step in range(10, 101, 10):
        callback.on_log(None, _state(step), None, logs={"loss": math.log(3) * (1 - step / 150)})
        metrics(SimpleNamespace(predictions=np.array([0, 2, 1, 2]), label_ids=None))
        callback.on_evaluate(None, _state(step), None, metrics={})
    assert callback.message is None


def test_stuck_callback_names_the_one_class_predicted():
    callback = stuck_finetune_callback(2, ["negative", "positive"])
    metrics = callback.watch(lambda p: {"accuracy": 0.55})
    assert metrics(SimpleNamespace(predictions=np.array([1, 1, 1]), label_ids=None)) == {"accuracy": 0.55}
    callback.on_evaluate(None, _state(10), None, metrics={})  # too early: no verdict, and the answers are forgotten
    callback.on_evaluate(None, _state(50), None, metrics={})
    assert callback.message is None
    metrics(SimpleNamespace(predictions=np.array([1, 1, 1]), label_ids=None))
    callback.on_evaluate(None, _state(50), None, metrics={})
    assert "every validation prediction is the class 'positive'" in callback.message
