"""Caption a whole split with a `Captioner` and score it on the one evaluation path (`caption.evaluation.scoring`).

Captions are decoded in batches from the data module's loader (images, or annotations from a feature cache),
then scored as validation and `caption test` score them: coco-caption's metrics after its PTB tokenizer, the
mean entropy of α per step and, where the data has object boxes, the localisation report. `caption evaluate`
and `caption compare` are this plus files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import instantiate_module
from tqdm import tqdm

from caption.data.datamodule import CaptionDataModule
from caption.data.sources.base import CaptionSource
from caption.errors import ConfigError
from caption.evaluation.metrics import METEOR_TIMEOUT
from caption.evaluation.ptb_tokenizer import PTBCache
from caption.evaluation.report import GREEDY_METRICS, Evaluation
from caption.evaluation.results import result, write_results
from caption.evaluation.scoring import Captioned, captioned_batch, score_split
from caption.inference.captioner import Captioner
from caption.io.class_paths import checked
from caption.io.outputs import write_text
from caption.model.captions import Caption
from caption.model.search import beam_width


def build_data(settings: dict[str, Any], origin: str) -> CaptionDataModule:
    """The data module described by `settings` (as in a config's `data:` section)."""
    source = checked(settings.get("source"), base=CaptionSource, key="data.source", origin=origin)
    try:  # jsonargparse finds the class `checked` found, already imported
        return instantiate_module(CaptionDataModule, {**settings, "source": source})
    except Exception as error:
        raise ConfigError(f"invalid data settings from {origin}: {error}") from error


def training_data(captioner: Captioner) -> CaptionDataModule:
    """The data module of the data the captioner's model was trained on (or of the config it was loaded with)."""
    if captioner.data is None:
        raise ConfigError("the checkpoint does not record its data settings: pass the training config (--config)")
    return build_data(*captioner.data)


def evaluate(
    captioner: Captioner,
    data: CaptionDataModule,
    *,
    split: str = "test",
    beam_size: int | None = None,
    max_length: int | None = None,
    meteor_timeout: float | None = None,
    description: str = "decoding",
    out: Path | None = None,
    cache: PTBCache | None = None,
    greedy_too: bool = True,
) -> Evaluation:
    """Caption every image of `split` in batches and score the captions against the raw references; with a beam and
    `greedy_too`, greedily as well, its scores beside the beam's (`Evaluation.greedy`, `Evaluation.side_by_side`).

    With `out`, the captions are written to out/captions.json before scoring, so they survive a failure there.
    `cache`: PTB tokens kept from an earlier call on the same data (`caption compare` tokenises the references once).
    """
    beam_size = beam_width(captioner.module.settings.decoding, beam_size=beam_size)  # reported with the scores
    data.setup("test" if split == "test" else "validate")
    loader = data.test_dataloader() if split == "test" else data.val_dataloader()
    greedy_too = greedy_too and beam_size > 1
    captioned: list[Captioned] = []
    greedy: list[Captioned] = []
    with tqdm(total=len(data.usable(split)), desc=description, unit="image") as progress:
        for batch in loader:
            batch = data.count_skipped(batch)
            encoded = {"annotations": captioner.annotations(batch)}  # once for the beam and greedy decoding
            captions = captioner.caption_batch(encoded, beam_size=beam_size, max_length=max_length)
            captioned += captioned_batch(batch, captions, keep_attention=True)
            if greedy_too:
                captions = captioner.caption_batch(encoded, beam_size=1, max_length=max_length)
                greedy += captioned_batch(batch, captions, keep_attention=False)
            progress.update(len(batch["image_id"]))
    data.report_skipped()
    file_names = {record.image_id: record.file for record in data.usable(split)}
    if out is not None:
        write_captions({item.image_id: item.caption for item in captioned}, out, file_names=file_names)
    scoring = dict(split=split, image_size=tuple(data.image_size), word_labels=data.source.word_labels,
                   cache=cache if cache is not None else PTBCache())  # the references tokenised once for both
    evaluation = score_split(captioned, beam_size=beam_size, **scoring,
                             meteor_timeout=METEOR_TIMEOUT if meteor_timeout is None else meteor_timeout)
    greedily = score_split(greedy, beam_size=1, metrics=GREEDY_METRICS, **scoring) if greedy_too else None
    return replace(evaluation, file_names=file_names, greedy=greedily)


def write_captions(captions: Mapping[int, Caption], out: Path, *,
                   file_names: Mapping[int, str | None] | None = None) -> None:
    """DIR/captions.json (the COCO results format, `caption.evaluation.results`) and DIR/captions.csv; `file_names`:
    image id -> its image file."""
    file_names = file_names or {}
    write_results([result(image_id, file_names.get(image_id), caption) for image_id, caption in captions.items()], out)


def write_evaluation(evaluation: Evaluation, out: Path, **about: Any) -> None:
    """DIR/metrics.json (with `about`, e.g. the checkpoint), DIR/captions.json (COCO results format) and
    DIR/captions.csv."""
    write_captions(evaluation.captions, out, file_names=evaluation.file_names)
    write_text(out / "metrics.json", json.dumps({**about, **evaluation.metrics()}, indent=2) + "\n")
