"""Named sizes for T5. `tiny` / `tiny-v1.1` are for tests; the others are the published checkpoints'
shapes: T5 v1.0 (Raffel et al., 2020: ReLU feed-forward, output layer tied to the embeddings) `small`
(60M) and `base` (220M), and T5 v1.1 (GEGLU feed-forward, untied output layer, no dropout in
pretraining) `v1.1-small` and `v1.1-base`. All use the 32128-entry SentencePiece vocabulary
(32000 pieces + 100 sentinels + padding)."""

_V1_0 = dict(vocab_size=32128, feed_forward_proj="relu", tie_word_embeddings=True)
_V1_1 = dict(vocab_size=32128, feed_forward_proj="gated-gelu", tie_word_embeddings=False)

T5_PRESETS = {
    "tiny": dict(vocab_size=1100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                 relative_attention_num_buckets=8, relative_attention_max_distance=20,
                 feed_forward_proj="relu", tie_word_embeddings=True),
    "tiny-v1.1": dict(vocab_size=1100, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3,
                      num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    "small": dict(**_V1_0, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "base": dict(**_V1_0, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12),
    "v1.1-small": dict(**_V1_1, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6),
    "v1.1-base": dict(**_V1_1, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12),
}
