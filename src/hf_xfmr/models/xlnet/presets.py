"""Named sizes for XLNet. `tiny` is for tests; `base` and `large` are the published sizes
(Yang et al. 2019: xlnet-base-cased 12 x 768, xlnet-large-cased 24 x 1024, SentencePiece vocabulary of 32000)."""

_XLNET_VOCAB = dict(vocab_size=32000, pad_token_id=5, bos_token_id=1, eos_token_id=2)

XLNET_PRESETS = {
    "tiny": dict(vocab_size=1000, d_model=32, n_layer=2, n_head=4, d_inner=64, mem_len=16,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "base": dict(**_XLNET_VOCAB, d_model=768, n_layer=12, n_head=12, d_inner=3072),
    "large": dict(**_XLNET_VOCAB, d_model=1024, n_layer=24, n_head=16, d_inner=4096),
}
