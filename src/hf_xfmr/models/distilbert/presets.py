"""Named sizes for DistilBERT. `tiny` is for tests; `base` is the published distilbert-base (6 layers of
BERT-base width, Sanh et al., 2019)."""

DISTILBERT_PRESETS = {
    "tiny": dict(vocab_size=1000, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128),
    "base": dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512),
}
