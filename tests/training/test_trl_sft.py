"""TRL's `SFTTrainer` on hf_xfmr causal LMs, on CPU: padding-free batches (`padding_free=True`) and packing
(`packing=True`, TRL's best-fit-decreasing packing, which is padding-free too) train with the same losses as
padded batches of the same sequences.

TRL flattens a padding-free batch into one row whose `position_ids` restart at 0 and passes `cu_seq_lens_q/k`,
`max_length_q/k` and `seq_idx`; hf_xfmr models keep those sequences apart on every attention backend
(`models.packing`), where transformers' own models do so only under FlashAttention (the control below).
TRL 1.16 does not check the attention implementation, so nothing needs declaring.

Tolerance: the first step's loss equals the padded run's within 1e-6 (the same sums in another order); later
steps follow parameters updated by AdamW from gradients that differ in the last bits, rtol 1e-5 over 5 steps.
"""

import pytest
import torch
import transformers
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

import hf_xfmr
from hf_xfmr.models.gpt import XfmrGPTConfig, XfmrGPTForCausalLM

from ..doc_snippets import snippet
from .finetune_helpers import one_thread  # noqa: F401  (autouse)


def _gpt(tok, ours=True):
    kwargs = dict(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                  embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id)
    if ours:
        return XfmrGPTForCausalLM(XfmrGPTConfig(**kwargs))
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs))


def _llama(tok, ours=True):
    config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                                      pad_token_id=tok.pad_token_id)
    reference = transformers.LlamaForCausalLM(config)
    return hf_xfmr.from_transformers(reference) if ours else reference


# family -> builder(tokenizer, ours) of a fresh tiny causal LM (seeded by the caller). Llama joins once it imports.
FAMILIES = {"gpt": _gpt}
try:
    from hf_xfmr.models.llama import XfmrLlamaForCausalLM
except ImportError:  # the Llama family is being added
    XfmrLlamaForCausalLM = None
if XfmrLlamaForCausalLM is not None:
    FAMILIES["llama"] = _llama


@pytest.fixture(scope="module")
def texts():
    """24 plain-text rows of 3 to 23 words (varied lengths: the padded batches carry real padding)."""
    words = ("the cat sat on a mat while the dog ran to the river and back again before the sun went down over "
             "the hills").split()
    return Dataset.from_dict({"text": [" ".join(words[i % 5: i % 5 + 3 + (7 * i) % 21]) for i in range(24)]})


def sft_losses(model, tok, data, output_dir, *, steps=5, data_collator=None, **config):
    args = SFTConfig(output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=steps, learning_rate=1e-3,
                     logging_steps=1, report_to=[], seed=0, use_cpu=True, save_strategy="no", disable_tqdm=True,
                     **config)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, data_collator=data_collator)
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert len(losses) == steps
    return losses, trainer


def fresh(family, tok, ours=True):
    torch.manual_seed(0)
    return FAMILIES[family](tok, ours)


def assert_same_losses(losses, reference):
    assert losses[0] == pytest.approx(reference[0], abs=1e-6), (losses, reference)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=1e-5, atol=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_padding_free_equals_padded(family, gpt_tok, texts, tmp_path):
    padded, _ = sft_losses(fresh(family, gpt_tok), gpt_tok, texts, tmp_path / "padded", max_length=None)
    free, trainer = sft_losses(fresh(family, gpt_tok), gpt_tok, texts, tmp_path / "free", max_length=None,
                               padding_free=True)
    assert trainer.padding_free
    assert_same_losses(free, padded)


def test_padding_free_control_transformers_attends_across(gpt_tok, texts, tmp_path):
    """The control: transformers' GPT-2 on SDPA lets the flattened sequences attend to each other, so its
    padding-free losses differ from its padded ones (the test above could fail)."""
    padded, _ = sft_losses(fresh("gpt", gpt_tok, ours=False), gpt_tok, texts, tmp_path / "padded", max_length=None)
    free, _ = sft_losses(fresh("gpt", gpt_tok, ours=False), gpt_tok, texts, tmp_path / "free", max_length=None,
                         padding_free=True)
    assert padded[0] != pytest.approx(free[0], abs=1e-3)


def unpacking_collator(pad_id):
    """Collate packed rows (TRL's `input_ids` + `seq_lengths`) back into a right-padded batch of their sequences."""

    def collate(examples):
        sequences = []
        for example in examples:
            sequences += torch.tensor(example["input_ids"]).split(list(example["seq_lengths"]))
        ids = torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=pad_id)  # (rows, T)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(s) for s in sequences], batch_first=True)
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    return collate


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packing_equals_padded_batches_of_the_same_sequences(family, gpt_tok, texts, tmp_path):
    packed, trainer = sft_losses(fresh(family, gpt_tok), gpt_tok, texts, tmp_path / "packed", max_length=48,
                                 packing=True)
    rows = trainer.train_dataset
    assert trainer.padding_free and any(len(lengths) > 1 for lengths in rows["seq_lengths"])
    # The same packed rows, in the same order (same seed, same dataset), each batch unpacked and padded.
    padded, _ = sft_losses(fresh(family, gpt_tok), gpt_tok, rows, tmp_path / "padded", max_length=None,
                           data_collator=unpacking_collator(gpt_tok.pad_token_id),
                           dataset_kwargs={"skip_prepare_dataset": True})
    assert_same_losses(packed, padded)


def test_qlora_through_sft_trainer_padding_free(gpt_tok, texts, tmp_path):
    """A 4-bit NF4 base converted on load from a transformers checkpoint, with TRL's `peft_config` (TRL prepares it
    for k-bit training and keeps the adapters in bf16) and padding-free batches: the adapters train."""
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    fresh("gpt", gpt_tok, ours=False).save_pretrained(tmp_path / "gpt2")
    nf4 = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    model = XfmrGPTForCausalLM.from_pretrained(tmp_path / "gpt2", quantization_config=nf4)
    projections = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=projections)
    args = SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, max_steps=12, learning_rate=1e-2,
                     logging_steps=1, report_to=[], seed=0, use_cpu=True, save_strategy="no", disable_tqdm=True,
                     max_length=None, padding_free=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=texts, processing_class=gpt_tok, peft_config=lora)
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert sum(losses[-3:]) < sum(losses[:3]) - 0.1, losses
    after = dict(trainer.model.named_parameters())
    assert all(not torch.equal(after[n].detach(), before) for n, before in trainable.items() if "lora_B" in n)


def test_docs_trl_snippet(gpt_tok, texts, tmp_path, monkeypatch):
    """The SFTTrainer snippet of docs/finetuning.md, on a tiny transformers GPT-2 folder."""
    monkeypatch.chdir(tmp_path)
    fresh("gpt", gpt_tok, ours=False).save_pretrained("gpt2-checkpoint")
    namespace = {"dataset": texts, "tokenizer": gpt_tok}
    exec(snippet("SFTConfig(output_dir=\"sft\"", "docs/finetuning.md"), namespace)
    trainer = namespace["trainer"]
    assert isinstance(namespace["model"], XfmrGPTForCausalLM) and trainer.padding_free
    assert trainer.state.global_step == 20 and trainer.state.log_history[-1]["train_loss"] > 0
