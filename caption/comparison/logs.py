"""The training curves of the runs `caption compare` puts side by side, from their logs: a CSVLogger's metrics.csv
or TensorBoard's event files (read with tensorboard's `EventAccumulator`; tensorboard is the optional extra
`show-attend-tell[tensorboard]`). A run whose curves cannot be read is named, with the reason."""

from __future__ import annotations

import csv
from pathlib import Path

# logged quantities drawn when a run has them
CURVES = ("train/nll", "val/bleu4", "val/cider", "val/attention_accuracy", "val/alpha_entropy")
EVENT_FILES = "events.out.tfevents.*"

Curves = dict[str, list[tuple[int, float]]]  # logged name -> [(step, value)]


class UnreadableLogs(Exception):
    """A run's logs that give no curves; the message says why."""


def newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda path: path.stat().st_mtime, default=None)


def find_logs(path: Path, checkpoint: Path) -> Path | None:
    """The run's newest log under the run folder (or around the checkpoint, two levels up): a CSVLogger's
    metrics.csv, else the newest folder of TensorBoard event files."""
    root = path if path.is_dir() else checkpoint.parent.parent
    found = newest(list(root.rglob("metrics.csv")))
    if found is not None:
        return found
    events = newest(list(root.rglob(EVENT_FILES)))
    return None if events is None else events.parent


def read_curves(logs: Path) -> Curves:
    """The CURVES a run logged, from its metrics.csv or its TensorBoard event folder; `UnreadableLogs` says why
    there are none."""
    curves = read_csv_curves(logs) if logs.suffix == ".csv" else read_tensorboard_curves(logs)
    curves = {name: points for name, points in curves.items() if points}
    if not curves:
        raise UnreadableLogs(f"{logs} holds none of {', '.join(CURVES)}")
    return curves


def read_csv_curves(path: Path) -> Curves:
    """{name: [(step, value)]} for the CURVES columns a CSVLogger metrics.csv has."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            rows = list(csv.DictReader(file))
        return {name: [(int(row["step"]), float(row[name])) for row in rows if row.get(name) not in (None, "")]
                for name in CURVES}
    except (OSError, ValueError, KeyError, csv.Error) as error:
        raise UnreadableLogs(f"{path} cannot be read as a CSVLogger's metrics.csv ({error})") from None


def read_tensorboard_curves(folder: Path) -> Curves:
    """{name: [(step, value)]} for the CURVES scalars in a folder of TensorBoard event files."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise UnreadableLogs(f"its TensorBoard logs ({folder}) need the tensorboard package: "
                             "pip install 'show-attend-tell[tensorboard]'") from None
    try:
        accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
        logged = set(accumulator.Tags().get("scalars", []))
        return {name: [(event.step, event.value) for event in accumulator.Scalars(name)]
                for name in CURVES if name in logged}
    except Exception as error:  # a corrupt or cut-short event file: tensorboard's own errors vary by version
        raise UnreadableLogs(f"its TensorBoard logs ({folder}) cannot be read ({error})") from None
