"""`hf-xfmr pretrain --compile`: the compiled run trains as the eager one (losses within 1e-5 in fp32, same seed),
batches of other lengths and other numbers of real tokens do not recompile after the warm-up, a model that cannot
compile trains eagerly with one warning naming it, and checkpoints keep the plain parameter names.

The runs compile with dynamo and AOTAutograd through a backend that counts the graphs it is handed and runs them with
`aot_eager` (forward and backward traced with dynamic shapes, as inductor gets them): inductor's C++ compilation of
each graph takes minutes on this 2-core machine, and what these tests check (tracing, guards, recompilation, the
fallback) happens before the backend. Users get inductor (`--compile_backend` defaults to it; checked below)."""

import json
import warnings

import pytest
import torch
from safetensors.torch import load_file
from torch._dynamo.backends.registry import lookup_backend, register_backend

import hf_xfmr  # noqa: F401
from hf_xfmr.training import PretrainArguments, PretrainCallback, pretrain
from hf_xfmr.training.arguments import FinetuneArguments
from hf_xfmr.training.compiled import CompileFallbackWarning, compile_model, compiled_forward

GRAPHS: list[int] = []  # the graphs the counting backend was handed, by node count
DELEGATE = {"backend": "aot_eager"}  # what runs them: aot_eager (forward and backward traced) or eager (dynamo only)


@register_backend(name="hf_xfmr_test_counting")
def _counting_backend(gm, example_inputs, **kwargs):
    GRAPHS.append(len(gm.graph.nodes))
    return lookup_backend(DELEGATE["backend"])(gm, example_inputs, **kwargs)


@register_backend(name="hf_xfmr_test_failing")
def _failing_backend(gm, example_inputs, **kwargs):
    raise RuntimeError("this backend compiles nothing")


# (length of the micro-batch's rows, real tokens of its rows): every step another padded length, and rows padded
# on the right by different amounts; the first two steps are the warm-up (the first runs eagerly: it counts the
# model's FLOPs for the log; the second compiles).
SHAPES = [(40, (40, 40, 40, 40)), (40, (40, 31, 40, 22)), (33, (33, 33, 20, 33)), (47, (47, 47, 47, 10)),
          (26, (26, 19, 26, 26)), (47, (47, 47, 47, 47)), (38, (38, 12, 38, 30)), (21, (21, 21, 21, 21))]
WARMUP = 2


class VaryBatches(PretrainCallback):
    """Cuts each micro-batch to the next length of SHAPES and pads its rows on the right to their real lengths (the
    mask 0 and no target there); records the loss and the graphs compiled so far after each step."""

    def __init__(self):
        self.count, self.losses, self.graphs = 0, [], []

    def on_micro_batch(self, run, batch):
        length, real = SHAPES[self.count % len(SHAPES)]
        self.count += 1
        for key in ("input_ids", "attention_mask", "labels", "token_type_ids"):
            if key in batch:
                batch[key] = batch[key][:, :length].clone()
        for row, n in enumerate(real):
            batch["attention_mask"][row, n:] = 0
            batch["labels"][row, n:] = -100

    def on_step_end(self, run, record):
        self.losses.append(record["loss"])
        self.graphs.append(len(GRAPHS))


# arch: (objective, config overrides). Without dropout: the compiled and the eager run draw no masks. The causal LMs
# keep their default chunked loss (layers/cross_entropy.py), which runs dense when compiled: its loop over row
# chunks would make the graph depend on the number of rows, and recompile for each new B x T.
FAMILIES = {
    "bert": ("mlm", "hidden_dropout_prob=0,attention_probs_dropout_prob=0"),
    "gpt": ("clm", "resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"),
    "llama": ("clm", "attention_dropout=0"),
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory, bert_tok, gpt_tok):
    """A saved tokenizer per family (the eager and the compiled run must share the vocabulary)."""
    from hf_xfmr.data import default_corpus, train_tokenizer

    folders = {}
    for arch, tokenizer in (("bert", bert_tok), ("gpt", gpt_tok),
                            ("llama", train_tokenizer("llama", default_corpus(max_documents=30), vocab_size=300))):
        folders[arch] = tmp_path_factory.mktemp(f"tokenizer_{arch}")
        tokenizer.save_pretrained(folders[arch])
    return folders


def _run(arch, tokenizer, output_dir, steps=len(SHAPES), **overrides):
    objective, config = FAMILIES[arch]
    callback = VaryBatches()
    args = PretrainArguments(
        arch=arch, objective=objective, max_steps=steps, max_documents=40, tokenizer=str(tokenizer),
        config_overrides=config, per_device_train_batch_size=4, max_seq_length=48, logging_steps=1, save_steps=0,
        eval_fraction=0.0, progress_bar=False, report_to_tensorboard=False, output_dir=str(output_dir),
        peak_tflops=1.0, **overrides)
    return pretrain(args, callbacks=[callback]), callback


@pytest.mark.slow  # dynamo (and AOTAutograd) trace each model's forward and backward: 10-30 s per family here
@pytest.mark.parametrize("arch,delegate", [("bert", "aot_eager"), ("gpt", "eager"), ("llama", "eager")])
def test_compiled_run_trains_as_eager_without_recompiling(arch, delegate, tokenizers, tmp_path, monkeypatch):
    torch._dynamo.reset()
    GRAPHS.clear()
    monkeypatch.setitem(DELEGATE, "backend", delegate)
    _, eager = _run(arch, tokenizers[arch], tmp_path / "eager")
    assert not GRAPHS
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        result, compiled = _run(arch, tokenizers[arch], tmp_path / "compiled", compile=True,
                                compile_backend="hf_xfmr_test_counting")
    torch._dynamo.reset()
    assert all(loss is not None for loss in eager.losses)
    torch.testing.assert_close(torch.tensor(compiled.losses), torch.tensor(eager.losses), rtol=0, atol=1e-5)
    # The first step ran eagerly (the FLOP count), the second compiled the forward (and, behind a graph break, its
    # rest) and its backward; steps of other lengths and real-token counts compiled nothing more.
    assert compiled.graphs[0] == 0 and compiled.graphs[WARMUP - 1] > 0
    assert compiled.graphs[WARMUP - 1:] == [compiled.graphs[WARMUP - 1]] * (len(SHAPES) - WARMUP + 1)
    # The checkpoint holds the plain parameter names (compiled in place: no `_orig_mod.` prefix).
    names = load_file(result.model_dir / "model.safetensors").keys()
    assert names and not any("_orig_mod" in name for name in names)


def test_a_model_that_cannot_compile_trains_eagerly_with_one_warning(tokenizers, tmp_path):
    torch._dynamo.reset()
    _, eager = _run("bert", tokenizers["bert"], tmp_path / "eager", steps=4)
    with pytest.warns(CompileFallbackWarning) as caught:
        _, fallback = _run("bert", tokenizers["bert"], tmp_path / "fallback", steps=4, compile=True,
                           compile_backend="hf_xfmr_test_failing")
    torch._dynamo.reset()
    messages = [str(w.message) for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert len(messages) == 1
    assert "cannot compile XfmrBertForMaskedLM" in messages[0] and "this backend compiles nothing" in messages[0]
    assert "runs eagerly" in messages[0]
    assert fallback.losses == eager.losses  # the same eager steps, bit for bit


@pytest.mark.parametrize("products", ["fp32", "native"])
def test_bf16_autocast_stays_eager_where_its_products_run_on_the_fp32_kernels(products, monkeypatch):
    """On a CPU without AMX, bf16 autocast's products run on the fp32 kernels (layers.bf16_products), which a
    compiled graph would not use: the compiled model runs those steps eagerly (one warning) and compiles fp32 ones.
    With torch's bf16 kernels (`native`, or a CPU with AMX) the bf16 steps are compiled."""
    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    monkeypatch.setenv("HF_XFMR_BF16_PRODUCTS", products)
    torch._dynamo.reset()
    GRAPHS.clear()
    torch.manual_seed(0)
    model = XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny", vocab_size=50)).eval()  # no dropout
    ids = torch.randint(5, 50, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = model(input_ids=ids, labels=ids).loss
    compile_model(model, "hf_xfmr_test_counting")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
    said = [str(w.message) for w in caught if issubclass(w.category, CompileFallbackWarning)]
    if products == "fp32":
        assert torch.equal(loss, eager) and not GRAPHS  # eager, nothing compiled
        assert len(said) == 1 and "runs eagerly under bf16 autocast" in said[0] and "HF_XFMR_BF16_PRODUCTS" in said[0]
        model(input_ids=ids, labels=ids)  # fp32: compiled
        assert GRAPHS
    else:
        assert GRAPHS and not said
    torch._dynamo.reset()


def test_compile_model_is_in_place_and_idempotent():
    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM

    model = XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny", vocab_size=50))
    names = list(model.state_dict())
    assert compile_model(model, "eager") is model
    forward = compiled_forward(model)
    assert forward is not None and forward.backend == "eager" and forward.model_name == "XfmrBertForMaskedLM"
    assert compile_model(model) is model and compiled_forward(model) is forward  # compiled once
    assert list(model.state_dict()) == names
    other = XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny", vocab_size=50))
    with pytest.raises(ValueError, match="--compile_backend 'nope' is not a torch.compile backend; choose one of"):
        compile_model(other, "nope")
    assert compiled_forward(other) is None
    import inspect

    assert "input_ids" in inspect.signature(model.forward).parameters  # Trainer reads the forward's signature


def test_the_compile_options():
    args = PretrainArguments(compile=True)
    assert args.compile_backend == "inductor"  # the user path: inductor
    assert FinetuneArguments(arch="bert", dataset="vader", compile=True).compile_backend == "inductor"
    with pytest.raises(ValueError, match="--compile_backend must name a torch.compile backend"):
        PretrainArguments(compile=True, compile_backend=" ")
    with pytest.raises(ValueError, match="--peak_tflops must be a positive number of TFLOP/s"):
        PretrainArguments(peak_tflops=0)


def test_finetune_compiles_once_and_trains_as_eager(tmp_path, wordpiece_tokenizer, monkeypatch):
    """`hf-xfmr finetune --compile`: Trainer's padded batches (every batch padded to its longest text, so lengths
    vary) compile in the first step only, and the losses are the eager run's."""
    import transformers

    from hf_xfmr.training import finetune

    from .finetune_helpers import quick_args, sentiment_dataset

    compiled_after_step, lengths = [], []
    training_step = transformers.Trainer.training_step

    def counted_step(self, model, inputs, *args, **kwargs):
        loss = training_step(self, model, inputs, *args, **kwargs)
        compiled_after_step.append(len(GRAPHS))
        lengths.append(inputs["input_ids"].shape[1])
        return loss

    monkeypatch.setattr(transformers.Trainer, "training_step", counted_step)
    monkeypatch.setitem(DELEGATE, "backend", "eager")
    torch._dynamo.reset()
    GRAPHS.clear()
    options = dict(max_steps=8, eval_steps=8, logging_steps=1, learning_rate=1e-3, per_device_train_batch_size=4)
    dataset = sentiment_dataset(train=96, validation=16)
    eager = finetune(quick_args(tmp_path / "eager", **options), dataset=dataset, tokenizer=wordpiece_tokenizer)
    assert not GRAPHS
    compiled_after_step.clear()
    lengths.clear()
    compiled = finetune(quick_args(tmp_path / "compiled", compile=True, compile_backend="hf_xfmr_test_counting",
                                   **options), dataset=dataset, tokenizer=wordpiece_tokenizer)
    torch._dynamo.reset()
    assert len(set(lengths[1:])) > 1  # the batches after the first do vary in length
    assert compiled_after_step[0] > 0 and compiled_after_step == [compiled_after_step[0]] * 8

    def losses(result):
        return [row["loss"] for row in map(json.loads, result.log_file.read_text().splitlines()) if "loss" in row]

    torch.testing.assert_close(torch.tensor(losses(compiled)), torch.tensor(losses(eager)), rtol=0, atol=1e-5)


def test_the_trainer_snippet_of_the_finetuning_page():
    from ..doc_snippets import run_checking_comments, snippet

    namespace = run_checking_comments(snippet("model = compile_model(model)", "docs/finetuning.md"))
    model = namespace["model"]
    assert compiled_forward(model) is not None and compiled_forward(model).backend == "inductor"
    assert type(model).__name__ == "XfmrBertForSequenceClassification"
