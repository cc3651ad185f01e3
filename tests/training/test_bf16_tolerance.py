"""bf16 autocast pretraining tracks fp32 over 300 steps (issue #29, item 1), and AdamW's fused option.

A tiny BERT (MLM) and a tiny GPT (CLM) from the registry are pretrained twice through the Pretrainer's Python API
(`pretrain(PretrainArguments(...))`), from the same seed, data and tokenizer: once in fp32
(`mixed_precision="no"`) and once with `mixed_precision="bf16"` (Accelerate's CPU autocast, fp32 master weights,
fp32 loss). That bf16 really ran is checked, not assumed: forward hooks on every `nn.Linear` record the dtype of
its output during training (bf16 in the bf16 run, fp32 in the other), and the two loss curves must differ
somewhere (bf16 rounding changed the numbers).

The tolerance: the mean loss of every window of 50 steps (the last one included) within 2% of the fp32 run's,
relative: the usual bf16 tolerance for mixed-precision training (1-2% of the fp32 loss). Measured on the 2-core
dev box (AMD EPYC, AVX2, no AVX512-BF16 / AMX: bf16 products emulated), 300 steps at these settings: the largest
window difference was 2.0e-5 to 2.7e-3 relative for BERT (its tokenizer is trained afresh in each test session,
and the runs' trajectories differ with it) and 1.1e-4 for GPT; the runs learn (the last window's loss is 10% and
22% below the first's). Single steps are not compared: once the weights differ by a rounding, an MLM step's loss
over its ~40 masked tokens can differ by a few percent (2.5% measured) while the windows agree to 0.3%. CPUs with
native bf16 kernels (AMX, AVX512-BF16) round differently but within the same bf16 epsilon (2^-8 = 0.4% per
product), so 2% keeps a margin of 7x over the worst measured window; a bf16 run that drifts off the fp32 curve
for good fails it.

Each run is tiny (hidden 32, 2 layers, 8 x 32 tokens): about 10 s (fp32) and 13 s (bf16) of CPU time on one
thread. The fused-AdamW test checks `build_optimizer("adamw")` (fused by default) against the per-tensor loop
within fp32 rounding, and that `fused=False` is the loop bit for bit.
"""

import pytest
import torch

import hf_xfmr  # noqa: F401
from hf_xfmr.training import PretrainArguments, PretrainCallback, pretrain, read_log
from hf_xfmr.training.optim import build_optimizer, parameter_groups

STEPS, WINDOW = 300, 50
WINDOW_TOLERANCE = 0.02  # relative to the fp32 run's 50-step mean loss (see the module docstring)


class LinearOutputDtypes(PretrainCallback):
    """Records the dtype of every `nn.Linear` output computed in training mode."""

    def __init__(self):
        self.dtypes: set[torch.dtype] = set()
        self.calls = 0

    def on_train_begin(self, run):
        def hook(module, inputs, output):
            if module.training:
                self.dtypes.add(output.dtype)
                self.calls += 1

        for module in run.unwrapped_model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(hook)


@pytest.fixture(scope="module")
def gpt_tokenizer_dir(gpt_tok, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt_tokenizer")
    gpt_tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("arch,objective", [("bert", "mlm"), ("gpt", "clm")])
def test_bf16_loss_curve_stays_within_tolerance_of_fp32(arch, objective, saved_tokenizer, gpt_tokenizer_dir,
                                                       tmp_path):
    tokenizer = saved_tokenizer if arch == "bert" else gpt_tokenizer_dir
    runs = {}
    for precision in ("no", "bf16"):
        dtypes = LinearOutputDtypes()
        args = PretrainArguments(
            arch=arch, objective=objective, preset="tiny", tokenizer=str(tokenizer), max_documents=60,
            max_steps=STEPS, per_device_train_batch_size=8, max_seq_length=32, learning_rate=2e-3, seed=0,
            mixed_precision=precision, logging_steps=1, save_steps=0, eval_fraction=0.0, progress_bar=False,
            report_to_tensorboard=False, output_dir=str(tmp_path / precision))
        result = pretrain(args, callbacks=[dtypes])
        losses = [record["loss"] for record in read_log(result.log_path) if "loss" in record]
        assert len(losses) == STEPS and all(torch.isfinite(torch.tensor(losses)))
        runs[precision] = (losses, dtypes)

    (fp32, fp32_dtypes), (bf16, bf16_dtypes) = runs["no"], runs["bf16"]
    # bf16 ran: every linear layer computed in bf16 under autocast (and in fp32 without it) ...
    assert fp32_dtypes.calls > 0 and fp32_dtypes.dtypes == {torch.float32}
    assert bf16_dtypes.calls == fp32_dtypes.calls and bf16_dtypes.dtypes == {torch.bfloat16}
    # ... and changed the numbers.
    assert any(a != b for a, b in zip(fp32, bf16))

    windows = [(sum(fp32[i:i + WINDOW]) / WINDOW, sum(bf16[i:i + WINDOW]) / WINDOW) for i in range(0, STEPS, WINDOW)]
    assert windows[-1][0] < 0.95 * windows[0][0], f"the fp32 run did not learn: {windows}"  # else nothing to compare
    relative = [abs(b - a) / a for a, b in windows]
    assert max(relative) <= WINDOW_TOLERANCE, f"50-step mean losses (fp32, bf16): {windows}"
    assert relative[-1] <= WINDOW_TOLERANCE, f"final 50-step mean losses (fp32, bf16): {windows[-1]}"


def test_fused_adamw_is_the_default_and_matches_the_per_tensor_loop():
    """`build_optimizer("adamw", ...)` takes torch's fused kernel by default (one pass per tensor, 6-8x faster
    on CPU than the per-tensor loop); after 5 steps its weights equal the loop's to fp32 rounding. With
    `fused=False` it is the loop, bit for bit."""
    hyperparameters = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)

    def run(make_optimizer):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
        optimizer = make_optimizer(parameter_groups(model, 0.01))
        generator = torch.Generator().manual_seed(1)
        for _ in range(5):
            x = torch.randn(8, 16, generator=generator)
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return optimizer, model.state_dict()

    fused, fused_weights = run(lambda groups: build_optimizer("adamw", groups, **hyperparameters))
    unfused, unfused_weights = run(lambda groups: build_optimizer("adamw", groups, **hyperparameters, fused=False))
    _, loop_weights = run(lambda groups: torch.optim.AdamW(groups, foreach=False, **hyperparameters))
    assert fused.defaults["fused"] is True and not unfused.defaults["fused"]
    for name, value in loop_weights.items():
        torch.testing.assert_close(fused_weights[name], value, atol=1e-6, rtol=1e-5, msg=name)
        assert torch.equal(unfused_weights[name], value), name
