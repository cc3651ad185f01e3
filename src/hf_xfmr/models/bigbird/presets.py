"""Named sizes for BigBird. `tiny` is for tests (block size 8, 2 random blocks: the sparse layout from 73
tokens on); the others are the published checkpoints' sizes (`google/bigbird-roberta-base` / `-large`)."""

_ROBERTA_VOCAB = dict(vocab_size=50358, max_position_embeddings=4096, type_vocab_size=2, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, sep_token_id=66, block_size=64, num_random_blocks=3)

BIGBIRD_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=512, block_size=8, num_random_blocks=2, sep_token_id=3),
    "base": dict(**_ROBERTA_VOCAB, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "large": dict(**_ROBERTA_VOCAB, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096),
}
