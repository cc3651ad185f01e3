"""QLoRA on hf_xfmr decoders, the standard way, on CPU: `from_pretrained(..., quantization_config=
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"))` (our checkpoints, and transformers checkpoints
converted on load), `peft.prepare_model_for_kbit_training`, LoRA on every projection, training, the adapter saved
and reloaded, and merged into a full-precision copy of the base.

Tolerances (logits of order 1):
- fp32 compute (`bnb_4bit_compute_dtype=torch.float32`): bitsandbytes dequantizes each NF4 weight to fp32 and
  multiplies in fp32, so a quantized model equals the full-precision model holding the dequantized weights, and an
  adapter merged into that dequantized copy equals the adapter model, within fp32 rounding (1e-5).
- bf16 compute: each 4-bit layer rounds its input and weight to bf16 (8 significant bits, up to 2^-9 relative each)
  while the merged copy runs in fp32; over the 12-14 such layers of two blocks that compounds to ~1e-2 (measured
  1.9e-2 GPT, 1.4e-2 Llama): bound 3e-2, below the NF4 rounding of the base itself (~5e-2 on these logits).
- merged into the original full-precision weights (what users usually do), the outputs differ from the adapter
  model's by the base's own quantization error, not by the merge: checked by the training gain surviving the merge.
"""

import sys

import bitsandbytes as bnb
import pytest
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from torch import nn
from transformers import BitsAndBytesConfig

import hf_xfmr
from hf_xfmr.models.gpt import XfmrGPTForCausalLM

from ..doc_snippets import snippet
from .finetune_helpers import one_thread  # noqa: F401  (autouse)

VOCAB, PAD = 64, 0
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def nf4(compute_dtype=torch.float32) -> BitsAndBytesConfig:
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype)


def _gpt_reference():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, n_inner=128,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=1,
                                     pad_token_id=PAD)
    return transformers.GPT2LMHeadModel(config)


def _llama_reference():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=1, pad_token_id=PAD)
    return transformers.LlamaForCausalLM(config)


# family -> (our causal-LM class, a builder of the transformers reference). Llama joins once its family imports.
FAMILIES = {"gpt": (XfmrGPTForCausalLM, _gpt_reference)}
try:
    from hf_xfmr.models.llama import XfmrLlamaForCausalLM
except ImportError:  # the Llama family is being added
    XfmrLlamaForCausalLM = None
if XfmrLlamaForCausalLM is not None:
    FAMILIES["llama"] = (XfmrLlamaForCausalLM, _llama_reference)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def checkpoints(request, tmp_path_factory):
    """(our class, a saved transformers checkpoint folder, the same weights saved as our checkpoint folder)."""
    cls, build = FAMILIES[request.param]
    folder = tmp_path_factory.mktemp(f"qlora_{request.param}")
    torch.manual_seed(0)
    reference = build()
    reference.save_pretrained(folder / "transformers")
    hf_xfmr.from_transformers(reference).save_pretrained(folder / "ours")
    return cls, folder / "transformers", folder / "ours"


def sft_batch(rows=6, prompt_len=6, seed=0):
    """A small prompt/completion set: the completion repeats the prompt's tokens plus one, loss on the completion
    only; right-padded to different lengths (so the unpadded path runs). Returns input_ids, attention_mask, labels."""
    g = torch.Generator().manual_seed(seed)
    ids, labels, mask = [], [], []
    length = 2 * prompt_len + 2
    for row in range(rows):
        n = prompt_len - row % 3
        prompt = torch.randint(2, VOCAB - 1, (n,), generator=g)
        seq = torch.cat([prompt, torch.tensor([1]), prompt + 1])
        pad = length - len(seq)
        ids.append(torch.nn.functional.pad(seq, (0, pad), value=PAD))
        labels.append(torch.nn.functional.pad(torch.cat([torch.full((n + 1,), -100), prompt + 1]), (0, pad),
                                              value=-100))
        mask.append(torch.nn.functional.pad(torch.ones(len(seq), dtype=torch.long), (0, pad)))
    return torch.stack(ids), torch.stack(mask), torch.stack(labels)


def lora(model, **kwargs):
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [p for p in PROJECTIONS if p in names]
    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, **kwargs))


def projections(model):
    return {name: module for name, module in model.named_modules() if name.rsplit(".", 1)[-1] in PROJECTIONS}


def logits(model, ids, mask):
    with torch.no_grad():
        return model.eval()(input_ids=ids, attention_mask=mask).logits[mask.bool()]  # (N, V) real positions


@pytest.mark.parametrize("source", ["ours", "transformers"])
def test_4bit_load_quantizes_every_projection(checkpoints, source):
    cls, hf_folder, our_folder = checkpoints
    folder = our_folder if source == "ours" else hf_folder
    model = cls.from_pretrained(folder, quantization_config=nf4())
    assert model.is_loaded_in_4bit and model.config.quantization_config.load_in_4bit
    assert model.name_or_path == str(folder)  # not the temporary folder a converted checkpoint passes through
    layers = projections(model)
    assert layers and all(isinstance(m, bnb.nn.Linear4bit) and m.weight.quant_type == "nf4" for m in layers.values())
    # the vocabulary projection stays full precision (transformers skips the output embeddings), tied when tied
    head = model.get_output_embeddings()
    assert type(head) is nn.Linear and head.weight.dtype == torch.float32
    if model.config.tie_word_embeddings:
        assert head.weight is model.get_input_embeddings().weight

    # Reference: the full-precision model holding the dequantized NF4 weights.
    reference = cls.from_pretrained(our_folder)
    for name, module in projections(reference).items():
        quantized = layers[name].weight
        module.weight.data = bnb.functional.dequantize_4bit(quantized.data, quantized.quant_state).float()
    ids, mask, _ = sft_batch()
    torch.testing.assert_close(logits(model, ids, mask), logits(reference, ids, mask), rtol=0, atol=1e-5)


def test_a_quantized_transformers_model_is_refused_with_the_fix(checkpoints):
    _, hf_folder, _ = checkpoints
    config = transformers.AutoConfig.from_pretrained(hf_folder)
    model_class = getattr(transformers, config.architectures[0])
    quantized = model_class.from_pretrained(hf_folder, quantization_config=nf4())
    with pytest.raises(ValueError, match=r"quantized \(bitsandbytes\).*full-precision.*dequantize\(\)"):
        hf_xfmr.from_transformers(quantized)


def test_both_sources_quantize_identically(checkpoints):
    cls, hf_folder, our_folder = checkpoints
    a, b = (projections(cls.from_pretrained(f, quantization_config=nf4())) for f in (hf_folder, our_folder))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name].weight.data, b[name].weight.data), name


def test_4bit_training_unpadded_equals_padded(checkpoints):
    """The unpadded default path (gathers of the real tokens, chunked LM loss) on a 4-bit base with LoRA and
    gradient checkpointing: loss and LoRA gradients equal the padded path's (`unpad_inputs=False`)."""
    cls, hf_folder, _ = checkpoints
    ids, mask, labels = sft_batch()
    results = []
    for unpad in (True, False):
        model = prepare_model_for_kbit_training(cls.from_pretrained(hf_folder, quantization_config=nf4(),
                                                                    unpad_inputs=unpad))
        assert model.is_gradient_checkpointing
        torch.manual_seed(1)
        peft_model = lora(model, init_lora_weights=False).train()  # nonzero B: every adapter gets a gradient
        loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads = {n: p.grad for n, p in peft_model.named_parameters() if p.requires_grad}
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values())
        results.append((loss.detach(), grads))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, rtol=0, atol=1e-5)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-5, msg=name)


def train(peft_model, steps=30, lr=3e-3):
    ids, mask, labels = sft_batch()
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=lr)
    peft_model.train()
    losses = []
    for _ in range(steps):
        loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def loss_of(model):
    ids, mask, labels = sft_batch()
    with torch.no_grad():
        return model.eval()(input_ids=ids, attention_mask=mask, labels=labels).loss.item()


def test_qlora_trains_saves_reloads_and_merges(checkpoints, tmp_path):
    cls, hf_folder, _ = checkpoints
    model = prepare_model_for_kbit_training(cls.from_pretrained(hf_folder, quantization_config=nf4()),
                                            gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(0)
    peft_model = lora(model)
    losses = train(peft_model)
    assert losses[-1] < 0.8 * losses[0], losses
    peft_model.save_pretrained(tmp_path / "adapter")
    ids, mask, _ = sft_batch()
    trained = logits(peft_model, ids, mask)

    # the adapter reloaded onto a fresh 4-bit base gives the same outputs
    fresh_base = cls.from_pretrained(hf_folder, quantization_config=nf4())
    reloaded = PeftModel.from_pretrained(fresh_base, tmp_path / "adapter")
    torch.testing.assert_close(logits(reloaded, ids, mask), trained, rtol=0, atol=1e-6)

    # merged into a full-precision copy of the 4-bit base (its dequantized weights): the adapter model's outputs
    base = cls.from_pretrained(hf_folder, quantization_config=nf4())
    base.dequantize()
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in base.modules())
    merged = PeftModel.from_pretrained(base, tmp_path / "adapter").merge_and_unload()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    torch.testing.assert_close(logits(merged, ids, mask), trained, rtol=0, atol=1e-5)

    # merged into the original full-precision weights: what was learned carries over (the outputs differ by the
    # base's quantization error only)
    untrained = loss_of(cls.from_pretrained(hf_folder))
    merged_original = PeftModel.from_pretrained(cls.from_pretrained(hf_folder), tmp_path / "adapter").merge_and_unload()
    gain = untrained - loss_of(peft_model)
    assert untrained - loss_of(merged_original) > 0.8 * gain, (untrained, loss_of(merged_original), loss_of(peft_model))


def test_qlora_bf16(checkpoints, tmp_path):
    """bf16 compute and a bf16 load: `prepare_model_for_kbit_training` upcasts the norms, embeddings and head to
    fp32; training runs, and the merge into the dequantized copy matches within the bf16 bound (module docstring)."""
    cls, hf_folder, _ = checkpoints
    model = cls.from_pretrained(hf_folder, quantization_config=nf4(torch.bfloat16), dtype=torch.bfloat16)
    assert model.get_output_embeddings().weight.dtype == torch.bfloat16
    model = prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False})
    assert {p.dtype for p in model.parameters()} == {torch.float32, torch.uint8}
    torch.manual_seed(0)
    peft_model = lora(model)
    losses = train(peft_model, steps=10)
    assert losses[-1] < losses[0], losses
    peft_model.save_pretrained(tmp_path / "adapter")
    ids, mask, _ = sft_batch()
    base = cls.from_pretrained(hf_folder, quantization_config=nf4(torch.bfloat16))
    base.dequantize()
    merged = PeftModel.from_pretrained(base.float(), tmp_path / "adapter").merge_and_unload()
    torch.testing.assert_close(logits(merged, ids, mask), logits(peft_model, ids, mask), rtol=0, atol=3e-2)


def test_docs_qlora_snippet(tmp_path, monkeypatch):
    """The QLoRA snippet of docs/finetuning.md, on a tiny transformers GPT-2 folder and a few batches."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    _gpt_reference().save_pretrained("gpt2-checkpoint")
    ids, mask, labels = sft_batch()
    namespace = {"batches": [dict(input_ids=ids, attention_mask=mask, labels=labels)] * 3}
    exec(snippet("prepare_model_for_kbit_training(model", "docs/finetuning.md"), namespace)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in namespace["model"].modules())
    merged = XfmrGPTForCausalLM.from_pretrained("merged")
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in merged.modules())
    torch.testing.assert_close(logits(merged, ids, mask), logits(namespace["merged"], ids, mask), rtol=0, atol=1e-6)
    assert loss_of(merged) < loss_of(XfmrGPTForCausalLM.from_pretrained("gpt2-checkpoint"))


def test_4bit_classification_head_stays_full_precision_and_trains(checkpoints):
    """A task head is the model's last module, which transformers leaves unquantized: PEFT trains and saves it in
    full (`modules_to_save`) while the backbone's projections are 4-bit."""
    cls, hf_folder, _ = checkpoints
    module = sys.modules[cls.__module__]
    classifier_class = getattr(module, cls.__name__.replace("ForCausalLM", "ForSequenceClassification"))
    model = classifier_class.from_pretrained(hf_folder, quantization_config=nf4(), num_labels=3)
    assert all(isinstance(m, bnb.nn.Linear4bit) for m in projections(model).values())
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in model.classifier.modules())
    model = prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False})
    peft_model = lora(model, task_type="SEQ_CLS", modules_to_save=["classifier"]).train()
    ids, mask, _ = sft_batch()
    loss = peft_model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2, 0, 1, 2])).loss
    loss.backward()
    head = [p for n, p in peft_model.named_parameters() if "classifier" in n and p.requires_grad]
    assert head and all(p.dtype == torch.float32 and p.grad is not None and p.grad.abs().sum() > 0 for p in head)
