"""Named sizes for BERT and RoBERTa. `tiny` is for tests; the others are the published sizes."""

BERT_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=128),
    "base": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
    "large": dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096, max_position_embeddings=512),
}

# RoBERTa reserves `pad_token_id + 1` position slots in front (positions start after the padding index).
ROBERTA_PRESETS = {
    "tiny": dict(BERT_PRESETS["tiny"], max_position_embeddings=130),
    "base": dict(BERT_PRESETS["base"], vocab_size=50265, max_position_embeddings=514),
    "large": dict(BERT_PRESETS["large"], vocab_size=50265, max_position_embeddings=514),
}
