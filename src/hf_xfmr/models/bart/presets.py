"""Named sizes for BART. `tiny` is for tests; `base` (140M) and `large` (400M) are the published
checkpoints' shapes (Lewis et al., 2020: 6+6 and 12+12 layers, GPT-2's byte-level BPE vocabulary of
50265 entries, 1024 learned positions); `large` scales nothing else (no embedding scale)."""

BART_PRESETS = {
    "tiny": dict(vocab_size=1100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128),
    "base": dict(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                 decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024),
    "large": dict(vocab_size=50265, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                  decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
                  max_position_embeddings=1024),
}
