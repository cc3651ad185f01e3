"""Supervised finetuning (SFT) data for causal LMs: the row shapes TRL's `SFTTrainer` accepts, tokenized with
labels on the answers only, and a collator that pads or flattens (padding-free).

Row shapes (`sft_format` tells them apart by their columns, as TRL does):

| format              | columns                                   | loss on (default)                      |
|---------------------|-------------------------------------------|----------------------------------------|
| `messages`          | `messages`: [{"role", "content"}, ...]    | the assistant turns (`assistant_only_loss`) |
| `prompt-completion` | `prompt`, `completion`: text or messages  | the completion (`completion_only_loss`) |
| `text`              | one text column                           | every token                            |

`loss_on_prompt=True` trains on every token of every format instead.

- **Chat** (`messages`, or a prompt/completion given as message lists) is rendered with the tokenizer's chat
  template (`tokenizer.chat_template`, or `chat_template=`: `"chatml"` or Jinja text) and tokenized without
  adding special tokens, as `apply_chat_template` does: the template writes them. An assistant turn's tokens are
  found by rendering: the text the template adds for turn i is what `messages[:i + 1]` renders beyond
  `messages[:i]` with the generation prompt (`<|im_start|>assistant\\n` in ChatML), that is the answer and the
  template's end-of-turn text (`...<|im_end|>\\n`), which the model must learn to emit to stop. This needs no
  `{% generation %}` markers in the template (TRL's way); a template that renders earlier turns differently
  once later ones follow is refused with a message.
- **Prompt/completion**: the completion's tokens are those of `prompt + completion` past the longest common
  prefix with the tokenized prompt alone (TRL's rule, so a token merged across the boundary counts as
  completion). Plain-text completions, and plain texts, get the tokenizer's EOS appended when they do not end
  with it (TRL's `add_eos`); rendered chats end as their template ends them.
- Sequences longer than `max_length` are cut at the end (TRL's default truncation).

`DataCollatorForSFT` right-pads a batch (labels -100 on padding), or with `padding_free=True` concatenates its
rows into one row without padding: `position_ids` restart at 0 at every sequence, `cu_seq_lens_q/k` and
`max_length_q/k` give the boundaries (transformers' `DataCollatorWithFlattening` keywords), and the label of
every sequence's first token is -100 so no sequence is trained to follow the one before it. hf_xfmr models keep
the sequences of such a row apart on every attention backend (`models/packing.py`), so its loss is the padded
batch's loss.

Bad rows raise `SFTDataError` (a ValueError) naming the split, the row and the fix.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .collation import IGNORE_INDEX, cu_seqlens_from_lengths, pad_ragged

MESSAGES, PROMPT_COMPLETION, TEXT = "messages", "prompt-completion", "text"
SFT_FORMATS = (MESSAGES, PROMPT_COMPLETION, TEXT)

# ChatML (the format of OpenAI's chat markup, used by Qwen2 and many finetunes), for tokenizers without a template.
# The `generation` markers let transformers' `return_assistant_tokens_mask` find the same tokens this module labels.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>\n' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT_TEMPLATES = {"chatml": CHATML_TEMPLATE}


class SFTDataError(ValueError):
    """SFT data that cannot be used: the message names the split, row or column and the fix."""


def sft_format(columns: Sequence[str], text_column: str | None = None) -> tuple[str, dict[str, str]]:
    """(format, role -> column) of a dataset with `columns`: `messages` first, then `prompt` + `completion`,
    then the text column (`text_column`, else the first of `text_columns`)."""
    if text_column is not None:
        if text_column not in columns:
            raise SFTDataError(f"--text_column: column {text_column!r} is not in the dataset "
                               f"(columns: {', '.join(columns)}).")
        return TEXT, {"text": text_column}
    if "messages" in columns:
        return MESSAGES, {"messages": "messages"}
    if "prompt" in columns and "completion" in columns:
        return PROMPT_COMPLETION, {"prompt": "prompt", "completion": "completion"}
    if "prompt" in columns or "completion" in columns:
        has, lacks = ("prompt", "completion") if "prompt" in columns else ("completion", "prompt")
        raise SFTDataError(f"The dataset has a {has!r} column but no {lacks!r} column (columns: "
                           f"{', '.join(columns)}); prompt/completion data needs both.")
    for name in ("text", "content", "document", "sentence"):
        if name in columns:
            return TEXT, {"text": name}
    raise SFTDataError(
        f"Cannot tell the SFT data format from the columns {', '.join(columns)}: use a 'messages' column (lists of "
        "{'role', 'content'}), 'prompt' and 'completion' columns, or a 'text' column (or name it with --text_column).")


def resolve_chat_template(value: str | None) -> str | None:
    """A chat template from `--chat_template`: a built-in name (`chatml`), a file holding Jinja, or Jinja text."""
    if value is None:
        return None
    if value in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[value]
    if "{" not in value:
        path = Path(value)
        if not path.is_file():
            names = ", ".join(CHAT_TEMPLATES)
            raise SFTDataError(f"--chat_template {value!r} is neither a built-in template ({names}), nor a file, nor "
                               "Jinja text.")
        return path.read_text()
    return value


def require_chat_template(tokenizer) -> None:
    """A ValueError saying how to get one when `tokenizer` has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise SFTDataError(
            f"The data holds chat messages, but the tokenizer ({type(tokenizer).__name__}) has no chat template to "
            "render them with. Pass --chat_template chatml (or a Jinja template, text or file), or use a tokenizer "
            "that has one.")


def _check_messages(value, split: str, row: int, column: str) -> None:
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)
    if not ok:
        raise SFTDataError(f"Split {split!r} row {row}: column {column!r} must hold a non-empty list of messages "
                           f"{{'role': ..., 'content': ...}} (text content), got {value!r:.120}.")


def check_sft_rows(split, fmt: str, columns: dict[str, str], split_name: str) -> list[int]:
    """Indices of the rows of `split` with nothing in a column (None, or an empty message list); an SFTDataError
    for a row of the wrong shape (text where messages are expected, a chat without an assistant turn, ...)."""
    empty = []
    conversational = None  # prompt/completion: every row text, or every row messages
    for role, column in columns.items():
        for index, value in enumerate(split[column]):
            if value is None or value == [] or (role == "text" and value == ""):
                empty.append(index)
            elif fmt == TEXT:
                if not isinstance(value, str):
                    raise SFTDataError(f"Split {split_name!r} row {index}: column {column!r} holds "
                                       f"{type(value).__name__} values ({value!r:.60}), not text; name the text column "
                                       "with --text_column.")
            elif fmt == MESSAGES or isinstance(value, list):
                _check_messages(value, split_name, index, column)
                if fmt == MESSAGES and not any(m["role"] == "assistant" for m in value):
                    raise SFTDataError(f"Split {split_name!r} row {index}: the conversation has no 'assistant' "
                                       "message, so there is nothing to learn from it.")
                conversational = _same_kind(conversational, True, split_name, index)
            elif isinstance(value, str):
                conversational = _same_kind(conversational, False, split_name, index)
            else:
                raise SFTDataError(f"Split {split_name!r} row {index}: column {column!r} must hold text or a list of "
                                   f"messages, got {type(value).__name__}.")
    return sorted(set(empty))


def _same_kind(seen: bool | None, now: bool, split: str, row: int) -> bool:
    if seen is not None and seen != now:
        raise SFTDataError(f"Split {split!r} row {row}: prompt and completion must both be text or both be message "
                           "lists, in every row.")
    return now


def is_conversational(row: dict) -> bool:
    """Whether an SFT row holds chat messages (rendered with the chat template)."""
    return any(isinstance(row.get(c), list) for c in ("messages", "prompt", "completion"))


def _render(tokenizer, messages, *, add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """(the rendered chat, the character spans the template writes for each assistant turn)."""
    full = _render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], add_generation_prompt=True) if i else ""
        upto = _render(tokenizer, messages[:i + 1])
        if not (full.startswith(upto) and upto.startswith(before)):
            raise SFTDataError(
                "The chat template renders a conversation's first turns differently once later turns follow (e.g. it "
                "drops earlier reasoning), so the assistant turns cannot be found by rendering. Pass --loss_on_prompt "
                "to train on every token, or a --chat_template that renders turns the same way throughout.")
        spans.append((len(before), len(upto)))
    return full, spans


def _chat_example(tokenizer, messages, loss_on_prompt: bool) -> tuple[list[int], list[int]]:
    """(input ids, 0/1 loss mask) of a conversation: 1 on the assistant turns (every token with loss_on_prompt)."""
    text, spans = assistant_spans(tokenizer, messages)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"]
    if loss_on_prompt:
        return ids, [1] * len(ids)
    mask = [int(any(start <= first < end for start, end in spans)) for first, _ in encoded["offset_mapping"]]
    return ids, mask


def _with_eos(text: str, tokenizer) -> str:
    eos = tokenizer.eos_token
    return text if eos is None or text.endswith(eos) else text + eos


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _prompt_completion_example(tokenizer, prompt, completion, loss_on_prompt: bool):
    """(input ids, loss mask) of a prompt and its completion: 1 past the tokens the prompt alone shares with both."""
    if isinstance(prompt, list):  # chat: the prompt ends with the generation prompt, the completion is the turn
        prompt_ids = tokenizer(_render(tokenizer, prompt, add_generation_prompt=True), add_special_tokens=False)
        full_ids = tokenizer(_render(tokenizer, prompt + completion), add_special_tokens=False)
    else:
        prompt_ids = tokenizer(prompt)
        full_ids = tokenizer(prompt + _with_eos(completion, tokenizer))
    prompt_ids, ids = prompt_ids["input_ids"], full_ids["input_ids"]
    start = 0 if loss_on_prompt else _common_prefix(prompt_ids, ids)
    return ids, [0] * start + [1] * (len(ids) - start)


def tokenize_sft(batch: dict, tokenizer, fmt: str, columns: dict[str, str], max_length: int,
                 loss_on_prompt: bool = False) -> dict[str, list]:
    """`input_ids` and `labels` (the ids, -100 where no loss is taken) of a batch of SFT rows (`Dataset.map`
    with `batched=True`), cut to `max_length` tokens."""
    out = {"input_ids": [], "labels": []}
    count = len(next(iter(batch.values())))
    for i in range(count):
        if fmt == MESSAGES:
            ids, mask = _chat_example(tokenizer, batch[columns["messages"]][i], loss_on_prompt)
        elif fmt == PROMPT_COMPLETION:
            ids, mask = _prompt_completion_example(tokenizer, batch[columns["prompt"]][i],
                                                   batch[columns["completion"]][i], loss_on_prompt)
        else:
            ids = tokenizer(_with_eos(batch[columns["text"]][i], tokenizer))["input_ids"]
            mask = [1] * len(ids)
        ids, mask = ids[:max_length], mask[:max_length]
        out["input_ids"].append(ids)
        out["labels"].append([t if m else IGNORE_INDEX for t, m in zip(ids, mask)])
    return out


def has_targets(labels: Sequence[int]) -> bool:
    """Whether a tokenized row has a token to predict (not its first: the model predicts each next token)."""
    return any(label != IGNORE_INDEX for label in labels[1:])


@dataclass
class DataCollatorForSFT:
    """Batches of tokenized SFT rows (`input_ids`, `labels`): right-padded with `attention_mask` (labels -100
    on padding), or with `padding_free=True` one row of all the sequences, without padding, with `position_ids`
    restarting at 0, `cu_seq_lens_q/k` and `max_length_q/k` (see the module docstring).

    pad_token_id: the id written on padding (masked out; the tokenizer's pad id, else its EOS).
    pad_to_multiple_of: round the padded length up (padded batches only).
    """

    pad_token_id: int
    padding_free: bool = False
    pad_to_multiple_of: int | None = None

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        ids = [list(e["input_ids"]) for e in examples]
        labels = [list(e["labels"]) if "labels" in e else list(e["input_ids"]) for e in examples]
        if any(not row for row in ids):
            raise ValueError("DataCollatorForSFT got an example without tokens; drop empty rows first.")
        if self.padding_free:
            return self._flatten(ids, labels)
        input_ids, real = pad_ragged(ids, self.pad_token_id, pad_to_multiple_of=self.pad_to_multiple_of)  # (B, T)
        padded_labels, _ = pad_ragged(labels, IGNORE_INDEX, length=input_ids.shape[1])  # (B, T)
        return {"input_ids": input_ids, "attention_mask": real.long(), "labels": padded_labels}

    @staticmethod
    def _flatten(ids: list[list[int]], labels: list[list[int]]) -> dict[str, torch.Tensor]:
        lengths = [len(row) for row in ids]
        flat_labels = []
        for row in labels:
            flat_labels += [IGNORE_INDEX] + row[1:]  # a sequence's first token follows no token of its own
        cu, longest = cu_seqlens_from_lengths(lengths)  # (S + 1,)
        return {
            "input_ids": torch.tensor([[t for row in ids for t in row]]),  # (1, N)
            "labels": torch.tensor([flat_labels]),  # (1, N)
            "position_ids": torch.tensor([[p for n in lengths for p in range(n)]]),  # (1, N)
            "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": longest, "max_length_k": longest,
        }
