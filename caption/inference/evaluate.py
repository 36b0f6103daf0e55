"""Caption a whole split with a `Captioner` and score it on the one evaluation path (`caption.evaluation.scoring`).

Captions are decoded in batches from the data module's loader (images, or annotations from a feature cache),
then scored as validation and `caption test` score them: coco-caption's metrics after its PTB tokenizer, the
mean entropy of α per step and, where the data has object boxes, the localisation report. `caption evaluate`
and `caption compare` are this plus files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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
from caption.io.provenance import Provenance, provenance, run_seed
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
    beam_sizes: Sequence[int] = (),
) -> Evaluation:
    """Caption every image of `split` in batches and score the captions against the raw references; with a beam and
    `greedy_too`, greedily as well, its scores beside the beam's (`Evaluation.greedy`, `Evaluation.side_by_side`);
    with `beam_sizes`, at each of those beam sizes too, scored for BLEU-4, CIDEr-D and attention accuracy
    (`Evaluation.beam_sizes`). Each batch is encoded once, and decoded once at each beam size any of these asks for.

    With `out`, the captions are written to out/captions.json before scoring, so they survive a failure there.
    `cache`: PTB tokens kept from an earlier call on the same data (`caption compare` tokenises the references once).
    """
    beam_size = beam_width(captioner.module.settings.decoding, beam_size=beam_size)  # reported with the scores
    data.setup("test" if split == "test" else "validate")
    loader = data.test_dataloader() if split == "test" else data.val_dataloader()
    greedy_too = greedy_too and beam_size > 1
    swept = sorted(set(beam_sizes))
    widths = [beam_size, *([1] if greedy_too else []), *swept]  # each decoded once
    decoded: dict[int, list[Captioned]] = {width: [] for width in widths}
    with tqdm(total=len(data.usable(split)), desc=description, unit="image") as progress:
        for batch in loader:
            batch = data.count_skipped(batch)
            encoded = {"annotations": captioner.annotations(batch)}  # once for the beam, greedy and each beam size
            for width, found in decoded.items():
                captions = captioner.caption_batch(encoded, beam_size=width, max_length=max_length)
                found += captioned_batch(batch, captions, keep_attention=width == beam_size)
            progress.update(len(batch["image_id"]))
    captioned = decoded[beam_size]
    data.report_skipped()
    file_names = {record.image_id: record.file for record in data.usable(split)}
    if out is not None:
        write_captions({item.image_id: item.caption for item in captioned}, out, file_names=file_names)
    scoring = dict(split=split, image_size=tuple(data.image_size), word_labels=data.source.word_labels,
                   cache=cache if cache is not None else PTBCache())  # the references tokenised once for all
    evaluation = score_split(captioned, beam_size=beam_size, **scoring,
                             meteor_timeout=METEOR_TIMEOUT if meteor_timeout is None else meteor_timeout)
    greedily = score_split(decoded[1], beam_size=1, metrics=GREEDY_METRICS, **scoring) if greedy_too else None
    scored = {beam_size: evaluation} | ({} if greedily is None else {1: greedily})  # not scored again
    by_beam_size = {width: scored[width] if width in scored else
                    score_split(decoded[width], beam_size=width, metrics=GREEDY_METRICS, **scoring) for width in swept}
    return replace(evaluation, file_names=file_names, greedy=greedily, beam_sizes=by_beam_size)


def write_captions(captions: Mapping[int, Caption], out: Path, *,
                   file_names: Mapping[int, str | None] | None = None) -> None:
    """DIR/captions.json (the COCO results format, `caption.evaluation.results`) and DIR/captions.csv; `file_names`:
    image id -> its image file."""
    file_names = file_names or {}
    write_results([result(image_id, file_names.get(image_id), caption) for image_id, caption in captions.items()], out)


def made_by(captioner: Captioner) -> Provenance:
    """How the captioner's figures are made: its precision and device, its training run's seed, this code's
    commit (`caption.io.provenance`)."""
    return provenance(precision=captioner.precision, seed=run_seed(captioner.checkpoint), device=captioner.device)


def write_evaluation(evaluation: Evaluation, out: Path, *, made: Provenance | None = None, **about: Any) -> None:
    """DIR/metrics.json (with `about`, e.g. the checkpoint, and under "provenance" how its figures were `made`),
    DIR/captions.json (COCO results format) and DIR/captions.csv."""
    write_captions(evaluation.captions, out, file_names=evaluation.file_names)
    made_record = {} if made is None else {"provenance": made.record()}
    write_text(out / "metrics.json", json.dumps({**about, **made_record, **evaluation.metrics()}, indent=2) + "\n")
