import math

import pytest
import torch

from hf_xfmr.training.optim import (
    StableAdamW,
    build_optimizer,
    lr_multiplier,
    micro_batches_before,
    micro_batches_per_step,
)


def test_warmup_is_linear_from_zero_for_every_schedule():
    for name in ("constant", "linear", "cosine", "wsd", "1-sqrt"):
        assert [lr_multiplier(name, s, 100, warmup_steps=4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_schedule_shapes():
    assert lr_multiplier("linear", 0, 10) == 1.0
    assert lr_multiplier("linear", 5, 10) == pytest.approx(0.5)
    assert lr_multiplier("linear", 10, 10, min_lr_ratio=0.1) == pytest.approx(0.1)
    assert lr_multiplier("cosine", 5, 10) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 10, 10) == pytest.approx(0.0)
    # warmup-stable-decay: flat until the last 20%, then down to the floor at the last step.
    wsd = [lr_multiplier("wsd", s, 10, decay_ratio=0.2) for s in range(10)]
    assert wsd[:8] == [1.0] * 8 and wsd[8] == pytest.approx(0.5) and wsd[9] == pytest.approx(0.0)
    sqrt = [lr_multiplier("1-sqrt", s, 10, decay_ratio=0.2) for s in range(10)]
    assert sqrt[:8] == [1.0] * 8 and sqrt[8] == pytest.approx(1 - math.sqrt(0.5)) and sqrt[9] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="Unknown learning-rate schedule 'step'; choose one of"):
        lr_multiplier("step", 0, 10)


def test_batch_size_warmup_ramps_micro_batches_and_counts_them():
    assert [micro_batches_per_step(s, 4, 6) for s in range(8)] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert [micro_batches_per_step(s, 4, 0) for s in range(3)] == [4, 4, 4]
    for step in range(12):
        assert micro_batches_before(step, 4, 6) == sum(micro_batches_per_step(s, 4, 6) for s in range(step))


def _step(optimizer_class, grads, **kwargs):
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(16))
    optimizer = optimizer_class([param], lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01, **kwargs)
    for grad in grads:
        param.grad = grad.clone()
        optimizer.step()
    return param.detach()


def test_stable_adamw_matches_adamw_while_updates_are_small_and_clips_a_spike():
    g = torch.linspace(-1, 1, 16)
    steady = [g, g * 0.9, g * 0.8]  # shrinking gradients: g^2 / v <= 1, nothing to clip
    torch.testing.assert_close(_step(StableAdamW, steady), _step(torch.optim.AdamW, steady))
    # A gradient 100x the running second moment: AdamW takes a large step, StableAdamW divides it by RMS(g^2/v).
    spiked = steady + [g * 100]
    before = _step(StableAdamW, steady)
    stable_move = (_step(StableAdamW, spiked) - before).abs().sum()
    adamw_move = (_step(torch.optim.AdamW, spiked) - _step(torch.optim.AdamW, steady)).abs().sum()
    assert stable_move < 0.6 * adamw_move  # RMS(g^2 / v) is about 2 here


def test_build_optimizer_by_name():
    params = [torch.nn.Parameter(torch.zeros(2))]
    kwargs = dict(lr=1e-3, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0)
    assert isinstance(build_optimizer("adamw", params, **kwargs), torch.optim.AdamW)
    assert isinstance(build_optimizer("stable_adamw", params, **kwargs), StableAdamW)
    with pytest.raises(ValueError, match="Unknown optimizer 'sgd'; choose one of: adamw, stable_adamw"):
        build_optimizer("sgd", params, **kwargs)
