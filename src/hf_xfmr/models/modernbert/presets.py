"""Named sizes for ModernBERT. `tiny` is for tests; `base` and `large` are the published sizes
(Warner et al., 2024, table 4)."""

MODERNBERT_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                 intermediate_size=96, max_position_embeddings=512, local_attention=16,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
    "base": dict(vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                 intermediate_size=1152, max_position_embeddings=8192, local_attention=128),
    "large": dict(vocab_size=50368, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                  intermediate_size=2624, max_position_embeddings=8192, local_attention=128),
}
