"""Configuration of RoBERTa (Liu et al., 2019, https://arxiv.org/abs/1907.11692).

BERT's fields (see `configuration_bert.py`) with RoBERTa's defaults; names follow transformers'
`RobertaConfig` so checkpoints convert field by field.
"""

from ..bert.configuration_bert import XfmrBertConfig
from .presets import ROBERTA_PRESETS


class XfmrRobertaConfig(XfmrBertConfig):
    r"""Configuration of an hf_xfmr RoBERTa model: BERT's fields with RoBERTa's defaults.

    RoBERTa numbers positions from `pad_token_id + 1` (padding keeps position `pad_token_id`), so
    `max_position_embeddings` counts those leading slots: 514 for 512 usable positions.
    """

    model_type = "xfmr-roberta"
    presets = ROBERTA_PRESETS

    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2

    def check_own_fields(self):
        super().check_own_fields()
        if self.pad_token_id is None:
            raise ValueError("`pad_token_id` must be set for RoBERTa: positions are numbered after it.")
        if self.max_position_embeddings <= self.pad_token_id + 1:
            raise ValueError(
                f"`max_position_embeddings`={self.max_position_embeddings} leaves no usable position: RoBERTa "
                f"needs more than pad_token_id + 1 = {self.pad_token_id + 1} slots."
            )
