"""A test-only callback that records what each rank sees, for tests that run the real CLI in subprocesses.

Add it with `--trainer.callbacks+=probes.Probe` and PYTHONPATH=tests; it appends one JSON line per
event to $CAPTION_PROBE_DIR/rank<global rank>.jsonl (Lightning's ddp launcher passes the
environment on to the other ranks).
"""

import json
import os
import signal
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback


def read_probe(folder: Path, rank: int) -> list[dict[str, Any]]:
    """The records of one rank so far (a line still being written is left out)."""
    path = folder / f"rank{rank}.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return [json.loads(line) for line in lines]


def optimizer_summary(optimizer_state: dict[str, Any]) -> dict[str, float]:
    """Adam's step count and moment sums from an optimizer state_dict (live or from a checkpoint)."""
    states = list(optimizer_state["state"].values())
    return {
        "optimizer_step": float(states[0]["step"]) if states else 0.0,
        "exp_avg_sum": float(sum(state["exp_avg"].double().sum() for state in states)),
        "exp_avg_sq_sum": float(sum(state["exp_avg_sq"].double().sum() for state in states)),
    }


class Probe(Callback):
    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, event: str, **extra: Any) -> None:
        record = {
            "event": event,
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "baseline": pl_module.objective.baseline.value.item() if pl_module.settings.attention.kind == "hard" else 0.0,
            "parameters": float(sum(p.detach().double().sum() for p in pl_module.parameters())),
            **extra,
        }
        if trainer.optimizers:
            record.update(optimizer_summary(trainer.optimizers[0].state_dict()))
        folder = Path(os.environ["CAPTION_PROBE_DIR"])
        with open(folder / f"rank{trainer.global_rank}.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_start")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._write(trainer, pl_module, "batch_end")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_end")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            self._write(trainer, pl_module, "validation_end", metrics=metrics)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        self._write(trainer, pl_module, "test_end", metrics=metrics)


class SigtermInSanityCheck(Callback):
    """Sends this process SIGTERM when the sanity check starts, as a pre-empting scheduler may (before any step)."""

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
