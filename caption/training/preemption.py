"""SIGTERM on several processes: every rank stops after the same batch, so the save that follows is one collective.

A scheduler pre-empting a DDP job sends SIGTERM to every process (SLURM: to every task), each at its own moment, or
only to the first (Lightning's launcher then passes it on). Lightning's own handler broadcasts from inside the signal
handler and each rank stops at the end of whichever batch it is in when its own flag is set: ranks that stop one batch
apart run different collectives (the save's barrier against the next batch's broadcast), and gloo aborts ("Received
data size doesn't match expected size") or NCCL hangs, before anything is saved.

`SigtermAgreement` replaces that handler while a run on several processes trains: the handler only notes the signal,
and after every training and validation batch the ranks agree, in one all-reduce, whether any of them received one
(`Strategy.reduce_boolean_decision`). When one did, every rank sets Lightning's own flag at the same batch; Lightning
then stops them all after that batch, as it stops a single process, and `PeriodicCheckpoint` saves `last.ckpt`.
On one process nothing changes: Lightning's handler stays.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import lightning as L


class SigtermAgreement:
    """Notes SIGTERM on every rank and makes the ranks agree on it at batch ends (see the module docstring)."""

    def __init__(self) -> None:
        self.received = False
        self._replaced: Any = None  # the handler replaced (Lightning's), put back when training ends
        self.active = False

    def start(self, trainer: L.Trainer) -> None:
        """Take over SIGTERM while training, on several processes (after Lightning installed its handler)."""
        if trainer.world_size < 2 or self.active:
            return
        self._replaced = signal.signal(signal.SIGTERM, self._note)
        self.active = True

    def stop(self) -> None:
        """Put back the handler replaced by `start`."""
        if self.active:
            signal.signal(signal.SIGTERM, self._replaced)
            self.active = False

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.received = True  # only a flag: no collective and no logging inside a signal handler

    def agree(self, trainer: L.Trainer) -> None:
        """After a batch, on every rank together: if any rank received SIGTERM, raise Lightning's flag on all of them,
        so that Lightning stops every rank after this same batch."""
        if not self.active:
            return
        if trainer.strategy.reduce_boolean_decision(self.received, all=False):
            # Lightning's own flag (`trainer.received_sigterm`, read-only): its loops stop on it after this batch
            trainer._signal_connector.received_sigterm = True
