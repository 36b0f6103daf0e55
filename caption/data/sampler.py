"""Training batches grouped by caption length (the paper, sec. 4.3), by image, or at random, on one process or
several, resumable mid-epoch.

`LengthBatchSampler` cuts each length's shuffled captions into batches (the original code's `HomogeneousData`: no
step spent on padding); `ImageBatchSampler` puts every caption of an image into one batch, so a trained encoder sees
each image once per step; `RandomBatchSampler` shuffles with no grouping. An epoch's batches follow from (seed, epoch)
alone: under DDP every rank builds the same list and takes every `num_replicas`-th batch (rank and epoch come from the
`DistributedSampler` given as `sampler`), and `ResumableLoader` counts the batches handed out, so that `--ckpt_path
last` continues the epoch with the next one. More: docs/datasets.md#training-batches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

# what must be the same on resuming for the saved place to mean the same batches
SAME_ON_RESUME = ("seed", "replicas", "batch_size", "items", "kind")


class GroupedBatchSampler(BatchSampler):
    """Yields lists of dataset indices, each batch made of items of the same group (`groups[i]`: item i's group).

    Args:
        sampler: a `DistributedSampler` over the dataset: where `num_replicas`, `rank` and `epoch` come from.
        batch_size: items per batch at most.
        drop_last: drop batches smaller than `batch_size` (and trim rather than pad across ranks).
        groups: the group of every item of the dataset (its length, its image).
        shuffle: shuffle the items and the order of the batches, anew each epoch.
        seed: base seed of the shuffling, the same on every rank.
    """

    def __init__(
        self,
        sampler: DistributedSampler,
        batch_size: int,
        drop_last: bool = False,
        *,
        groups: Sequence[int],
        shuffle: bool = True,
        seed: int = 0,
    ):
        super().__init__(sampler, batch_size, drop_last)
        if not isinstance(sampler, DistributedSampler):
            raise TypeError(f"{type(self).__name__} needs a DistributedSampler (for its ranks), got {type(sampler)}")
        if len(groups) != len(sampler.dataset):
            raise ValueError(f"{len(groups)} groups for a dataset of {len(sampler.dataset)} items")
        self.groups = [int(group) for group in groups]
        self.shuffle = shuffle
        self.seed = seed
        self.epoch_started: int | None = None  # the epoch whose batches were handed out last
        self.batches_done = 0  # of that epoch, the batches handed to training on this rank (`ResumableLoader`)
        self._resume_at: dict[str, Any] | None = None  # a checkpoint's place, taken up when its epoch starts
        self._epoch_batches: tuple[int, list[list[int]]] | None = None  # (epoch, its global batches)

    def cut(self, groups: dict[int, list[int]]) -> list[list[int]]:
        """This epoch's batches from the items of each group, in shuffled order within each group."""
        raise NotImplementedError

    def global_batches(self) -> list[list[int]]:
        """Every batch of this epoch, identical on every rank (made once per epoch: Lightning asks the length
        several times, and at COCO's size one shuffle of the captions in Python takes a noticeable fraction of a
        second)."""
        if self._epoch_batches is not None and self._epoch_batches[0] == self.sampler.epoch:
            return self._epoch_batches[1]
        generator = torch.Generator().manual_seed(self.seed + self.sampler.epoch)
        count = len(self.groups)
        order = torch.randperm(count, generator=generator).tolist() if self.shuffle else range(count)
        groups: dict[int, list[int]] = defaultdict(list)
        for index in order:
            groups[self.groups[index]].append(index)
        batches = self.cut(groups)
        if self.drop_last:
            batches = [batch for batch in batches if len(batch) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        self._epoch_batches = (self.sampler.epoch, batches)
        return batches

    def rank_batches(self) -> list[list[int]]:
        """This rank's batches of this epoch, in order: every `num_replicas`-th of the padded (or trimmed) list."""
        batches = self.global_batches()
        replicas, rank = self.sampler.num_replicas, self.sampler.rank
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % replicas]
        elif batches:
            padding = -len(batches) % replicas
            batches = batches + (batches * (padding // len(batches) + 1))[:padding]
        return batches[rank::replicas]

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batches of the epoch set on `sampler`, from the place a loaded checkpoint saved, if it saved
        one in this epoch."""
        start = self._take_resume_place()
        self.epoch_started, self.batches_done = self.sampler.epoch, start
        return iter(self.rank_batches()[start:])

    def __len__(self) -> int:
        total = len(self.global_batches())
        if self.drop_last:
            return total // self.sampler.num_replicas
        return -(-total // self.sampler.num_replicas)

    def identity(self) -> dict[str, Any]:
        """What makes the batches of an epoch the same ones: `SAME_ON_RESUME`."""
        return {"kind": type(self).__name__, "seed": self.seed, "replicas": self.sampler.num_replicas,
                "batch_size": self.batch_size, "items": len(self.groups)}

    def state_dict(self) -> dict[str, Any]:
        """The place in the epoch: its number and the batches this rank has handed to training, with `identity()`."""
        if self._resume_at is not None:  # loaded, but its epoch has not started yet: still the place to resume at
            return dict(self._resume_at)
        epoch = self.sampler.epoch if self.epoch_started is None else self.epoch_started
        return {**self.identity(), "epoch": epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the saved epoch after its last batch handed to training (when that epoch starts). A place saved
        with other batches (another seed, number of processes, batch size or dataset) cannot be kept: a warning says
        so, and the epoch's remaining steps draw from a new order."""
        changed = [f"{key} {state.get(key)} -> {value}" for key, value in self.identity().items()
                   if state.get(key) != value]
        if changed:
            rank_zero_warn(
                f"--ckpt_path: the checkpoint was saved {state.get('batches_done')} batches into epoch "
                f"{state.get('epoch')} with other training batches ({', '.join(changed)}), so that place cannot be "
                "kept: the rest of the epoch draws from a new order, and some captions may be seen twice or not at all"
            )
            return
        self._resume_at = dict(state)

    def _take_resume_place(self) -> int:
        """The batches of this epoch already trained on, from a loaded checkpoint saved in this epoch; else 0."""
        place, self._resume_at = self._resume_at, None
        if place is None or place["epoch"] != self.sampler.epoch:
            return 0
        return min(int(place["batches_done"]), len(self))


class LengthBatchSampler(GroupedBatchSampler):
    """Batches of captions of one length (`groups`: every item's length in tokens); a length's last batch may
    be smaller."""

    def cut(self, groups: dict[int, list[int]]) -> list[list[int]]:
        return [group[start : start + self.batch_size] for _, group in sorted(groups.items())
                for start in range(0, len(group), self.batch_size)]


class ImageBatchSampler(GroupedBatchSampler):
    """Batches of whole images (`groups`: every item's image): every caption of an image in the same batch,
    as many images as fit in `batch_size` captions, in a new random order of images each epoch."""

    def cut(self, groups: dict[int, list[int]]) -> list[list[int]]:
        batches: list[list[int]] = [[]]
        for captions in groups.values():  # images in the order their first caption was drawn
            if batches[-1] and len(batches[-1]) + len(captions) > self.batch_size:
                batches.append([])
            batches[-1].extend(captions)
        return [batch for batch in batches if batch]


class RandomBatchSampler(LengthBatchSampler):
    """Batches of `batch_size` shuffled captions, not grouped (`groups`: the same for every item), the last one
    smaller."""


def batch_grouping(
    *, images: list[int], lengths: list[int], batch_by_image: bool, same_length_batches: bool
) -> tuple[type[GroupedBatchSampler], list[int]]:
    """The training batch sampler (`same_length_batches`, `batch_by_image`, else random batches) and every item's
    group for it, from each item's image and its caption's length."""
    if batch_by_image:
        return ImageBatchSampler, images
    if same_length_batches:
        return LengthBatchSampler, lengths
    return RandomBatchSampler, [0] * len(lengths)


class ResumableLoader(DataLoader):
    """A DataLoader over a `GroupedBatchSampler` whose place in the epoch Lightning saves in checkpoints and restores
    on `--ckpt_path last` (Lightning's Stateful protocol: `state_dict`, `load_state_dict`).

    It counts the batches it hands out in the main process, not those its workers prepare ahead, so the place saved is
    the batches trained on. Iterating starts nothing until the first batch is asked for: Lightning creates the
    iterator of a resumed run before it sets the sampler's epoch, and the batches must be those of that epoch.
    """

    def __iter__(self) -> Iterator[Any]:  # a generator: the sampler is asked for batches only from the first one on
        sampler = self.batch_sampler
        for batch in super().__iter__():
            sampler.batches_done += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch_sampler.load_state_dict(state)
