"""Named sizes for BigBird-Pegasus. `tiny` is for tests; `large` is the shape of the three published
checkpoints (Zaheer et al., 2020: google/bigbird-pegasus-large-arxiv, -pubmed and -bigpatent, 16 + 16 layers of
width 1024, Pegasus's SentencePiece vocabulary of 96103 entries, 4096 learned positions, block size 64 with 3
random blocks); `large-arxiv`, `large-pubmed` and `large-bigpatent` name the same shape. `tiny` keeps full
attention for its short test inputs (block size 8, 2 random blocks: sequences of more than 72 tokens take the
block-sparse path). Both start decoding from <pad> (id 0), as Pegasus does."""

_LARGE = dict(vocab_size=96103, d_model=1024, encoder_layers=16, decoder_layers=16, encoder_attention_heads=16,
              decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=4096,
              block_size=64, num_random_blocks=3, pad_token_id=0, eos_token_id=1, bos_token_id=2,
              decoder_start_token_id=0)

BIGBIRD_PEGASUS_PRESETS = {
    "tiny": dict(vocab_size=1100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=512,
                 block_size=8, num_random_blocks=2, decoder_start_token_id=0),
    "large": _LARGE,
    "large-arxiv": _LARGE,
    "large-pubmed": _LARGE,
    "large-bigpatent": _LARGE,
}
