"""Named sizes for ELECTRA. `tiny` is for tests; the others are the published checkpoints' sizes
(`google/electra-{small,base,large}-{discriminator,generator}`). The generator of a replaced-token-detection
model is derived from its discriminator's config (`XfmrElectraConfig.generator_config`), not from a preset."""

_VOCAB = dict(vocab_size=30522, max_position_embeddings=512)

ELECTRA_PRESETS = {
    "tiny": dict(vocab_size=1000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=128),
    "small": dict(**_VOCAB, embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                  intermediate_size=1024),
    "base": dict(**_VOCAB, embedding_size=768, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "large": dict(**_VOCAB, embedding_size=1024, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096),
    "small-generator": dict(**_VOCAB, embedding_size=128, hidden_size=256, num_hidden_layers=12,
                            num_attention_heads=4, intermediate_size=1024),
    "base-generator": dict(**_VOCAB, embedding_size=768, hidden_size=256, num_hidden_layers=12,
                           num_attention_heads=4, intermediate_size=1024),
    "large-generator": dict(**_VOCAB, embedding_size=1024, hidden_size=256, num_hidden_layers=24,
                            num_attention_heads=4, intermediate_size=1024),
}
