"""A test-only callback for fine-tuning runs in subprocesses: what the encoder and the optimizer hold.

Add it with `--trainer.callbacks+=finetune_probe.EncoderProbe` and PYTHONPATH=tests; it appends one JSON line
per event to $CAPTION_PROBE_DIR/encoder.jsonl.
"""

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback


def checksum(tensors: Iterable[torch.Tensor]) -> float:
    """Sum of every value, in float64, in the order given."""
    return float(sum(tensor.detach().double().sum() for tensor in tensors))


def read_records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "encoder.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return [json.loads(line) for line in lines]


class EncoderProbe(Callback):
    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, event: str) -> None:
        encoder = pl_module.encoder
        record = {
            "event": event,
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "layer3": checksum(encoder.layer3.parameters()),
            "layer4": checksum(encoder.layer4.parameters()),
            "decoder": checksum(pl_module.decoder.parameters()),
            "trainable": sum(parameter.requires_grad for parameter in encoder.parameters()),
            "encoder_training": encoder.training,
            "groups": [{"name": group.get("name"), "lr": group["lr"], "size": len(group["params"])}
                       for group in trainer.optimizers[0].param_groups] if trainer.optimizers else [],
        }
        with open(Path(os.environ["CAPTION_PROBE_DIR"]) / "encoder.jsonl", "a") as file:
            file.write(json.dumps(record) + "\n")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._write(trainer, pl_module, "train_start")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        self._write(trainer, pl_module, "batch_end")
