"""Named sizes for ModernBERT. `tiny` is for tests; `base` and `large` are the published sizes
(Warner et al., 2024, table 4).

The published tokenizer appends its special tokens after the regular ones and pads the vocabulary to
50368 rows: [CLS] 50281, [SEP] 50282, [PAD] 50283. `base` and `large` count them from the end of the
vocabulary, so they follow a `vocab_size` override (pass your tokenizer's ids when they differ)."""

from ..config_utils import FromVocabEnd

_PUBLISHED_SPECIAL_IDS = dict(cls_token_id=FromVocabEnd(87), bos_token_id=FromVocabEnd(87),
                              sep_token_id=FromVocabEnd(86), eos_token_id=FromVocabEnd(86),
                              pad_token_id=FromVocabEnd(85))

MODERNBERT_PRESETS = {
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                 intermediate_size=96, max_position_embeddings=512, local_attention=16,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
    "base": dict(vocab_size=50368, hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                 intermediate_size=1152, max_position_embeddings=8192, local_attention=128,
                 **_PUBLISHED_SPECIAL_IDS),
    "large": dict(vocab_size=50368, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                  intermediate_size=2624, max_position_embeddings=8192, local_attention=128,
                  **_PUBLISHED_SPECIAL_IDS),
}
