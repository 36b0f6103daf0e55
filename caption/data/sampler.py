"""Training batches grouped by caption length (the paper, sec. 4.3) or by image, on one process or several.

The paper trains on minibatches whose captions all have the same length, so no step is spent on
padding; the original code's `HomogeneousData` groups captions by length, shuffles each group and
cuts it into batches. `LengthBatchSampler` does the same. `ImageBatchSampler` puts every caption of an
image into the same batch, so that a trained encoder sees each image once per step, not once per
caption (self-critical.pytorch's `seq_per_img`; the module encodes each distinct image of a batch once).

Both work under DDP: every rank builds the same list of batches (same seed, same epoch) and takes every
`num_replicas`-th batch, after the list is padded with batches from its start so that every rank gets as
many batches.

The rank and the number of ranks come from the `DistributedSampler` given as `sampler`: the data
module makes one for the trainer's world, and under DDP Lightning injects its own (with the same
ranks) into any `BatchSampler`, then calls its `set_epoch` every epoch. Only its `num_replicas`,
`rank` and `epoch` are used; the shuffling is this sampler's own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import BatchSampler, DistributedSampler


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

    def cut(self, groups: dict[int, list[int]]) -> list[list[int]]:
        """This epoch's batches from the items of each group, in shuffled order within each group."""
        raise NotImplementedError

    def global_batches(self) -> list[list[int]]:
        """Every batch of this epoch, identical on every rank."""
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
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.global_batches()
        replicas, rank = self.sampler.num_replicas, self.sampler.rank
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % replicas]
        elif batches:
            padding = -len(batches) % replicas
            batches = batches + (batches * (padding // len(batches) + 1))[:padding]
        return iter(batches[rank::replicas])

    def __len__(self) -> int:
        total = len(self.global_batches())
        if self.drop_last:
            return total // self.sampler.num_replicas
        return -(-total // self.sampler.num_replicas)


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
