"""FSDP2 (`--fsdp`, torch's `fully_shard` through Accelerate) with two CPU processes over gloo.

One launch trains every pretraining objective (one architecture each, plus Mixtral, whose experts must all run on
every rank, and ModernBERT, which unpads in its own code) twice, one run after the other in the same two processes:
under DDP, then under `--fsdp full_shard`, both with the same saved tokenizer. The ranks see micro-batches that
differ in everything a model could branch on (`pretrain_worker.Skew`: full rows, heavily padded rows, a micro-batch
without targets), so FSDP's rule, the same as ZeRO-3's, is checked too: every process gathers the same layers in the
same order, or they wait on each other for ever. The losses must equal DDP's (same global batch) and the exported
model DDP's. The same launch then writes sharded checkpoints and resumes one exactly, in a run of its own.
(test_distributed_module_order.py checks the module-order property in one process, for every architecture.) The
`--fsdp` setting itself (config files, refusals, layer classes) is checked without a launch, at the end.
"""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

import hf_xfmr  # noqa: F401  (registers every architecture)
from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.training import read_log

from .launch import check, check_bert_mlm_export, launch_command, one_case_per_objective, run, write_config

STEPS = 2
CASES = one_case_per_objective(("mixtral", "clm"), ("modernbert", "mlm"))


# A BERT MLM run with a sharded checkpoint every 2 steps, dropout on (exact resumption includes the RNG).
RESUMABLE = dict(arch="bert", objective="mlm", fsdp="full_shard", max_steps=4, save_steps=2, save_total_limit=None,
                 max_documents=60)


def _args(out, **extra) -> dict:
    settings = dict(max_steps=STEPS, max_documents=30, vocab_size=300, per_device_train_batch_size=4,
                    max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.1, max_eval_examples=8,
                    progress_bar=False, ddp_timeout=120, output_dir=str(out))
    return {**settings, **extra}


@pytest.fixture(scope="module")
def objectives(tmp_path_factory, saved_tokenizer):
    """For every case: a DDP run, then an FSDP run on the same data and tokenizer; then an FSDP run with sharded
    checkpoints and its resumption from the first one (all in one launch)."""
    folder = tmp_path_factory.mktemp("fsdp_objectives")
    # One saved tokenizer per architecture, loaded by both runs (a run that trains its own draws random numbers
    # the other would not, and its examples would differ).
    texts = default_corpus(max_documents=30)
    for arch in sorted({arch for arch, _ in CASES}):
        train_tokenizer(arch, texts, vocab_size=300).save_pretrained(folder / f"tokenizer-{arch}")
    runs = []
    for arch, objective in CASES:
        ddp, fsdp = folder / f"{arch}-{objective}-ddp", folder / f"{arch}-{objective}-fsdp"
        common = dict(arch=arch, objective=objective, tokenizer=str(folder / f"tokenizer-{arch}"))
        runs.append({"args": _args(ddp, **common), "report": str(ddp / "report"), "skew": True})
        runs.append({"args": _args(fsdp, **common, fsdp="full_shard"), "report": str(fsdp / "report"), "skew": True})
    resumable = _args(folder / "full", **RESUMABLE, tokenizer=str(saved_tokenizer))
    runs.append({"args": resumable, "report": str(folder / "full" / "report")})
    # Resumed from the full run's first checkpoint, into a folder of its own (the checkpoint is read, not moved).
    runs.append({"args": {**resumable, "output_dir": str(folder / "resumed"),
                          "resume": str(folder / "full" / "checkpoints" / "step_2")}})
    config = write_config(folder, "runs", {}, runs=runs)
    log = folder / "launch.log"
    check(run(launch_command(config, 2), 900, log), log)
    return folder


def _losses(folder) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_log(folder / "log.jsonl") if r.get("loss") is not None]


@pytest.mark.slow
@pytest.mark.parametrize("arch,objective", CASES, ids=[f"{a}-{o}" for a, o in CASES])
def test_fsdp_trains_like_ddp(objectives, arch, objective):
    ddp, fsdp = objectives / f"{arch}-{objective}-ddp", objectives / f"{arch}-{objective}-fsdp"
    for rank in (0, 1):
        info = json.loads((fsdp / "report" / f"rank{rank}.json").read_text())
        assert info["world_size"] == 2 and info["backend"] == "gloo" and info["step"] == STEPS
        assert info["distributed_type"] == "DistributedType.FSDP"
    shapes = [json.loads((fsdp / "report" / f"rank{r}.json").read_text())["shapes"] for r in (0, 1)]
    assert shapes[0] != shapes[1]  # the ranks' micro-batches differed (the module-order rule was exercised)
    # The same global batch, the same losses (gradients reduce-scattered instead of all-reduced: rounding only).
    expected, got = _losses(ddp), _losses(fsdp)
    assert [s for s, _ in got] == [s for s, _ in expected] and expected
    for (_, a), (_, b) in zip(expected, got):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (expected, got)
    # The export gathers the shards into the usual folder: the weights DDP's run exports, within rounding.
    expected, got = load_file(str(ddp / "model.safetensors")), load_file(str(fsdp / "model.safetensors"))
    assert got.keys() == expected.keys() and got
    for name in got:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-5, msg=name)
    assert (fsdp / "config.json").is_file()


@pytest.mark.slow
def test_sharded_checkpoint_resumes_exactly_and_exports_a_full_model(objectives):
    full, resumed = objectives / "full", objectives / "resumed"
    step2 = full / "checkpoints" / "step_2"
    # Each process wrote its own shard, safetensors only: no file holds the whole word-embedding matrix.
    names = sorted(p.name for p in (step2 / "fsdp").iterdir())
    assert names == ["model_0.safetensors", "model_1.safetensors", "optimizer_0.json", "optimizer_0.safetensors",
                     "optimizer_1.json", "optimizer_1.safetensors"]
    exported = load_file(str(full / "model.safetensors"))
    key = next(k for k in exported if k.endswith("word_embeddings.weight"))
    shards = [load_file(str(step2 / "fsdp" / f"model_{r}.safetensors"))[key] for r in (0, 1)]
    assert [s.shape[0] for s in shards] == [math.ceil(exported[key].shape[0] / 2),
                                            exported[key].shape[0] - math.ceil(exported[key].shape[0] / 2)]
    assert json.loads((step2 / "fsdp" / "optimizer_1.json").read_text())["sharded"]  # Adam's moments: shards too

    # Steps 3-4 of the resumed run and its exported weights equal the uninterrupted run's, bit for bit.
    assert _losses(resumed) == [(s, loss) for s, loss in _losses(full) if s > 2] and len(_losses(full)) == 4
    again = load_file(str(resumed / "model.safetensors"))
    assert again.keys() == exported.keys() and all(torch.equal(again[k], exported[k]) for k in exported)
    check_bert_mlm_export(full, exported)


# -- the --fsdp setting (no launch) --------------------------------------------------------------------------

@pytest.mark.parametrize("name,reshard", [("full_shard", True), ("shard_grad_op", False)])
def test_shipped_fsdp_configs_resolve_from_any_folder(name, reshard, tmp_path, monkeypatch):
    from hf_xfmr.training.fsdp import resolve_fsdp_config, shipped_fsdp_configs

    monkeypatch.chdir(tmp_path)
    assert shipped_fsdp_configs() == ["full_shard", "shard_grad_op"]
    assert resolve_fsdp_config(name) == {
        "fsdp_version": 2, "reshard_after_forward": reshard, "auto_wrap_policy": "transformer_based_wrap",
        "state_dict_type": "SHARDED_STATE_DICT", "cpu_offload": False, "activation_checkpointing": False}


def test_an_accelerate_fsdp_config_file_is_read_relative_to_the_current_folder(tmp_path, monkeypatch):
    from hf_xfmr.training.fsdp import resolve_fsdp_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n"
        "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n  fsdp_auto_wrap_policy: transformer_based_wrap\n"
        "  fsdp_transformer_layer_cls_to_wrap: XfmrBertLayer, XfmrGPTLayer\n")
    assert resolve_fsdp_config("mine.yaml") == {
        "fsdp_version": 2, "reshard_after_forward": False, "auto_wrap_policy": "transformer_based_wrap",
        "transformer_cls_names_to_wrap": ["XfmrBertLayer", "XfmrGPTLayer"], "state_dict_type": "SHARDED_STATE_DICT"}


@pytest.mark.parametrize("text,message", [
    ("fsdp_version: 1\n", "must set fsdp_version: 2"),
    ("fsdp_version: 2\nfsdp_sharding_strategy: FULL_SHARD\n", "sets fsdp_sharding_strategy, which hf-xfmr pretrain"),
    ("fsdp_version: 2\nfsdp_state_dict_type: FULL_STATE_DICT\n", "must be SHARDED_STATE_DICT"),
    ("fsdp_version: 2\nfsdp_auto_wrap_policy: EVERYTHING\n", "fsdp_auto_wrap_policy must be one of"),
    ("distributed_type: DEEPSPEED\nfsdp_config: {}\n", "not FSDP"),
    ("[1, 2]\n", "must hold a mapping"),
])
def test_a_bad_fsdp_config_is_refused_with_what_to_do(text, message, tmp_path):
    from hf_xfmr.training.fsdp import resolve_fsdp_config

    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ValueError, match=message):
        resolve_fsdp_config(str(tmp_path / "bad.yaml"))
    with pytest.raises(ValueError, match="neither an FSDP config shipped with hf_xfmr"):
        resolve_fsdp_config("full_shards")


def test_fsdp_is_refused_with_deepspeed_and_without_a_launcher(monkeypatch):
    from hf_xfmr.training import PretrainArguments
    from hf_xfmr.training.pretrain import make_accelerator

    with pytest.raises(ValueError, match="--fsdp and --deepspeed both shard the model: choose one"):
        PretrainArguments(fsdp="full_shard", deepspeed="zero3")
    with pytest.raises(ValueError, match="--fsdp must name a config"):
        PretrainArguments(fsdp=" ")
    for name in ("LOCAL_RANK", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="FSDP runs in processes started by a launcher"):
        make_accelerator(PretrainArguments(fsdp="full_shard"))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # an Accelerate DeepSpeed config, and --fsdp
    with pytest.raises(ValueError, match="FSDP and DeepSpeed both shard the model"):
        make_accelerator(PretrainArguments(fsdp="full_shard"))


def test_fsdp_layers_are_the_called_layers_and_shared_weights_are_grouped():
    from hf_xfmr.models import get_architecture
    from hf_xfmr.training import get_objective
    from hf_xfmr.training.fsdp import fsdp_layer_classes, shared_parameter_owners

    def model(arch, objective):
        arch, objective = get_architecture(arch), get_objective(objective)
        cls = objective.model_class(arch) if objective.model_class is not None else arch.model_class(objective.task)
        return cls._from_config(arch.config_class.from_preset("tiny", vocab_size=300))

    # ALBERT's layer group is never called (its layers are): its layers are the units.
    assert fsdp_layer_classes(model("albert", "mlm")) == ["XfmrAlbertLayer"]
    # ModernBERT's embeddings hold the input embeddings, which Accelerate shards itself.
    assert fsdp_layer_classes(model("modernbert", "mlm")) == ["XfmrModernBertLayer"]
    assert fsdp_layer_classes(model("bert", "mlm")) == ["XfmrBertLayer"]
    # RTD: the generator's decoder shares the discriminator's word embeddings (one FSDP group for both).
    rtd = model("electra", "rtd")
    (owners,) = shared_parameter_owners(rtd)
    assert owners[0] is rtd.discriminator.model.embeddings.word_embeddings
    assert owners[1] is rtd.generator.lm_head.decoder
