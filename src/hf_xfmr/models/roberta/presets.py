"""Named sizes for RoBERTa. `tiny` is for tests; the others are the published sizes."""

from ..bert.presets import BERT_PRESETS

# RoBERTa reserves `pad_token_id + 1` position slots in front (positions start after the padding index).
ROBERTA_PRESETS = {
    "tiny": dict(BERT_PRESETS["tiny"], max_position_embeddings=130),
    "base": dict(BERT_PRESETS["base"], vocab_size=50265, max_position_embeddings=514),
    "large": dict(BERT_PRESETS["large"], vocab_size=50265, max_position_embeddings=514),
}
