"""Benchmark cases for ELECTRA: a replaced-token-detection (RTD) pretraining step.

transformers has no RTD model, so the reference is the step assembled from its classes the way a user would:
an `ElectraForMaskedLM` generator and an `ElectraForPreTraining` discriminator (both sdpa) sharing the token,
position and type embeddings, tokens sampled from the generator's softmax at the masked positions by the same
code ours uses (`hf_xfmr.models.electra.rtd.sample_tokens`, fed by the same RNG), loss = MLM + 50 x binary loss.
Ours is `XfmrElectraForReplacedTokenDetection` built from the two converted models, default configuration.

- `electra-rtd-train`: 8 x 512 full rows, 15% of the tokens masked.
- `electra-rtd-train-padded`: 8 rows of lengths uniform in [64, 512] right-padded to 512.
Sizes: ELECTRA-Small's discriminator (hidden 256, 4 heads, FFN 1024, embedding 128; 4 layers here) and a generator
a quarter of its width (hidden 64, 1 head, FFN 256), vocabulary 30,522.
"""

from types import SimpleNamespace

import torch
from torch import nn

from .finetune import padded_batch
from .harness import BenchCase, case_sizes, register_case

SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, embedding=128, generator_ratio=0.25, vocab=30522,
             max_positions=512, batch=8, seq=512, min_len=512, mask_prob=0.15, mask_id=103, device="cpu", seed=0)
TINY_SIZES = dict(hidden=32, layers=2, heads=4, ffn=64, embedding=16, vocab=512, max_positions=64, batch=2, seq=32,
                  min_len=32)
DISCRIMINATOR_WEIGHT = 50.0


class TransformersRTD(nn.Module):
    """The RTD step from transformers' two ELECTRA classes (see the module docstring); returns `.loss`."""

    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
            setattr(generator.electra.embeddings, name, getattr(discriminator.electra.embeddings, name))
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask, labels):
        from ..models.electra.rtd import sample_tokens

        generated = self.generator(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        masked = labels != -100  # (B, T)
        disc_ids = input_ids.masked_scatter(masked, sample_tokens(generated.logits[masked]))
        replaced = disc_ids != torch.where(masked, labels, input_ids)
        disc = self.discriminator(input_ids=disc_ids, attention_mask=attention_mask, labels=replaced.long())
        return SimpleNamespace(loss=generated.loss + DISCRIMINATOR_WEIGHT * disc.loss)


def _configs(s: dict):
    """transformers' `ElectraConfig` of the discriminator and of the generator at the sizes of `s`."""
    import transformers

    common = dict(vocab_size=s["vocab"], embedding_size=s["embedding"], num_hidden_layers=s["layers"],
                  max_position_embeddings=s["max_positions"], pad_token_id=0)
    head_dim = s["hidden"] // s["heads"]
    heads = max(1, round(s["heads"] * s["generator_ratio"]))
    discriminator = transformers.ElectraConfig(hidden_size=s["hidden"], num_attention_heads=s["heads"],
                                               intermediate_size=s["ffn"], **common)
    generator = transformers.ElectraConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                                           intermediate_size=round(s["ffn"] * s["generator_ratio"]), **common)
    return discriminator, generator


def _build_pair(s: dict):
    def build():
        import transformers

        import hf_xfmr
        from hf_xfmr.models.electra import XfmrElectraForReplacedTokenDetection

        disc_config, gen_config = _configs(s)
        ref = TransformersRTD(
            transformers.ElectraForMaskedLM._from_config(gen_config, attn_implementation="sdpa"),
            transformers.ElectraForPreTraining._from_config(disc_config, attn_implementation="sdpa"),
        )
        ours = XfmrElectraForReplacedTokenDetection.from_parts(
            hf_xfmr.from_transformers(ref.discriminator), hf_xfmr.from_transformers(ref.generator))
        ours.config.discriminator_loss_weight = DISCRIMINATOR_WEIGHT
        return ours, ref

    return build


def _make_batch(s: dict) -> dict:
    """Rows of lengths uniform in [min_len, seq], right-padded; `mask_prob` of the real tokens masked."""
    batch = padded_batch(batch=s["batch"], seq=s["seq"], min_len=s["min_len"], vocab=s["vocab"], seed=s["seed"],
                         pad_id=0)
    g = torch.Generator().manual_seed(s["seed"] + 1)
    masked = (torch.rand(batch["input_ids"].shape, generator=g) < s["mask_prob"]) & (batch["attention_mask"] == 1)
    batch["labels"] = batch["input_ids"].masked_fill(~masked, -100)
    batch["input_ids"] = batch["input_ids"].masked_fill(masked, s["mask_id"])
    return batch


def _case(name: str, overrides: dict) -> BenchCase:
    s = case_sizes(name, SIZES, overrides)
    rows = (f"{s['batch']} x {s['seq']}" if s["min_len"] == s["seq"] else
            f"{s['batch']} rows of lengths uniform in [{s['min_len']}, {s['seq']}] padded to {s['seq']}")
    return BenchCase(
        name=name, build_pair=_build_pair(s), make_batch=lambda: _make_batch(s), mode="train", device=s["device"],
        description=(f"ElectraForMaskedLM generator + ElectraForPreTraining discriminator (sdpa, shared embeddings, "
                     f"same sampling) vs XfmrElectraForReplacedTokenDetection; discriminator hidden {s['hidden']}, "
                     f"{s['layers']} layers, generator x{s['generator_ratio']}, embedding {s['embedding']}, "
                     f"vocab {s['vocab']}; {rows}, {s['mask_prob']:.0%} masked"),
    )


@register_case("electra-rtd-train", tiny=TINY_SIZES)
def electra_rtd_train(**kw) -> BenchCase:
    """Headline: ELECTRA replaced-token-detection pretraining step, 8 x 512 full rows (fp32)."""
    return _case("electra-rtd-train", kw)


@register_case("electra-rtd-train-padded", tiny=dict(TINY_SIZES, min_len=8))
def electra_rtd_train_padded(**kw) -> BenchCase:
    """ELECTRA RTD pretraining step, 8 rows of lengths in [64, 512] padded to 512 (fp32)."""
    return _case("electra-rtd-train-padded", {"min_len": 64, **kw})
