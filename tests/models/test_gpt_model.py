"""GPT on its own: packed documents, the chunked LM loss, checkpointing, save/load and Auto classes,
configs and presets, initialisation, input checks, PEFT."""

import math
import types

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.data import DataCollatorForCLM, pack_stream
from hf_xfmr.models.gpt import (
    XfmrGPTConfig,
    XfmrGPTForCausalLM,
    XfmrGPTForSequenceClassification,
    XfmrGPTForTokenClassification,
    XfmrGPTModel,
)

from ._gpt import EOS, PAD, padded_batch

TINY = dict(vocab_size=99, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, n_positions=64)
DOCS = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19], [20, 21]]


def tiny(cls=XfmrGPTForCausalLM, **overrides):
    torch.manual_seed(0)
    return cls(XfmrGPTConfig.from_preset("tiny", **{**TINY, **overrides}))


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("isolate", [True, False], ids=["4d-mask", "position-ids-only"])
def test_packed_documents_equal_documents_one_by_one(attn, isolate):
    """Packed rows (documents separated by EOS, positions restarting per document) give every document
    the hidden states, summed loss and gradients it gets alone: no token attends across documents."""
    model = tiny(attn_implementation=attn).train()
    rows = list(pack_stream(DOCS, 12, EOS))  # 2 rows of 12 + a short last row; document 3 spans rows 1-2
    tok = types.SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)
    batch = DataCollatorForCLM(tok, isolate_documents=True)(rows)
    if not isolate:  # only the restarting positions and a padding mask: the model finds the documents itself
        batch["attention_mask"] = (batch["input_ids"] != PAD).long()
        batch["attention_mask"][-1, :len(rows[-1]["input_ids"])] = 1
    packed = model.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}).last_hidden_state
    packed_loss = model(**batch, num_items_in_batch=1).loss  # the summed loss
    packed_loss.backward()
    packed_grads = grads(model)
    model.zero_grad()

    # The same tokens run as separate sequences (a document cut by a row end is two sequences).
    pieces = []
    for r, row in enumerate(rows):
        starts = [i for i, p in enumerate(row["position_ids"]) if p == 0] + [len(row["input_ids"])]
        pieces += [(r, a, row["input_ids"][a:b]) for a, b in zip(starts, starts[1:])]
    total = 0.0
    for r, start, ids in pieces:
        ids = torch.tensor([ids])
        alone = model.model(input_ids=ids).last_hidden_state[0]
        assert_close(packed[r, start:start + ids.shape[1]], alone, atol=1e-5, rtol=1e-5)
        if ids.shape[1] > 1:
            loss = model(input_ids=ids, labels=ids, num_items_in_batch=1).loss
            loss.backward()
            total += loss.item()
    assert math.isclose(packed_loss.item(), total, rel_tol=1e-5)
    for name, grad in grads(model).items():
        assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_chunked_loss_equals_dense_loss_without_logits():
    model = tiny().train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    chunked = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert chunked.logits is None
    chunked.loss.backward()
    chunked_grads = grads(model)
    model.zero_grad()
    model.config.chunked_lm_loss = False
    dense = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert dense.logits.shape == (3, 11, 99)
    dense.loss.backward()
    assert_close(chunked.loss, dense.loss, atol=1e-6, rtol=1e-6)
    for name, grad in grads(model).items():
        assert_close(chunked_grads[name], grad, atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")
    model.config.chunked_lm_loss = True
    some = model(input_ids=ids, attention_mask=mask, labels=labels, logits_to_keep=2)
    assert some.logits.shape == (3, 2, 99)
    assert_close(some.loss, dense.loss, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("train", [True, False])
def test_a_batch_with_nothing_to_predict_gives_zero_loss(train):
    model = tiny().train(train)
    ids = torch.randint(1, EOS, (2, 8))
    out = model(input_ids=ids, labels=torch.full_like(ids, -100))
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    if train:
        out.loss.backward()
        assert all(torch.count_nonzero(g) == 0 for g in grads(model).values())
    one = torch.full_like(ids, -100)
    one[0, 3] = ids[0, 3]  # only position 2 predicts something (labels are shifted inside)
    assert model(input_ids=ids, labels=one).loss > 0


def test_gradient_checkpointing_gives_the_same_gradients():
    model = tiny().train()
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    expected = grads(model)
    model.zero_grad()
    model.gradient_checkpointing_enable()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=True)
    out.loss.backward()
    for name, grad in grads(model).items():
        assert_close(grad, expected[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_save_load_and_auto_classes(tmp_path):
    model = tiny().eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    ids, mask = padded_batch()
    for auto, cls in ((transformers.AutoModelForCausalLM, XfmrGPTForCausalLM), (transformers.AutoModel, XfmrGPTModel),
                      (transformers.AutoModelForSequenceClassification, XfmrGPTForSequenceClassification),
                      (transformers.AutoModelForTokenClassification, XfmrGPTForTokenClassification)):
        loaded = auto.from_pretrained(tmp_path).eval()
        assert type(loaded) is cls
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.weight is loaded.model.embeddings.word_embeddings.weight
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids, attention_mask=mask).logits,
                           model(input_ids=ids, attention_mask=mask).logits)
    assert type(transformers.AutoConfig.from_pretrained(tmp_path)) is XfmrGPTConfig
    assert hf_xfmr.models.get_architecture("gpt").objectives == ("clm",)
    model.resize_token_embeddings(120)
    assert model.lm_head.weight is model.model.embeddings.word_embeddings.weight
    assert model.lm_head.weight.shape[0] == 120


def test_presets_and_config_errors():
    small = XfmrGPTConfig.from_preset("small")
    assert (small.n_embd, small.n_layer, small.n_head, small.vocab_size) == (768, 12, 12, 50257)
    assert (small.hidden_size, small.num_hidden_layers, small.max_position_embeddings) == (768, 12, 1024)
    assert small.intermediate_size == 3072
    with pytest.raises(ValueError, match=r"`n_embd`=30 must be divisible by `n_head`=4"):
        XfmrGPTConfig.from_preset("tiny", n_embd=30)
    with pytest.raises(ValueError, match="`activation_function`='gelu_fast' is not supported"):
        XfmrGPTConfig.from_preset("tiny", activation_function="gelu_fast")
    with pytest.raises(ValueError, match="`attn_pdrop` must be a probability"):
        XfmrGPTConfig.from_preset("tiny", attn_pdrop=1.5)
    with pytest.raises(ValueError, match=r"`eos_token_id`=5000 must be None or an id in \[0, vocab_size=1000\)"):
        XfmrGPTConfig.from_preset("tiny", eos_token_id=5000)
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        XfmrGPTConfig.from_preset("huge")


def test_residual_projections_get_the_scaled_gpt2_init():
    torch.manual_seed(0)
    model = XfmrGPTModel(XfmrGPTConfig.from_preset("tiny", n_embd=128, n_head=4, n_layer=8, n_inner=512))
    std = model.config.initializer_range
    layer = model.layers[3]
    assert math.isclose(layer.attn.q_proj.weight.std().item(), std, rel_tol=0.05)
    scaled = std / math.sqrt(2 * 8)
    assert math.isclose(layer.attn.o_proj.weight.std().item(), scaled, rel_tol=0.05)
    assert math.isclose(layer.mlp.down_proj.weight.std().item(), scaled, rel_tol=0.05)
    assert torch.count_nonzero(layer.attn.o_proj.bias) == 0


def test_bad_inputs_get_clear_errors():
    model = tiny().eval()
    ids = torch.randint(1, EOS, (2, 8))
    with pytest.raises(ValueError, match=r"`input_ids` contains 120, outside the vocabulary"):
        model(input_ids=ids.masked_fill(ids == ids[0, 0], 120))
    with pytest.raises(ValueError, match=r"`position_ids` contains 64, outside the position table"):
        model(input_ids=ids, position_ids=torch.arange(57, 65).expand(2, 8))
    with pytest.raises(ValueError, match=r"`labels` has shape \(2, 7\) but the inputs have shape \(2, 8\)"):
        model(input_ids=ids, labels=ids[:, :7])
    with pytest.raises(ValueError, match="4-D `attention_mask` must have shape"):
        model(input_ids=ids, attention_mask=torch.ones(2, 1, 8, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="The inputs are empty"):
        model(input_ids=torch.zeros(2, 0, dtype=torch.long))


def test_one_lora_target_list_trains_and_generates():
    from peft import LoraConfig, get_peft_model

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    model = get_peft_model(tiny(), LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=targets))
    model.train()
    ids = torch.randint(1, EOS, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert len(trained) == 2 * len(targets) * 2  # A and B per target per layer (2 layers)
    model.eval()
    assert model.generate(input_ids=ids, max_new_tokens=3, do_sample=False).shape == (2, 11)
    classifier = get_peft_model(tiny(XfmrGPTForSequenceClassification, num_labels=2),
                                LoraConfig(task_type="SEQ_CLS", r=4, target_modules=targets))
    assert any("classifier" in n and p.requires_grad for n, p in classifier.named_parameters())


def test_text_generation_pipeline_matches_gpt2():
    from tokenizers import Tokenizer, models, pre_tokenizers

    from ..conftest import WORDS

    vocab = {tok: i for i, tok in enumerate(["<pad>", "<unk>", *WORDS, "<|endoftext|>"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                               eos_token="<|endoftext|>", padding_side="left")
    config = transformers.GPT2Config(vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0)
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(config).eval()
    ours = hf_xfmr.from_transformers(ref)
    prompts = ["the cat sat on a tree", "a king"]
    expected = transformers.pipeline("text-generation", model=ref, tokenizer=tok)(
        prompts, max_new_tokens=6, do_sample=False, batch_size=2)
    got = transformers.pipeline("text-generation", model=ours, tokenizer=tok)(
        prompts, max_new_tokens=6, do_sample=False, batch_size=2)
    assert got == expected and len(got[0][0]["generated_text"].split()) > 6


def test_trainer_trains_on_packed_rows_and_evaluates_with_logits(tmp_path):
    """Training steps run without logits (chunked loss); evaluate/predict get full logits; the loss drops."""
    rows = list(pack_stream([[5, 6, 7, 8, 9, 10, 11, 12]] * 40, 16, EOS, drop_last=True))
    collate = DataCollatorForCLM(types.SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS), isolate_documents=True)
    model = tiny()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=12,
        learning_rate=1e-2, logging_steps=3, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        disable_tqdm=True, remove_unused_columns=False,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, eval_dataset=rows[:4],
                                   data_collator=collate)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 4 and losses[-1] < 0.6 * losses[0], losses
    assert math.isfinite(trainer.evaluate()["eval_loss"])
    assert trainer.predict(rows[:4]).predictions.shape == (4, 16, 99)
