"""ZeRO-3 needs every process to run the same modules in the same order, whatever its micro-batch holds.

ZeRO-3 gathers a module's parameters in hooks: before its forward, and in backward when the gradient
reaches the module's outputs; a parameter read outside its own module's forward (a tied decoder weight)
is gathered on that read. A process whose step took another path (unpadding only where a batch has
padding, a module skipped for a batch with nothing to predict, ...) waits on other collectives than the
rest, for ever. Checked here in one process, in seconds: the sequence of module calls, parameter reads
and output gradients that ZeRO-3's hooks would see must be the same for full-length rows, heavily padded
rows and a batch without targets, for every architecture and objective (training and evaluation).
The real thing, two processes under ZeRO-3 and DDP, is in test_distributed_skewed.py. Also here: the
pieces of the collective timeout (--ddp_timeout) that need no second process.
"""

import pytest
import torch

import hf_xfmr  # noqa: F401  (registers every architecture)
from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.models import architectures
from hf_xfmr.training import PretrainArguments, get_objective
from hf_xfmr.training.batches import count_targets
from hf_xfmr.training.objectives import ObjectiveSettings
from hf_xfmr.training.pretrain import _zero_loss, build_config

LENGTH = 32
CASES = [(arch.name, name) for arch in architectures() for name in arch.objectives]
if ("electra", "rtd") not in CASES:  # replaced-token detection: a generator, sampling, then a discriminator
    CASES.append(("electra", "rtd"))


class _GradientReaches(torch.autograd.Function):
    """Identity whose backward records that the gradient reached the output of module `name` (as ZeRO-3's
    pre-backward function, which gathers the module's parameters there)."""

    @staticmethod
    def forward(ctx, x, name, events):
        ctx.name, ctx.events = name, events
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.events.append(("gradient", ctx.name))
        return grad, None, None


class _RecordedParameters(dict):
    """A module's `_parameters` that records every read by name (ZeRO-3's ZeROOrderedDict gathers there)."""

    events, owner = None, ""

    def __getitem__(self, key):
        self.events.append(("read", f"{self.owner}.{key}"))
        return dict.__getitem__(self, key)


def _mark_outputs(value, name, events):
    if torch.is_tensor(value):
        return _GradientReaches.apply(value, name, events) if value.requires_grad else value
    if isinstance(value, dict):  # ModelOutput included
        for key in list(value.keys()):
            value[key] = _mark_outputs(value[key], name, events)
        return value
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_mark_outputs(v, name, events) for v in value)
    return value


def step_events(model, inputs: dict, train: bool) -> list[tuple[str, str]]:
    """What ZeRO-3's hooks see in one step: module calls, parameter reads and, in training, output
    gradients, in order. The backward pass is the training loop's (`_zero_loss` without targets)."""
    events: list[tuple[str, str]] = []
    names = {module: name for name, module in model.named_modules()}
    hooks, originals = [], []
    for module in model.modules():
        hooks.append(module.register_forward_pre_hook(lambda m, args: events.append(("call", names[m]))))
        hooks.append(module.register_forward_hook(lambda m, args, out: _mark_outputs(out, names[m], events)))
        originals.append((module, module._parameters))
        recorded = _RecordedParameters(module._parameters)
        recorded.events, recorded.owner = events, names[module]
        module._parameters = recorded
    model.train(train)
    try:
        with torch.enable_grad() if train else torch.no_grad():
            outputs = model(**inputs)
            if train:
                loss = outputs.loss
                (_zero_loss(outputs) if count_targets(inputs) == 0 or loss is None else loss).backward()
    finally:
        for hook in hooks:
            hook.remove()
        for module, parameters in originals:
            module._parameters = parameters
    return events


def skewed_batches(batch: dict, pad_id: int) -> dict[str, dict]:
    """The batch as the collator made it, with every row full length, with rows cut to 2, 3, ... real
    tokens (a target in each), and cut without any target."""
    def copy():
        return {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}

    full, padded = copy(), copy()
    real = full["attention_mask"].bool()
    full["input_ids"].masked_fill_(~real, int(full["input_ids"][real][-1]))
    full["attention_mask"].fill_(1)
    for row in range(padded["input_ids"].shape[0]):
        keep = row + 2
        padded["attention_mask"][row, keep:] = 0
        padded["input_ids"][row, keep:] = pad_id
        padded["labels"][row, keep:] = -100
        for name in ("token_type_ids", "position_ids"):
            if name in padded and padded[name].shape == padded["input_ids"].shape:
                padded[name][row, keep:] = 0
    if padded["labels"].shape == padded["input_ids"].shape:  # a target in every row, however short
        padded["labels"][:, 1] = padded["input_ids"][:, 1]
    no_targets = {k: v.clone() if torch.is_tensor(v) else v for k, v in padded.items()}
    no_targets["labels"].fill_(-100)
    return {"as collated": batch, "full length": full, "padded": padded, "no targets": no_targets}


@pytest.fixture(scope="module")
def corpus():
    return ["\n".join(doc) for doc in default_corpus(max_documents=30)]


@pytest.fixture(scope="module")
def tokenizers(corpus):
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = train_tokenizer(arch, corpus, vocab_size=300)
        return cache[arch]
    return get


@pytest.mark.parametrize("arch_name,objective_name", CASES, ids=[f"{a}-{o}" for a, o in CASES])
def test_every_process_runs_the_same_modules_whatever_its_batch(arch_name, objective_name, corpus, tokenizers):
    from hf_xfmr.models import get_architecture

    arch, objective = get_architecture(arch_name), get_objective(objective_name)
    tokenizer = tokenizers(arch_name)
    args = PretrainArguments(arch=arch_name, objective=objective_name, preset="tiny", max_seq_length=LENGTH)
    settings = objective.resolve(ObjectiveSettings(max_seq_length=LENGTH, mlm_probability=None, short_seq_prob=0.1,
                                                   seed=0, arch=arch_name))
    examples = objective.build_examples(tokenizer, corpus, settings)
    batch = objective.make_collator(tokenizer, settings)(examples[:4], generator=torch.Generator().manual_seed(0))
    # The module the loop trains: the objective's own (RTD's generator + discriminator), else the task's model.
    model_class = objective.model_class(arch) if objective.model_class is not None else arch.model_class(objective.task)
    torch.manual_seed(0)
    model = model_class._from_config(build_config(arch, model_class, tokenizer, objective, args))

    batches = skewed_batches(batch, tokenizer.pad_token_id)
    assert count_targets(batches["padded"]) > 0 and count_targets(batches["no targets"]) == 0
    assert int((batches["padded"]["attention_mask"] == 0).sum()) > 0
    assert bool(batches["full length"]["attention_mask"].all())
    # The loop's backward pass for a batch without targets: exactly zero gradients (and no NaN).
    model.zero_grad(set_to_none=True)
    no_targets = batches["no targets"]
    step_events(model, objective.step_inputs(no_targets, objective.initial_state(len(no_targets["input_ids"]))), True)
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    assert gradients and all(bool((g == 0).all()) for g in gradients)

    for train in (True, False):
        seen = {}
        for name, b in batches.items():
            inputs = objective.step_inputs(b, objective.initial_state(len(b["input_ids"])))
            seen[name] = step_events(model, inputs, train)
        reference = seen["as collated"]
        assert any(kind == "call" for kind, _ in reference) and (not train or ("gradient", "") in reference)
        for name, events in seen.items():
            first = next((i for i, (a, b) in enumerate(zip(reference, events)) if a != b), min(len(reference),
                                                                                               len(events)))
            assert events == reference, (
                f"{'training' if train else 'evaluation'} on the {name!r} batch runs another sequence than on the "
                f"batch as collated, from event {first}: {events[first:first + 3]} instead of "
                f"{reference[first:first + 3]} ({len(events)} vs {len(reference)} events)")


# -- a distributed run that cannot make progress fails, naming the step (the launched check is in
#    test_distributed_skewed.py) ----------------------------------------------------------------------
@pytest.mark.parametrize("value", [0, -5, float("nan"), float("inf"), "soon", True])
def test_ddp_timeout_must_be_a_positive_number_of_seconds(value):
    with pytest.raises(ValueError, match="--ddp_timeout must be a positive number of seconds"):
        PretrainArguments(ddp_timeout=value)
    assert PretrainArguments().ddp_timeout == 1800


def test_collective_failures_are_told_apart_from_other_errors():
    from hf_xfmr.training.pretrain import NonFiniteLossError, _is_collective_failure

    gloo = "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 20000ms for send"
    assert _is_collective_failure(RuntimeError(gloo))
    assert _is_collective_failure(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    assert not _is_collective_failure(NonFiniteLossError("The training loss is not finite at step 3"))
    assert not _is_collective_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not _is_collective_failure(OSError("Read timed out"))


def test_cli_reports_a_collective_failure_in_one_line(monkeypatch, capsys, tmp_path):
    import hf_xfmr.training
    from hf_xfmr import cli
    from hf_xfmr.training import CollectiveError

    message = "The run stopped in step 2 (of 3 steps): a collective operation between the 2 processes did not complete"

    def fail(settings, callbacks=()):
        raise CollectiveError(message)
    monkeypatch.setattr(hf_xfmr.training, "pretrain", fail)
    assert cli.main(["pretrain", "--output_dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"pretrain: error: {message}" in err and "bug" not in err
