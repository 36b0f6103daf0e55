"""The tiny models the unit tests build in Python: one decoder recipe and one module recipe, every setting named in
its group as a config names it (`caption.training.module.CaptionModule`)."""

from dataclasses import fields
from typing import Any

import torch

from caption.model.attention import AttentionSettings
from caption.model.decoder import Decoder, DecoderSettings
from caption.model.kinds import KINDS
from caption.training.module import CaptionModule

# a tiny CaptionModule's groups: a two-block small_vgg trained from scratch, an 8/16-unit decoder, one layer in f_init
# and in f_att's annotation side
TINY_GROUPS: dict[str, dict[str, Any]] = {
    "encoder": {"name": "small_vgg", "weights": "none", "freeze": False, "channels": (4, 8)},
    "decoder": {"embed_dim": 8, "hidden_dim": 16, "init_layers": 1},
    "attention": {"dim": 8, "layers": 1},
    "decoding": {"max_caption_length": 8, "beam_size": 2},
}


def tiny_decoder(
    kind: str = "soft", *, vocab_size: int, annotation_dim: int, seed: int = 0, embed_dim: int = 7, hidden_dim: int = 9,
    attention_dim: int = 5, semi_sampling: float = 0.5, eval_context: str = "expected", **options: Any,
) -> Decoder:
    """A seeded Decoder; `options` are fields of DecoderSettings (dropout, init_layers ...) or AttentionSettings
    (gate, layers ...); f_init and f_att have one layer unless told otherwise. Hard attention semi-samples half the
    images unless told otherwise (sec. 4.1)."""
    torch.manual_seed(seed)
    options = {"init_layers": 1, "layers": 1} | options
    names = {field.name for field in fields(DecoderSettings)}
    settings = DecoderSettings(embed_dim=embed_dim, hidden_dim=hidden_dim,
                               **{key: value for key, value in options.items() if key in names})
    attention = AttentionSettings(kind=kind, dim=attention_dim,
                                  **{key: value for key, value in options.items() if key not in names})
    return Decoder(vocab_size=vocab_size, annotation_dim=annotation_dim, settings=settings, attention=attention,
                   phi=KINDS[kind].phi(eval_context=eval_context),
                   semi_sampling=semi_sampling if kind == "hard" else 0.0)


def tiny_groups(kind: str = "soft", **groups: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A tiny CaptionModule's settings; each of `groups` (encoder=..., decoder=..., hard=...) updates TINY_GROUPS'."""
    settings = {name: dict(values) for name, values in TINY_GROUPS.items()}
    for name, values in groups.items():
        settings[name] = settings.get(name, {}) | values
    settings["attention"] = {"kind": kind} | settings["attention"]
    return settings


def tiny_module(vocabulary: list[str], kind: str = "soft", **groups: dict[str, Any]) -> CaptionModule:
    """A tiny CaptionModule (`tiny_groups`)."""
    return CaptionModule(vocabulary=vocabulary, **tiny_groups(kind, **groups))
