"""The models `caption compare` puts side by side: each checkpoint (or run folder), its captioner, name and logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption.checkpoints import find_checkpoint
from caption.errors import ConfigError
from caption.inference import Captioner
from caption.module import ModuleSettings


@dataclass
class Model:
    """One model to compare."""

    name: str  # label in the report
    checkpoint: Path
    captioner: Captioner
    metrics_csv: Path | None  # the run's CSVLogger log, if found

    @property
    def settings(self) -> ModuleSettings:
        return self.captioner.module.settings

    @property
    def source(self) -> dict[str, Any] | None:
        """The data source it was trained on ({class_path, init_args}), if recorded."""
        return None if self.captioner.data is None else self.captioner.data[0]["source"]


def newest(paths: list[Path]) -> Path | None:
    return max(paths, key=lambda path: path.stat().st_mtime, default=None)


def find_metrics_csv(path: Path, checkpoint: Path) -> Path | None:
    """The newest metrics.csv under the run folder (or around the checkpoint, two levels up)."""
    root = path if path.is_dir() else checkpoint.parent.parent
    return newest(list(root.rglob("metrics.csv")))


def model_names(captioners: list[Captioner], names: list[str] | None) -> list[str]:
    """`names` if given, else the attention kind ("soft", "hard"), numbered when it repeats."""
    if names is not None:
        if len(names) != len(captioners) or len(set(names)) != len(names):
            raise ConfigError(f"--names needs {len(captioners)} distinct names, one per model; got {names}")
        return names
    kinds = [captioner.module.settings.attention.kind for captioner in captioners]
    return [kind if kinds.count(kind) == 1 else f"{kind}-{kinds[:i].count(kind) + 1}" for i, kind in enumerate(kinds)]


def read_models(given: list[Path], *, names: list[str] | None, device: str, config: Path | None) -> list[Model]:
    """A `Model` per checkpoint or run folder (a run folder stands for its newest model-selection checkpoint,
    `best-*.ckpt`, else `last.ckpt`, and the newest metrics.csv of its logs); `config`: a YAML whose `data:` section
    stands for the data settings of every checkpoint."""
    paths = [find_checkpoint(path) for path in given]
    captioners = [Captioner.from_checkpoint(path, device=device, config=config) for path in paths]
    return [Model(name, path, captioner, find_metrics_csv(folder, path))
            for name, path, captioner, folder in zip(model_names(captioners, names), paths, captioners, given)]
