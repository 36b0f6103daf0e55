"""The one result format of `caption predict`, `caption evaluate` and `caption describe`: DIR/captions.json in the
COCO results format, and DIR/captions.csv beside it.

captions.json holds one entry per image, {"image_id", "caption", "file_name", "log_prob"}, as `COCO.loadRes` and
pycocoevalcap read it; with `num_captions` n > 1 also "n_best", the n best beams, inside the image's one entry (the
scorers take one caption per image id); `caption describe` adds each caption's "figure". captions.csv holds the same,
one row per caption: image_id, file_name, rank, caption, log_prob (and figure). Each field:
docs/attention.md#one-result-format. Both are UTF-8. A file name that is not UTF-8 (b"latin\\xe9.png" on Linux) is
carried as it is: in captions.json with its surrogate escape ("latin\\udce9.png", which `json.load` reads back and
`os.fsencode` turns into the file's bytes), in captions.csv with its bytes written as \\xNN ("latin\\xe9.png";
`caption.io.outputs.readable_name`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption.io.outputs import json_text, readable_name, writable_folder, write_text
from caption.model.captions import Caption

JSON_NAME = "captions.json"
CSV_NAME = "captions.csv"


@dataclass(frozen=True)
class Ranked:
    """One of an image's captions: its text, log-probability and (`caption describe`) its figure."""

    caption: str
    log_prob: float
    figure: str | None = None

    @classmethod
    def of(cls, caption: Caption, *, figure: str | Path | None = None) -> Ranked:
        return cls(caption.text, caption.log_prob, None if figure is None else str(figure))

    def entry(self) -> dict[str, Any]:
        return {"caption": self.caption, "log_prob": self.log_prob} | (
            {} if self.figure is None else {"figure": self.figure})


@dataclass(frozen=True)
class Result:
    """One image's captions, best first (one, or the n best)."""

    image_id: int
    file_name: str | None
    captions: tuple[Ranked, ...]

    def entry(self) -> dict[str, Any]:
        """Its captions.json entry."""
        best = self.captions[0]
        entry = {"image_id": self.image_id, "caption": best.caption, "file_name": self.file_name,
                 "log_prob": best.log_prob} | ({} if best.figure is None else {"figure": best.figure})
        if len(self.captions) > 1:
            entry["n_best"] = [ranked.entry() for ranked in self.captions]
        return entry

    def rows(self) -> list[dict[str, Any]]:
        """Its captions.csv rows, one per caption."""
        return [{"image_id": self.image_id, "file_name": self.file_name or "", "rank": rank, **ranked.entry()}
                for rank, ranked in enumerate(self.captions, start=1)]


def result(image_id: int, file_name: str | Path | None, captions: Caption | Sequence[Caption],
           figures: Sequence[str | Path] | None = None) -> Result:
    """The `Result` of one image: its caption, or its n best (best first), with their figures if drawn."""
    ranked = [captions] if isinstance(captions, Caption) else list(captions)
    drawn = list(figures) if figures is not None else [None] * len(ranked)
    return Result(image_id, None if file_name is None else str(file_name),
                  tuple(Ranked.of(caption, figure=figure) for caption, figure in zip(ranked, drawn, strict=True)))


def write_results(results: Iterable[Result], out: str | Path) -> tuple[Path, Path]:
    """Write DIR/captions.json and DIR/captions.csv (each atomically) for `results`, in their order; returns both
    paths. The one writer of `caption predict`, `caption evaluate` and `caption describe`."""
    results = list(results)
    folder = writable_folder(out, what="output")
    json_path, csv_path = folder / JSON_NAME, folder / CSV_NAME
    write_text(json_path, json_text([item.entry() for item in results], indent=1) + "\n")
    rows = [{key: readable_name(value) if key in ("file_name", "figure") else value for key, value in row.items()}
            for item in results for row in item.rows()]
    columns = ["image_id", "file_name", "rank", "caption", "log_prob"]
    columns += ["figure"] if any("figure" in row for row in rows) else []
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(csv_path, table.getvalue())
    return json_path, csv_path
