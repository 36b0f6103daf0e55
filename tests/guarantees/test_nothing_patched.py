"""Nothing of a dependency is replaced while a command runs: from inside a running `caption fit` (a callback, in this
process), every function, method, property and hook that atomic logs, one-line warnings and the class-path rule could
be tempted to replace is still the original.

The places: Lightning's logger writers and their `experiment` properties, `threading.excepthook`,
`warnings.showwarning`, jsonargparse's `import_object` (in every module that holds it), `sys.meta_path`, and the
private methods of LightningCLI and EarlyStopping (not overridden), and no method set on a logger instance.
"""

import sys
import threading
import warnings

import pytest
from kit.tiny import fit_args
from lightning.pytorch.callbacks import Callback

from caption.cli import main

LOGGER_METHODS = ("log_hyperparams", "log_metrics", "save", "finalize", "experiment")


def places() -> dict[str, object]:
    """{where: what is there now} for each of those places."""
    import lightning.fabric.loggers.csv_logs as fabric_csv
    import lightning.pytorch.loggers as loggers
    from lightning.pytorch.loggers import csv_logs, tensorboard

    found: dict[str, object] = {
        "threading.excepthook": threading.excepthook,
        "warnings.showwarning": warnings.showwarning,
        "sys.meta_path": tuple(sys.meta_path),
        "csv_logs.save_hparams_to_yaml": csv_logs.save_hparams_to_yaml,
        "tensorboard.save_hparams_to_yaml": tensorboard.save_hparams_to_yaml,
    }
    for owner in (*loggers.CSVLogger.__mro__, *loggers.TensorBoardLogger.__mro__,
                  *vars(fabric_csv).values()):  # the fabric writer, by whatever name it has
        if isinstance(owner, type) and owner.__module__.startswith("lightning"):
            for name in ("experiment", "save"):
                if name in vars(owner):
                    found[f"{owner.__module__}.{owner.__qualname__}.{name}"] = vars(owner)[name]
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "jsonargparse" and module is not None and "import_object" in vars(module):
            found[f"{name}.import_object"] = vars(module)["import_object"]
    return found


class Originals(Callback):
    """Records `places()` and the trainer's loggers' own instance attributes at the start of the fit."""

    seen: dict[str, object] = {}
    instance_methods: list[str] = []

    def on_fit_start(self, trainer, pl_module):
        Originals.seen = places()
        Originals.instance_methods = [f"{type(logger).__name__}.{name}" for logger in trainer.loggers
                                      for name in LOGGER_METHODS if name in vars(logger)]


@pytest.mark.slow
def test_nothing_of_a_dependency_is_replaced_inside_a_running_fit(tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import EarlyStopping
    from lightning.pytorch.cli import LightningCLI  # noqa: F401  (imports the jsonargparse modules it uses)

    from caption.cli.lightning.commands import CaptionCLI
    from caption.training.callbacks import AttentionPatience

    monkeypatch.setattr(sys, "argv", ["caption"])
    monkeypatch.setattr(sys.modules[__name__], "Originals", Originals)
    before = places()
    main(["fit", *fit_args(tmp_path / "run", "--trainer.limit_test_batches", "0",
                           f"--trainer.callbacks+={__name__}.Originals", "--import", __name__)])
    assert Originals.seen, "the callback ran"
    changed = sorted(key for key in before.keys() | Originals.seen.keys()
                     if before.get(key) is not Originals.seen.get(key) and before.get(key) != Originals.seen.get(key))
    assert not changed, f"replaced while `caption fit` ran: {changed}"
    assert not Originals.instance_methods, Originals.instance_methods
    assert "_parse_ckpt_path" not in vars(CaptionCLI)
    assert not any("_run_early_stopping_check" in vars(kind) for kind in AttentionPatience.__mro__
                   if kind is not EarlyStopping)
