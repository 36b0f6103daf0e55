"""Batches of captions of one length (the paper, sec. 4.3), on one process or several.

The paper trains on minibatches whose captions all have the same length, so no step is spent on
padding; the original code's `HomogeneousData` groups captions by length, shuffles each group and
cuts it into batches. `LengthBatchSampler` does the same and also works under DDP: every rank
builds the same list of batches (same seed, same epoch) and takes every `num_replicas`-th batch,
after the list is padded with batches from its start so that every rank gets as many batches.

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


class LengthBatchSampler(BatchSampler):
    """Yields lists of dataset indices whose items all have the same length.

    Args:
        sampler: a `DistributedSampler` over the dataset: where `num_replicas`, `rank` and `epoch` come from.
        batch_size: items per batch at most (a length's last batch may be smaller).
        drop_last: drop each length's last, smaller batch (and trim rather than pad across ranks).
        lengths: the length of every item of the dataset (e.g. caption tokens).
        shuffle: shuffle the items of each length and the order of the batches, anew each epoch.
        seed: base seed of the shuffling, the same on every rank.
    """

    def __init__(
        self,
        sampler: DistributedSampler,
        batch_size: int,
        drop_last: bool = False,
        *,
        lengths: Sequence[int],
        shuffle: bool = True,
        seed: int = 0,
    ):
        super().__init__(sampler, batch_size, drop_last)
        if not isinstance(sampler, DistributedSampler):
            raise TypeError(f"LengthBatchSampler needs a DistributedSampler (for its ranks), got {type(sampler)}")
        if len(lengths) != len(sampler.dataset):
            raise ValueError(f"{len(lengths)} lengths for a dataset of {len(sampler.dataset)} items")
        self.lengths = [int(length) for length in lengths]
        self.shuffle = shuffle
        self.seed = seed

    def global_batches(self) -> list[list[int]]:
        """Every batch of this epoch, identical on every rank."""
        generator = torch.Generator().manual_seed(self.seed + self.sampler.epoch)
        count = len(self.lengths)
        order = torch.randperm(count, generator=generator).tolist() if self.shuffle else range(count)
        groups: dict[int, list[int]] = defaultdict(list)
        for index in order:
            groups[self.lengths[index]].append(index)
        batches = [
            group[start : start + self.batch_size]
            for _, group in sorted(groups.items())
            for start in range(0, len(group), self.batch_size)
        ]
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
        counts: dict[int, int] = defaultdict(int)
        for length in self.lengths:
            counts[length] += 1
        if self.drop_last:
            total = sum(count // self.batch_size for count in counts.values())
            return total // self.sampler.num_replicas
        total = sum(-(-count // self.batch_size) for count in counts.values())
        return -(-total // self.sampler.num_replicas)
