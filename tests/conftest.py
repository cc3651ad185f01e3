"""Fixtures shared by the whole suite. Nothing here touches the network."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The measured matmul peaks (`hf_xfmr.machine`) are cached here, not in the user's ~/.cache.
os.environ.setdefault("HF_XFMR_CACHE", tempfile.mkdtemp(prefix="hf_xfmr_cache_"))

import pytest  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

WORDS = (
    "the a an of to and in is was it that for on with as by at from this be are or his her their "
    "cat dog bird fish tree house river city king queen paris france london england water fire "
    "good bad great small big red blue green happy sad movie film story book song play run walk "
    "capital country sea sky sun moon day night time year man woman child people world life"
).split()


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    """A tiny BERT-style (WordPiece, lower-cased) fast tokenizer built from a fixed word list."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {tok: i for i, tok in enumerate(specials + WORDS + letters + ["##" + c for c in letters] + list(".,!?"))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=128,
    )


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy machine OpenMP barriers stall them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
