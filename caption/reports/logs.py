"""The training curves of the runs `caption compare` puts side by side, from their logs: a CSVLogger's metrics.csv
or TensorBoard's event files (read with tensorboard's `EventAccumulator`; tensorboard is the optional extra
`tensorboard`). The curves are the negative log-likelihood every objective shares (`train/nll`),
the terms of each objective (`OBJECTIVE_TERMS`: a panel each, drawn for the runs that log them) and every figure
validation logs (`val/...`), each at the steps it was logged, without the points a run logged as NaN (METEOR without
Java, attention accuracy without object words). The training loss (`train/loss`) is not one of them: soft's (eq. 14)
and hard's (eq. 12's surrogate) are different objectives, on scales that share no axis. A run whose curves cannot be
read is named, with the reason."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from caption.io.install import install_line

NLL = "train/nll"  # -log p(y|a) (hard: -log p(y|s̃,a)), what soft's and hard's objectives share
# the objectives' own terms (`caption.model.objectives.LossTerms`): the doubly stochastic penalty (soft trains it,
# hard reports it), hard's REINFORCE term, entropy, reward, baseline and what the baseline leaves; then self-critical
# training's (`caption.model.self_critical.SelfCriticalTerms`): the CIDEr-D reward, its baseline, the advantage's
# spread and positive share, the samples' length. Hard's reward (a log-likelihood) and SCST's (a CIDEr-D) differ in
# name, so each has a panel of its own.
OBJECTIVE_TERMS = tuple(f"train/{name}" for name in (
    "doubly_stochastic", "reinforce", "entropy", "reward", "baseline", "advantage_square",
    "cider", "cider_baseline", "advantage_std", "advantage_positive", "sample_length"))
# what each training curve is, as its panel's axis says
MEANINGS = {
    NLL: "-log p(y|a), per caption",
    "train/doubly_stochastic": "Σ_i (1 - Σ_t α_ti)², before λ",
    "train/reinforce": "hard: REINFORCE term, before λ_r",
    "train/entropy": "H[s̃] = Σ_t H(α_t), per caption",
    "train/reward": "hard: R, log-likelihood reward (eq. 12)",
    "train/baseline": "hard: b, moving average of R",
    "train/advantage_square": "hard: (R - b)², mean",
    "train/cider": "SCST: r, CIDEr-D of the samples",
    "train/cider_baseline": "SCST: b, the baseline's CIDEr-D",
    "train/advantage_std": "SCST: std of r - b",
    "train/advantage_positive": "SCST: share of samples with r > b",
    "train/sample_length": "SCST: tokens per sample",
}
VALIDATION = "val/"  # every figure logged under it is drawn
# drawn first, in this order, when logged: the likelihood, the paper's metrics, where the model looks, how sharp its
# attention is; the objectives' terms and the other validation figures after them, by name
FIRST = (NLL, "val/bleu4", "val/cider", "val/attention_accuracy", "val/alpha_entropy")
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


def drawn(name: str) -> bool:
    """Whether a logged quantity is one of the curves: the likelihood, an objective's term or a validation figure."""
    return name == NLL or name in OBJECTIVE_TERMS or name.startswith(VALIDATION)


def in_order(names: set[str]) -> list[str]:
    """The curves' names, FIRST's first, in its order, then the others by name."""
    return sorted(names, key=lambda name: (FIRST.index(name) if name in FIRST else len(FIRST), name))


def read_curves(logs: Path) -> Curves:
    """The curves a run logged, from its metrics.csv or its TensorBoard event folder, each in the order of its steps,
    in `in_order`'s order; `UnreadableLogs` says why there are none."""
    curves = read_csv_curves(logs) if logs.suffix == ".csv" else read_tensorboard_curves(logs)
    curves = {name: sorted((step, value) for step, value in points if math.isfinite(value))
              for name, points in curves.items()}
    curves = {name: curves[name] for name in in_order(set(curves)) if curves[name]}
    if not curves:
        raise UnreadableLogs(f"{logs} holds neither {NLL} nor a {VALIDATION}... figure")
    return curves


def read_csv_curves(path: Path) -> Curves:
    """{name: [(step, value)]} for the columns of a CSVLogger metrics.csv that are curves (`drawn`)."""
    try:
        with path.open(newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
        names = [name for name in reader.fieldnames or [] if drawn(name)]
        return {name: [(int(row["step"]), float(row[name])) for row in rows if row.get(name) not in (None, "")]
                for name in names}
    except (OSError, ValueError, KeyError, csv.Error) as error:
        raise UnreadableLogs(f"{path} cannot be read as a CSVLogger's metrics.csv ({error})") from None


def read_tensorboard_curves(folder: Path) -> Curves:
    """{name: [(step, value)]} for the scalars in a folder of TensorBoard event files that are curves (`drawn`)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise UnreadableLogs(f"its TensorBoard logs ({folder}) need the tensorboard package: "
                             f"{install_line(extra='tensorboard')}") from None
    try:
        accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
        logged = [name for name in accumulator.Tags().get("scalars", []) if drawn(name)]
        return {name: [(event.step, event.value) for event in accumulator.Scalars(name)] for name in logged}
    except Exception as error:  # a corrupt or cut-short event file: tensorboard's own errors vary by version
        raise UnreadableLogs(f"its TensorBoard logs ({folder}) cannot be read ({error})") from None
