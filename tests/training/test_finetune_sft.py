"""Causal-LM / chat SFT finetuning (`--task causal-lm`): labels of each data shape, the padding-free batch,
full / LoRA / QLoRA runs from Python and the command line, and the errors before training."""

import copy
import json
import math
import random

import datasets
import pytest
import torch

from hf_xfmr.data.sft import (
    CHATML_TEMPLATE,
    MESSAGES,
    PROMPT_COMPLETION,
    TEXT,
    DataCollatorForSFT,
    sft_format,
    tokenize_sft,
)
from hf_xfmr.hub.cards import finetune_card_fields
from hf_xfmr.models.gpt import XfmrGPTConfig, XfmrGPTForCausalLM
from hf_xfmr.training.finetune import FinetuneArguments, finetune, load_adapter_model
from hf_xfmr.training.finetune_tasks import FinetuneError

from tests.cli_run import run_cli

from .finetune_helpers import one_thread  # noqa: F401  (autouse fixture)

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": "5"}, {"role": "user", "content": "and 4 and 4?"},
        {"role": "assistant", "content": "8 of course"}]
TINY_GPT = dict(n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=256, resid_pdrop=0.0, embd_pdrop=0.0,
                attn_pdrop=0.0)


@pytest.fixture
def chat_tok(gpt_tok):
    tokenizer = copy.deepcopy(gpt_tok)  # the session's tokenizer is never changed
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def sum_chat(rng: random.Random) -> list[dict]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return [{"role": "user", "content": f"add {a} and {b}"}, {"role": "assistant", "content": f"it is {a + b}"}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def tiny_gpt(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = XfmrGPTConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.eos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_GPT)
    return XfmrGPTForCausalLM(config)


@pytest.fixture
def gpt_checkpoint(tmp_path, gpt_tok):
    folder = tmp_path / "gpt"
    tiny_gpt(gpt_tok).save_pretrained(folder)
    gpt_tok.save_pretrained(folder)
    return folder


def quick(tmp_path, **overrides) -> FinetuneArguments:
    options = dict(task="causal-lm", output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                   disable_tqdm=True, max_steps=12, eval_steps=6, logging_steps=2, per_device_train_batch_size=8,
                   learning_rate=3e-3, warmup_steps=0, max_seq_length=64, seed=0, dataset="unused")
    options.update(overrides)
    return FinetuneArguments(**options)


def sum_dataset(train=48, validation=16, fmt=MESSAGES):
    def rows(n, seed):
        rng = random.Random(seed)
        chats = [sum_chat(rng) for _ in range(n)]
        if fmt == MESSAGES:
            return [{"messages": c} for c in chats]
        if fmt == PROMPT_COMPLETION:
            return [{"prompt": c[0]["content"] + " =", "completion": " " + c[1]["content"]} for c in chats]
        return [{"text": f"{c[0]['content']} = {c[1]['content']}"} for c in chats]

    return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows(train, 0)),
                                 "validation": datasets.Dataset.from_list(rows(validation, 1))})


# ---------------------------------------------------------------------------------------------
# Labels of each data shape
# ---------------------------------------------------------------------------------------------

def test_chat_labels_are_exactly_the_assistant_tokens(chat_tok):
    """The labelled tokens are those transformers' `return_assistant_tokens_mask` marks (the template's
    `{% generation %}` blocks), and they decode to the assistant turns with their end-of-turn text."""
    out = tokenize_sft({"messages": [CHAT]}, chat_tok, MESSAGES, {"messages": "messages"}, 512)
    ids, labels = out["input_ids"][0], out["labels"][0]
    reference = chat_tok.apply_chat_template(CHAT, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert ids == reference["input_ids"]
    assert [int(label != -100) for label in labels] == reference["assistant_masks"]
    assert all(label in (-100, token) for label, token in zip(labels, ids))
    assert chat_tok.decode([t for t, label in zip(ids, labels) if label != -100]) == \
        "5<|im_end|>\n8 of course<|im_end|>\n"
    everything = tokenize_sft({"messages": [CHAT]}, chat_tok, MESSAGES, {"messages": "messages"}, 512,
                              loss_on_prompt=True)
    assert everything["labels"][0] == ids


def test_prompt_completion_labels_the_completion_and_eos(gpt_tok, chat_tok):
    prompt, completion = "add 2 and 3 =", " it is 5"
    out = tokenize_sft({"prompt": [prompt], "completion": [completion]}, gpt_tok, PROMPT_COMPLETION,
                       {"prompt": "prompt", "completion": "completion"}, 512)
    ids, labels = out["input_ids"][0], out["labels"][0]
    assert ids == gpt_tok(prompt + completion + gpt_tok.eos_token)["input_ids"]
    n_prompt = len(gpt_tok(prompt)["input_ids"])
    assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
    assert gpt_tok.decode(labels[n_prompt:]) == completion + gpt_tok.eos_token
    # an EOS the completion already ends with is not doubled
    again = tokenize_sft({"prompt": [prompt], "completion": [completion + gpt_tok.eos_token]}, gpt_tok,
                         PROMPT_COMPLETION, {"prompt": "prompt", "completion": "completion"}, 512)
    assert again["input_ids"][0] == ids
    # conversational prompt / completion: the completion is the assistant turn after the generation prompt
    chat = tokenize_sft({"prompt": [CHAT[:2]], "completion": [[CHAT[2]]]}, chat_tok, PROMPT_COMPLETION,
                        {"prompt": "prompt", "completion": "completion"}, 512)
    kept = [t for t in chat["labels"][0] if t != -100]
    assert chat_tok.decode(kept) == "5<|im_end|>\n"
    assert chat["input_ids"][0] == chat_tok.apply_chat_template(CHAT[:3], tokenize=True, return_dict=True)["input_ids"]


def test_text_labels_every_token_and_truncates(gpt_tok):
    out = tokenize_sft({"text": ["the cat sat", "x" * 200]}, gpt_tok, TEXT, {"text": "text"}, 16)
    assert out["input_ids"][0] == gpt_tok("the cat sat" + gpt_tok.eos_token)["input_ids"]
    assert out["labels"][0] == out["input_ids"][0]
    assert len(out["input_ids"][1]) == 16 and out["input_ids"][1] == gpt_tok("x" * 200)["input_ids"][:16]


@pytest.mark.parametrize("columns, expected", [
    (["messages", "text"], (MESSAGES, {"messages": "messages"})),
    (["prompt", "completion", "id"], (PROMPT_COMPLETION, {"prompt": "prompt", "completion": "completion"})),
    (["id", "text"], (TEXT, {"text": "text"})),
])
def test_format_is_read_from_the_columns(columns, expected):
    assert sft_format(columns) == expected


# ---------------------------------------------------------------------------------------------
# Padding-free batches
# ---------------------------------------------------------------------------------------------

def test_padding_free_batch_layout():
    rows = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8, 9], "labels": [8, 9]}]
    flat = DataCollatorForSFT(0, padding_free=True)(rows)
    assert flat["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert flat["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert flat["labels"].tolist() == [[-100, 6, 7, -100, 9]]  # no sequence learns to follow the previous one
    assert flat["cu_seq_lens_q"].tolist() == flat["cu_seq_lens_k"].tolist() == [0, 3, 5]
    assert flat["max_length_q"] == 3 and "attention_mask" not in flat
    padded = DataCollatorForSFT(0)(rows)
    assert padded["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert padded["labels"].tolist() == [[-100, 6, 7], [8, 9, -100]]


def test_padding_free_loss_and_gradients_equal_the_padded_batch(chat_tok):
    rng = random.Random(3)
    batch = {"messages": [sum_chat(rng) + sum_chat(rng)[:1] + [{"role": "assistant", "content": "ok"}]
                          for _ in range(3)] + [CHAT]}
    features = tokenize_sft(batch, chat_tok, MESSAGES, {"messages": "messages"}, 512)
    rows = [dict(input_ids=i, labels=l) for i, l in zip(features["input_ids"], features["labels"])]
    assert len({len(r["input_ids"]) for r in rows}) > 1  # the padded batch really has padding
    model = tiny_gpt(chat_tok).train()
    results = []
    for padding_free in (False, True):
        model.zero_grad()
        loss = model(**DataCollatorForSFT(chat_tok.pad_token_id, padding_free=padding_free)(rows)).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (padded, padded_grads), (flat, flat_grads) = results
    torch.testing.assert_close(flat, padded, atol=1e-6, rtol=1e-6)
    for a, b in zip(flat_grads, padded_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------

def test_python_chat_sft_from_scratch_learns(tmp_path):
    """--arch gpt from scratch on chats, padding-free: the loss falls; perplexity = exp(eval loss)."""
    result = finetune(quick(tmp_path, arch="gpt", chat_template="chatml", padding_free=True, vocab_size=270,
                            max_steps=30, eval_steps=15, config_overrides="n_embd=32,n_layer=2,n_head=4,n_inner=64"),
                      dataset=sum_dataset())
    losses = [entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.8 * losses[0]
    evaluated = result.metrics["eval"]
    assert evaluated["eval_perplexity"] == pytest.approx(math.exp(evaluated["eval_loss"]), rel=1e-9)
    saved = json.loads(result.metrics_file.read_text())
    assert saved["eval"]["eval_perplexity"] == pytest.approx(evaluated["eval_perplexity"])
    assert result.tokenizer.chat_template == CHATML_TEMPLATE  # the template used is saved with the model
    reloaded = XfmrGPTForCausalLM.from_pretrained(result.model_dir)
    assert type(reloaded).__name__ == "XfmrGPTForCausalLM"


def test_python_prompt_completion_lora_merge(tmp_path, gpt_checkpoint):
    """LoRA on q/k/v/o/up/down, the tied lm_head frozen and not saved; merged == adapter model."""
    result = finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), lora=True, merge=True),
                      dataset=sum_dataset(fmt=PROMPT_COMPLETION))
    config = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "up_proj",
                                                       "down_proj"])
    assert not config["modules_to_save"] and config["task_type"] == "CAUSAL_LM"
    adapter = load_adapter_model(result.adapter_dir).eval()
    merged = XfmrGPTForCausalLM.from_pretrained(result.merged_dir).eval()
    ids = torch.tensor([result.tokenizer("add 1 and 2 = it is 3")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapter(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_cli_qlora_4bit_lora_merge(tmp_path, gpt_checkpoint, capsys):
    """--lora --load_in_4bit from the command line: NF4 base, loss falls, merged/ is full precision and equals
    the adapter applied to the full-precision base (merging is exact; only the training saw NF4 weights)."""
    import bitsandbytes as bnb

    train = write_jsonl(tmp_path / "train.jsonl", [{"messages": sum_chat(random.Random(i))} for i in range(48)])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"messages": sum_chat(random.Random(100 + i))} for i in range(8)])
    out = tmp_path / "run"
    status, stdout, err = run_cli(
        ["finetune", "--model_name_or_path", str(gpt_checkpoint), "--task", "causal-lm", "--train_file", train,
         "--validation_file", dev, "--chat_template", "chatml", "--lora", "--load_in_4bit", "--merge",
         "--lora_r", "16", "--output_dir", str(out), "--max_steps", "30", "--eval_steps", "15", "--logging_steps",
         "3", "--learning_rate", "1e-2", "--warmup_steps", "0", "--per_device_train_batch_size", "8", "--use_cpu",
         "--disable_tqdm", "--padding_free"], capsys)
    assert status == 0, err
    assert "eval_perplexity" in stdout
    losses = [json.loads(line)["loss"] for line in (out / "log_history.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert losses[-1] < losses[0]
    assert "quantization_config" not in json.loads((out / "adapter" / "config.json").read_text())
    merged = XfmrGPTForCausalLM.from_pretrained(out / "merged").eval()
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in merged.modules())
    assert all(p.dtype == torch.float32 for p in merged.parameters())
    adapter = load_adapter_model(out / "adapter").eval()  # the adapter on the full-precision checkpoint
    ids = torch.tensor([[5, 17, 40, 33, 8, 90]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapter(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval"]["eval_perplexity"] == pytest.approx(math.exp(metrics["eval"]["eval_loss"]))
    card = finetune_card_fields(json.loads((out / "finetune_args.json").read_text()), metrics)
    assert "with QLoRA" in card["description"] and "perplexity" in card["description"]
    assert card["metrics"]["perplexity"] == metrics["eval"]["eval_perplexity"]
    assert card["training"]["load_in_4bit"] is True and card["training"]["padding_free"] is True


def test_quantized_model_is_trained_in_4bit(tmp_path, gpt_checkpoint):
    """The model --load_in_4bit trains holds bitsandbytes NF4 layers under the adapters."""
    import bitsandbytes as bnb

    result = finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), lora=True, load_in_4bit=True,
                            max_steps=2, eval_steps=2), dataset=sum_dataset(train=16, validation=4, fmt=TEXT))
    layers = [m for m in result.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and all(m.weight.quant_state.quant_type == "nf4" for m in layers)


# ---------------------------------------------------------------------------------------------
# Errors before training
# ---------------------------------------------------------------------------------------------

def test_chat_data_without_a_chat_template_names_the_option(tmp_path, gpt_checkpoint):
    with pytest.raises(FinetuneError, match="--chat_template chatml"):
        finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint)), dataset=sum_dataset())


@pytest.mark.parametrize("rows, message", [
    ([{"question": "q", "answer": "a"}], "Cannot tell the SFT data format.*'messages'.*'prompt' and 'completion'"),
    ([{"prompt": "q", "answer": "a"}], "'prompt' column but no 'completion'"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], "no 'assistant' message"),
    ([{"messages": "hello"}], "must hold a non-empty list of messages"),
])
def test_bad_sft_data(tmp_path, gpt_checkpoint, rows, message):
    data = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows * 8),
                                 "validation": datasets.Dataset.from_list(rows * 2)})
    with pytest.raises(FinetuneError, match=message):
        finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), chat_template="chatml"), dataset=data)


def test_rows_with_nothing_left_to_learn(tmp_path, gpt_checkpoint, caplog):
    """A completion cut away by --max_seq_length leaves nothing to learn: such rows are dropped with a warning,
    and a split of only such rows is an error."""
    rows = [{"prompt": "add 2 and 3 " * 6, "completion": " it is 5"}] * 6 + [{"prompt": "add", "completion": " 5"}] * 6
    data = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(
        rows[-2:])})
    result = finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), max_seq_length=8, max_steps=1,
                            eval_steps=1), dataset=data)
    assert len(result.trainer.train_dataset) == 6
    assert "Dropped 6 of 12 rows of split 'train'" in caplog.text
    with pytest.raises(FinetuneError, match="No row of split 'train' has a token to learn.*--max_seq_length"):
        finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), max_seq_length=8,
                       output_dir=str(tmp_path / "o2")), dataset=datasets.DatasetDict(
            {"train": datasets.Dataset.from_list(rows[:6]), "validation": datasets.Dataset.from_list(rows[-2:])}))


def test_unknown_chat_template(tmp_path, gpt_checkpoint):
    with pytest.raises(FinetuneError, match="--chat_template 'llama9' is neither a built-in template \\(chatml\\)"):
        finetune(quick(tmp_path, model_name_or_path=str(gpt_checkpoint), chat_template="llama9"),
                 dataset=sum_dataset())


def test_non_decoder_architecture_is_refused(tmp_path):
    with pytest.raises(FinetuneError, match="bert has no 'causal-lm' model.*needs a decoder.*gpt"):
        finetune(quick(tmp_path, arch="bert"), dataset=sum_dataset(fmt=TEXT))


@pytest.mark.parametrize("options, message", [
    (dict(load_in_4bit=True), "--load_in_4bit .* pass --lora"),
    (dict(task="sequence-classification", padding_free=True), "--padding_free applies to --task causal-lm"),
    (dict(lora=True, load_in_4bit=True, model_name_or_path=None, arch="gpt"), "--load_in_4bit .*--model_name_or_path"),
])
def test_bad_option_combinations(tmp_path, gpt_checkpoint, options, message):
    options = {"model_name_or_path": str(gpt_checkpoint), **options}
    with pytest.raises(FinetuneError, match=message):
        quick(tmp_path, **options)


def test_cli_reports_a_missing_chat_template(tmp_path, gpt_checkpoint, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [{"messages": sum_chat(random.Random(i))} for i in range(8)])
    status, _, err = run_cli(["finetune", "--model_name_or_path", str(gpt_checkpoint), "--task", "causal-lm",
                              "--train_file", train, "--output_dir", str(tmp_path / "o"), "--use_cpu"], capsys)
    assert status == 2 and "--chat_template" in err


# ---------------------------------------------------------------------------------------------
# Llama (a transformers LlamaForCausalLM checkpoint, converted on load)
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def transformers_llama(tmp_path, chat_tok):
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(chat_tok), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=256, bos_token_id=chat_tok.eos_token_id,
                                      eos_token_id=chat_tok.eos_token_id, pad_token_id=chat_tok.pad_token_id)
    folder = tmp_path / "llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    chat_tok.save_pretrained(folder)  # with the ChatML template: no --chat_template needed
    return folder


def test_llama_qlora_from_a_transformers_checkpoint(tmp_path, transformers_llama):
    """QLoRA on a Llama checkpoint in transformers' format: every projection adapted (gate_proj too), padding-free
    and padded runs of the same seed give the same training losses; merged/ is full precision."""
    from hf_xfmr.models.llama import XfmrLlamaForCausalLM

    losses = {}
    for padding_free in (False, True):
        result = finetune(quick(tmp_path, model_name_or_path=str(transformers_llama), lora=True, load_in_4bit=True,
                                merge=padding_free, padding_free=padding_free, max_steps=3, eval_steps=3, logging_steps=1,
                                output_dir=str(tmp_path / f"out{padding_free}")), dataset=sum_dataset(train=32))
        losses[padding_free] = [e["loss"] for e in result.trainer.state.log_history if "loss" in e]
    config = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                       "up_proj", "down_proj"])
    assert type(result.model).__name__ == "XfmrLlamaForCausalLM"  # the merged model, converted on load
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    merged = XfmrLlamaForCausalLM.from_pretrained(result.merged_dir)  # the adapters in the full-precision weights
    assert all(p.dtype == torch.float32 for p in merged.parameters())


def test_docs_sft_snippet(tmp_path, monkeypatch, gpt_tok):
    """docs/finetuning.md's SFT snippet runs as written, on a tiny Llama checkpoint and a few steps."""
    from hf_xfmr.models.llama import XfmrLlamaConfig, XfmrLlamaForCausalLM

    from ..doc_snippets import snippet

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    config = XfmrLlamaConfig.from_preset("tiny", vocab_size=len(gpt_tok), hidden_size=32, intermediate_size=64,
                                         pad_token_id=gpt_tok.pad_token_id, eos_token_id=gpt_tok.eos_token_id,
                                         bos_token_id=gpt_tok.eos_token_id)
    XfmrLlamaForCausalLM(config).save_pretrained("my-llama")
    gpt_tok.save_pretrained("my-llama")
    code = snippet('task="causal-lm", train_file="chats.jsonl"', "docs/finetuning.md")
    assert "max_steps=60" in code
    namespace = {}
    exec(code.replace("max_steps=60", "max_steps=2, eval_steps=2, use_cpu=True, disable_tqdm=True"), namespace)
    loss, ppl = namespace["result"].metrics["eval"]["eval_loss"], namespace["result"].metrics["eval"]["eval_perplexity"]
    assert ppl == pytest.approx(math.exp(loss))
    assert (tmp_path / "sft" / "merged" / "model.safetensors").is_file()
