"""Named sizes for GPT. `tiny` is for tests; the others are the published GPT-2 sizes
(Radford et al., 2019): small = `gpt2` (124M), medium (355M), large (774M), xl (1.5B).

GPT-2's one special token, <|endoftext|> (bos and eos), is the last id of its vocabulary (50256 of
50257); every preset keeps it there, so it follows a `vocab_size` override."""

from ..config_utils import FromVocabEnd

_END_OF_TEXT = dict(bos_token_id=FromVocabEnd(1), eos_token_id=FromVocabEnd(1))
_GPT2_VOCAB = dict(vocab_size=50257, n_positions=1024, **_END_OF_TEXT)

GPT_PRESETS = {
    "tiny": dict(vocab_size=1000, n_positions=128, n_embd=32, n_layer=2, n_head=4, n_inner=64, **_END_OF_TEXT),
    "small": dict(**_GPT2_VOCAB, n_embd=768, n_layer=12, n_head=12),
    "medium": dict(**_GPT2_VOCAB, n_embd=1024, n_layer=24, n_head=16),
    "large": dict(**_GPT2_VOCAB, n_embd=1280, n_layer=36, n_head=20),
    "xl": dict(**_GPT2_VOCAB, n_embd=1600, n_layer=48, n_head=25),
}
