"""A Lightning run's config file, written as the checkpoints are, with a one-line error.

LightningCLI's SaveConfigCallback writes `config.yaml` into the log folder; the parser writes it whole with
`caption.io.outputs.write_atomically` (`caption.cli.lightning.parser`), and a failed write is one line naming the file
here. The loggers' files are the project's loggers' own (`caption.training.loggers`).
"""

import os

import lightning as L
from lightning.pytorch.cli import SaveConfigCallback

from caption.io.outputs import cannot_write


class SaveConfig(SaveConfigCallback):
    """LightningCLI's config saver (`<log_dir>/config.yaml`); a failed write is one line naming the file."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        try:
            super().setup(trainer, pl_module, stage)
        except OSError as error:
            path = os.path.join(trainer.log_dir or trainer.default_root_dir, self.config_filename)
            raise cannot_write(path, error, what="the run's config") from None
