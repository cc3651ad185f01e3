"""Named sizes for ALBERT. `tiny` is for tests; the others are the published v2 sizes (Lan et al.,
2020, table 1): every one has E = 128 and a single group of shared layers."""

ALBERT_PRESETS = {
    "tiny": dict(vocab_size=1000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=128),
    "base": dict(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512),
    "large": dict(vocab_size=30000, embedding_size=128, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096, max_position_embeddings=512),
    "xlarge": dict(vocab_size=30000, embedding_size=128, hidden_size=2048, num_hidden_layers=24,
                   num_attention_heads=16, intermediate_size=8192, max_position_embeddings=512),
    "xxlarge": dict(vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12,
                    num_attention_heads=64, intermediate_size=16384, max_position_embeddings=512),
}
