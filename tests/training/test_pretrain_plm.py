"""`hf-xfmr pretrain --arch xlnet --objective plm`: shuffled blocks of the corpus without memory, trained and
evaluated alike (the default recipe, docs/learning_parity.md); `--objective plm-mem` (XLNet's recipe):
contiguous segments whose memory is the true preceding text, exact resume with the memory; the compact PLM
collator and a loadable XLNet at the end of both."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import hf_xfmr  # noqa: F401
from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.data.corpus import document_text
from hf_xfmr.training import ObjectiveSettings, PretrainArguments, PretrainCallback, get_objective, pretrain, read_log
from hf_xfmr.training.logs import TIMING_FIELDS

L = 32
R = L // 2


@pytest.fixture(scope="module")
def xlnet_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xlnet_tok")
    train_tokenizer("xlnet", [document_text(d) for d in default_corpus(max_documents=60)],
                    vocab_size=400).save_pretrained(folder)
    return folder


def _args(tokenizer, output_dir, **overrides):
    return PretrainArguments(**{**dict(
        arch="xlnet", objective="plm", preset="tiny", max_steps=4, max_documents=40, tokenizer=str(tokenizer),
        per_device_train_batch_size=2, max_seq_length=L, logging_steps=1, save_steps=0, eval_fraction=0.1,
        max_eval_examples=8, progress_bar=False, report_to_tensorboard=False, output_dir=str(output_dir)),
        **overrides})


def test_default_rows_are_blocks_of_documents_each_followed_by_sep_cls(xlnet_tokenizer):
    """run_plm's layout: the documents, each followed by <sep> <cls>, concatenated and cut into rows of L."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(xlnet_tokenizer)
    texts = [document_text(d) for d in default_corpus(max_documents=10)]
    examples = get_objective("plm").build_examples(tok, texts, ObjectiveSettings(max_seq_length=L))
    stream = [i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"] + [tok.sep_token_id,
                                                                                        tok.cls_token_id]]
    assert len(examples) == len(stream) // L and all(len(e["input_ids"]) == L for e in examples)
    assert [i for e in examples for i in e["input_ids"]] == stream[:len(examples) * L]
    assert set(examples[0]) == {"input_ids"}


def test_memory_segments_are_consecutive_windows_of_one_stream(xlnet_tokenizer):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(xlnet_tokenizer)
    texts = [document_text(d) for d in default_corpus(max_documents=10)]
    examples = get_objective("plm-mem").build_examples(tok, texts, ObjectiveSettings(max_seq_length=L))
    assert len(examples) > 10
    for a, b in zip(examples, examples[1:]):
        ids, nxt = a["input_ids"], b["input_ids"]
        assert len(ids) == L and ids[-3:] != [tok.sep_token_id] * 3 and ids[-1] == tok.cls_token_id
        assert ids.count(tok.sep_token_id) == 2
        # segment k + 1 starts reuse_len tokens later: its head is what follows segment k's reuse block
        len_a = ids.index(tok.sep_token_id)
        assert nxt[:len_a - R] == ids[R:len_a]


class Recorder(PretrainCallback):
    """Records every micro-batch and the `mems` each forward pass receives."""

    def __init__(self):
        self.batches, self.mems = [], []

    def on_train_begin(self, run):
        def hook(module, args, kwargs):
            if module.training:
                mems = kwargs.get("mems")
                self.mems.append(None if mems is None else [m.clone() for m in mems])
        run.unwrapped_model.register_forward_pre_hook(hook, with_kwargs=True)

    def on_micro_batch(self, run, batch):
        self.batches.append({k: v.clone() for k, v in batch.items()})


class Forwards(PretrainCallback):
    """Records, for every forward pass of the model (training and evaluation), its mode, its input names
    and whether it got a memory."""

    def __init__(self):
        self.calls = []

    def on_train_begin(self, run):
        def hook(module, args, kwargs):
            self.calls.append((module.training, frozenset(k for k, v in kwargs.items() if v is not None),
                               kwargs.get("mems") is not None))
        run.unwrapped_model.register_forward_pre_hook(hook, with_kwargs=True)


def test_default_recipe_trains_shuffled_rows_without_memory_and_evaluates_alike(xlnet_tokenizer, tmp_path):
    from hf_xfmr.training.batches import BatchPlan

    recorder, forwards = Recorder(), Forwards()
    result = pretrain(_args(xlnet_tokenizer, tmp_path / "out"), callbacks=[recorder, forwards])
    config = result.model.config
    assert config.reuse_len is None and not config.bi_data  # no block blind to the rest of its row
    assert get_objective("plm").layout == "shuffled" and not get_objective("plm").stateful
    # rows are shuffled examples, not per-row streams
    from transformers import AutoTokenizer

    from hf_xfmr.data import load_corpus
    from hf_xfmr.training.batches import build_examples, split_documents

    tok = AutoTokenizer.from_pretrained(xlnet_tokenizer)
    train_docs, _ = split_documents(load_corpus(None, max_documents=40), 0.1, 42)
    examples = build_examples(get_objective("plm"), tok, train_docs, ObjectiveSettings(max_seq_length=L))
    index = {tuple(e["input_ids"]): i for i, e in enumerate(examples)}
    seen = [[index[tuple(row.tolist())] for row in batch["input_ids"]] for batch in recorder.batches]
    streams = BatchPlan(len(examples), 2, 1, 0, "contiguous", 42)
    assert seen != [streams.indices(m) for m in range(len(seen))]
    assert all(set(batch) == {"input_ids", "labels", "attention_mask", "perm_ranks", "target_positions"}
               for batch in recorder.batches)  # one segment per row: no token_type_ids
    # evaluation feeds the model what training does: no memory in either, the same inputs
    train = {keys for training, keys, _ in forwards.calls if training}
    evaluation = {keys for training, keys, _ in forwards.calls if not training and "labels" in keys}
    assert len(train) == 1 and train == evaluation
    assert not any(mems for *_, mems in forwards.calls)
    records = read_log(result.log_path)
    assert [r["eval_loss"] > 0 for r in records if "eval_loss" in r] == [True]


def test_pretrain_plm_mem_trains_with_memory_and_saves_a_loadable_model(xlnet_tokenizer, tmp_path):
    recorder = Recorder()
    result = pretrain(_args(xlnet_tokenizer, tmp_path / "out", objective="plm-mem"), callbacks=[recorder])
    records = read_log(result.log_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 for r in train)
    evals = [r for r in records if "eval_loss" in r]
    assert len(evals) == 1 and 0 <= evals[0]["eval_accuracy"] <= 1

    config = result.model.config
    assert config.model_type == "xfmr-xlnet" and config.reuse_len == R and config.mem_len == R
    # compact collator output, no (B, L, L) tensor
    batch = recorder.batches[0]
    assert {"perm_ranks", "target_positions", "labels"} <= set(batch) and "perm_mask" not in batch
    # Row j of micro-batch m + 1 continues row j of micro-batch m, and gets its memory.
    assert recorder.mems[0] is None
    for m in range(1, 4):
        prev, cur = recorder.batches[m - 1]["input_ids"], recorder.batches[m]["input_ids"]
        assert torch.equal(cur[:, :4], prev[:, R:R + 4])
        mems = recorder.mems[m]
        assert mems is not None and len(mems) == config.n_layer
        assert mems[0].shape == (R, 2, config.d_model)

    loaded = AutoModelForCausalLM.from_pretrained(result.model_dir).eval()
    assert type(loaded).__name__ == "XfmrXLNetLMHeadModel"
    ids = torch.tensor([[10, 11, 12, 13, 14]])
    result.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, result.model(input_ids=ids).logits)


class Interrupt(PretrainCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, run, record):
        if record["step"] == self.step:
            raise KeyboardInterrupt


def test_resume_continues_exactly_with_the_memory(xlnet_tokenizer, tmp_path):
    """Dropout on, 2 micro-batches per step: the resumed run restores the memory and matches bit for bit."""
    common = dict(max_steps=6, save_steps=3, gradient_accumulation_steps=2, objective="plm-mem")
    full = pretrain(_args(xlnet_tokenizer, tmp_path / "full", **common))
    with pytest.raises(KeyboardInterrupt):
        pretrain(_args(xlnet_tokenizer, tmp_path / "cut", **common), callbacks=[Interrupt(4)])
    saved = list((tmp_path / "cut").rglob("objective_state_0.safetensors"))
    assert saved, "the memory is saved with the checkpoint"
    resumed = pretrain(_args(xlnet_tokenizer, tmp_path / "cut", resume="latest", **common))

    def losses(path):
        return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_log(path)]

    assert losses(resumed.log_path) == losses(full.log_path)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_command_line_pretrains_xlnet_with_plm(xlnet_tokenizer, tmp_path, capsys):
    from hf_xfmr.cli import main

    out = tmp_path / "cli"
    assert main(["pretrain", "--arch", "xlnet", "--objective", "plm", "--preset", "tiny", "--max_steps", "2",
                 "--tokenizer", str(xlnet_tokenizer), "--max_documents", "30", "--per_device_train_batch_size", "2",
                 "--max_seq_length", str(L), "--logging_steps", "1", "--save_steps", "0", "--no_progress_bar",
                 "--no_report_to_tensorboard", "--output_dir", str(out)]) == 0
    assert "pretrained XfmrXLNetLMHeadModel for 2 steps" in capsys.readouterr().out
    assert [r["step"] for r in read_log(out / "log.jsonl") if "loss" in r] == [1, 2]
    assert AutoModelForCausalLM.from_pretrained(out).config.reuse_len is None  # the default recipe has no reuse block
