"""The BigBird page's snippets run as written (tiny sizes swapped in; the Hub id names a local folder of a tiny
transformers checkpoint) and produce the classes they name."""

import torch
import transformers

from ..doc_snippets import run_checking_comments, snippet


def test_bigbird_drop_in_snippet(tmp_path, monkeypatch):
    """Offline: an existing path is never taken as a repo id, so the id names a tiny checkpoint saved here."""
    torch.manual_seed(0)
    config = transformers.BigBirdConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=37, max_position_embeddings=256, block_size=8,
                                        num_random_blocks=2, sep_token_id=3)
    transformers.BigBirdForMaskedLM(config).save_pretrained(tmp_path / "google/bigbird-roberta-base")
    monkeypatch.chdir(tmp_path)
    namespace = run_checking_comments(snippet('from_pretrained("google/bigbird-roberta-base")',
                                              "docs/models/bigbird.md"))
    assert namespace["_checked"] == 2
    assert namespace["clf"].config.num_labels == 2 and namespace["clf"].config.block_size == 8
    assert type(namespace["ref"]) is transformers.BigBirdForMaskedLM


def test_bigbird_unpadding_snippet():
    code = snippet("XfmrBigBirdForSequenceClassification(config)", "docs/models/bigbird.md")
    swapped = code.replace('"base"', '"tiny"').replace("4096", "400").replace("3000", "300").replace("2000", "200")
    assert swapped.count('"tiny"') == 1 and "400" in swapped
    torch.manual_seed(0)
    namespace = run_checking_comments(swapped)
    assert namespace["out"].logits.shape == (2, 2)
    model, seen = namespace["model"], []
    model.model.layers[0].register_forward_pre_hook(
        lambda m, args: seen.append((tuple(args[0].shape), tuple(args[1].keep.shape))))
    model(input_ids=namespace["ids"], attention_mask=namespace["mask"])
    assert seen == [((500, 32), (2, 304))]  # the 300 + 200 real tokens, in the block layout of 300 padded to 304
