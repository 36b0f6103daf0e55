"""Stand-ins for the loggers whose packages are not installed (wandb, mlflow): subclasses of Lightning's
`WandbLogger` and `MLFlowLogger` that keep the public calls a callback makes (`log_image`; `experiment.log_figure`,
`experiment.log_text` with `run_id`) and write what they get under `<save_dir>/<name>`, as `logged.jsonl` (one JSON
line per call) and PNG files; and `NoImages`, a logger that takes no images. A config names them by class_path
(`kit.loggers.WandbStandIn`), as it would the real loggers."""

import json
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch.loggers import Logger, MLFlowLogger, WandbLogger
from PIL import Image


class Recorder:
    """What a stand-in was given: a line per call in `<save_dir>/<name>/logged.jsonl`, images as PNG files beside it."""

    def __init__(self, save_dir: str, name: str) -> None:
        self.root, self.logger_name = save_dir, name
        self.folder = Path(save_dir) / name
        self.folder.mkdir(parents=True, exist_ok=True)

    def record(self, **call: Any) -> None:
        with (self.folder / "logged.jsonl").open("a", encoding="utf-8") as file:
            file.write(json.dumps(call) + "\n")

    def image(self, pixels: np.ndarray, name: str) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path)
        return str(path)


class QuietLogger:
    """The part of a Logger that the stand-ins keep to themselves: hyperparameters and metrics are not kept."""

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        pass

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        pass

    def finalize(self, status: str = "success") -> None:
        pass

    @property
    def name(self) -> str:
        return self.recorder.logger_name

    @property
    def version(self) -> str:
        return "0"

    @property
    def save_dir(self) -> str:
        return self.recorder.root


class WandbStandIn(QuietLogger, WandbLogger):
    """`WandbLogger` without wandb: its `log_image(key, images, step, **per-image lists)` recorded."""

    def __init__(self, save_dir: str = ".", name: str = "stand-in") -> None:
        Logger.__init__(self)
        self.recorder = Recorder(save_dir, name)

    @property
    def experiment(self) -> None:
        return None

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        files = [self.recorder.image(np.asarray(image), f"{key}/step{step}-{index}.png")
                 for index, image in enumerate(images)]
        self.recorder.record(call="log_image", key=key, step=step, files=files, **kwargs)


class MlflowClientStandIn:
    """The `MlflowClient` calls of a run's artifacts: `log_figure` and `log_text`, recorded."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def log_figure(self, run_id: str, figure: Any, artifact_file: str, **kwargs: Any) -> None:
        path = self.recorder.folder / "artifacts" / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
        self.recorder.record(call="log_figure", run_id=run_id, artifact_file=artifact_file)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        path = self.recorder.folder / "artifacts" / artifact_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.recorder.record(call="log_text", run_id=run_id, artifact_file=artifact_file)


class MLFlowStandIn(QuietLogger, MLFlowLogger):
    """`MLFlowLogger` without mlflow: `experiment` is a client that records its artifact calls, `run_id` fixed."""

    def __init__(self, save_dir: str = ".", name: str = "stand-in") -> None:
        Logger.__init__(self)
        self.recorder = Recorder(save_dir, name)
        self.client = MlflowClientStandIn(self.recorder)

    @property
    def experiment(self) -> MlflowClientStandIn:
        return self.client

    @property
    def run_id(self) -> str:
        return "run-1"


class NoImages(QuietLogger, Logger):
    """A logger with no image call at all."""

    def __init__(self, save_dir: str = ".", name: str = "stand-in") -> None:
        super().__init__()
        self.recorder = Recorder(save_dir, name)

    @property
    def experiment(self) -> None:
        return None


class Recording(Logger):
    """Keeps what the trainer writes to its loggers: [(step, {name: value})]."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))

    def values(self, name: str) -> list[tuple[int, float]]:
        return [(step, float(metrics[name])) for step, metrics in self.rows if name in metrics]
