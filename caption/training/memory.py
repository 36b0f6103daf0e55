"""The memory a training run needs, estimated from its vocabulary before the first step, as beam search estimates its
own (`caption.model.search.check_search_memory`): a vocabulary of a million words asks for tens of gigabytes in the
word scores of one step, and the run is refused in one line that says how to shrink it, not in an allocator's
traceback.

Notation: V words, B captions per batch (times the Monte Carlo samples of hard attention), T = max_length + 1 steps.

    weights:  P values, and for the P_t trainable ones a gradient and the optimizer's states (Adam: 2, RMSprop: 1)
    a step:   the word scores (B, T, V) four times: the logits, their float32 log-softmax, and the gradient of each
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from caption.errors import ConfigError, size_text
from caption.model.search import BYTES_PER_VALUE, FreeMemory

OPTIMIZER_STATES = {"adam": 2, "rmsprop": 1}  # values the optimizer keeps per trainable parameter
WORD_SCORE_COPIES = 4  # the (B, T, V) tensors alive at a step's peak: logits, log-softmax and their gradients


@dataclass(frozen=True)
class TrainingMemory:
    """What a training run is estimated to need, in bytes.

    Args:
        weights: the parameters not yet on the device, their gradients and the optimizer's states.
        step: the word scores of one step and their gradients.
    """

    weights: int
    step: int

    @property
    def total(self) -> int:
        return self.weights + self.step


def training_memory(*, parameters: int, trainable: int, on_device: bool, optimizer: str, vocabulary_size: int,
                    batch_size: int, steps: int) -> TrainingMemory:
    """The estimate of the module's notation.

    Args:
        parameters: the model's parameter count.
        trainable: how many of them train (each with a gradient and the optimizer's states).
        on_device: whether the parameters already are where training runs (the CPU: they were built there).
        optimizer: "adam" or "rmsprop".
        vocabulary_size: V.
        batch_size: B, captions per batch (times hard attention's samples).
        steps: T, the longest padded caption (max_length + 1).
    """
    weights = (0 if on_device else parameters) + trainable * (1 + OPTIMIZER_STATES.get(optimizer, 2))
    step = WORD_SCORE_COPIES * batch_size * steps * vocabulary_size
    return TrainingMemory(weights=BYTES_PER_VALUE * weights, step=BYTES_PER_VALUE * step)


def check_training_memory(needed: TrainingMemory, *, vocabulary_size: int, batch_size: int, steps: int,
                          device: torch.device, free_memory: FreeMemory) -> None:
    """ConfigError, before the first step, for a run that needs more memory than `device` has free
    (`free_memory(device)`; None: not known, not checked), naming the vocabulary's size, the estimate, the memory free
    and the settings that shrink it."""
    free = free_memory(device)
    if free is None or needed.total <= free:
        return
    raise ConfigError(
        f"a vocabulary of {vocabulary_size} words needs about {size_text(needed.total)} to train "
        f"({size_text(needed.weights)} for the weights, their gradients and the optimizer's state; "
        f"{size_text(needed.step)} for a step's word scores, {batch_size} captions x {steps} words x "
        f"{vocabulary_size} words), more than the {size_text(free)} free on {device}: shrink the vocabulary with "
        "data.min_count (words seen fewer times become <unk>) or data.max_vocab_size, or lower data.batch_size"
    )
