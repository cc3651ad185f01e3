"""The BigBird-Pegasus page's snippet runs as written (tiny sizes swapped in) and produces the classes it names."""

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet
from ._bigbird_pegasus import tiny_config


def test_bigbird_pegasus_usage_snippet(tmp_path, monkeypatch):
    torch.manual_seed(0)
    config = tiny_config(vocab_size=1100, max_position_embeddings=1024, block_size=64, num_random_blocks=3)
    transformers.BigBirdPegasusForConditionalGeneration(config).save_pretrained(tmp_path / "path/to/bigbird-pegasus")
    monkeypatch.chdir(tmp_path)
    code = snippet('BigBirdPegasusForConditionalGeneration.from_pretrained("path/to/bigbird-pegasus")',
                   "docs/models/bigbird.md").replace('"large"', '"tiny"')
    assert '"tiny"' in code
    namespace = run_checking_comments(code)
    model = namespace["model"]
    assert namespace["_checked"] == 1  # the comment naming the loaded class was checked
    assert type(model).__name__ == "XfmrBigBirdPegasusForConditionalGeneration"
    assert model.config.attention_type == "block_sparse" and model.config.block_size == 64
    assert torch.isfinite(namespace["loss"])
    assert namespace["out"].shape[0] == 4 and namespace["out"].shape[1] <= 21
