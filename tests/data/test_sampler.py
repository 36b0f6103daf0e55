"""Same-length batches: every caption once per epoch, one length per batch, the same number of batches on
every DDP rank (also after Lightning injects its distributed sampler), and almost no padding. Image batches:
every caption of an image in one batch, each image encoded once per step. Every kind continues an epoch from the
place a checkpoint saved (tests/training/test_preemption.py stops and resumes real runs)."""

from collections import Counter

import pytest
import torch
from kit.lengths import coco_like_words as coco_like_lengths
from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from caption.data.datamodule import CaptionDataModule
from caption.data.sampler import ImageBatchSampler, LengthBatchSampler, RandomBatchSampler, ResumableLoader
from caption.data.sources.base import CaptionSource
from caption.data.sources.records import ImageRecord
from caption.errors import ConfigError
from caption.model.caption_model import first_occurrences
from caption.model.vocabulary import Vocabulary


class WordsSource(CaptionSource):
    """In-memory records whose captions have the given numbers of words."""

    def __init__(self, lengths):
        captions = [" ".join(["w"] * int(n)) for n in lengths]
        self._records = [ImageRecord(k, "train", tuple(captions[5 * k : 5 * k + 5])) for k in range(len(lengths) // 5)]

    def records(self):
        return self._records

    def image(self, record):
        return torch.zeros(3, 4, 4)

    image_size = (4, 4)


def batches(sampler, epoch=0):
    sampler.sampler.set_epoch(epoch)  # what Lightning does at every epoch
    return list(sampler)


def make(lengths, *, replicas=1, rank=0, batch_size=8, drop_last=False, seed=0):
    carrier = DistributedSampler(range(len(lengths)), num_replicas=replicas, rank=rank, shuffle=False)
    return LengthBatchSampler(carrier, batch_size, drop_last, groups=lengths, seed=seed)


def test_one_process_every_item_once_one_length_per_batch():
    lengths = coco_like_lengths(1000)
    sampler = make(lengths)
    epoch0, epoch1 = batches(sampler, 0), batches(sampler, 1)
    for epoch in (epoch0, epoch1):
        assert sorted(i for batch in epoch for i in batch) == list(range(1000))
        assert all(len({lengths[i] for i in batch}) == 1 and 1 <= len(batch) <= 8 for batch in epoch)
        assert len(epoch) == len(sampler) == sum(-(-n // 8) for n in Counter(lengths).values())
    assert epoch0 != epoch1 and batches(sampler, 0) == epoch0, "reshuffled each epoch, reproducibly"
    assert len({lengths[batch[0]] for batch in epoch0[:10]}) > 1, "lengths are interleaved, not in order"


@pytest.mark.parametrize("replicas", [2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_get_equal_shares_of_the_same_batches(replicas, drop_last):
    lengths = coco_like_lengths(997, seed=replicas)
    shares = [batches(make(lengths, replicas=replicas, rank=rank, drop_last=drop_last), 3) for rank in range(replicas)]
    assert len({len(share) for share in shares}) == 1, "every rank takes the same number of steps (or DDP hangs)"
    assert len(shares[0]) == len(make(lengths, replicas=replicas, drop_last=drop_last))
    everything = make(lengths, drop_last=drop_last)
    everything.sampler.set_epoch(3)
    global_batches = everything.global_batches()
    seen = Counter(tuple(batch) for share in shares for batch in share)
    assert set(seen) <= {tuple(batch) for batch in global_batches}
    if drop_last:
        assert all(count == 1 for count in seen.values()) and len(seen) >= len(global_batches) - replicas + 1
    else:
        assert {tuple(batch) for batch in global_batches} == set(seen), "no batch is lost"
        assert sum(seen.values()) - len(global_batches) < replicas, "fewer repeats than ranks"


def test_lightning_injects_its_distributed_sampler_and_keeps_ours():
    data = CaptionDataModule(source=WordsSource(coco_like_lengths(400)), batch_size=8, same_length_batches=True)
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        loader = data.train_dataloader()  # as Lightning's trainer calls the hook
    injected = DistributedSampler(loader.dataset, num_replicas=2, rank=1, shuffle=False)
    distributed = _update_dataloader(loader, injected, mode=RunningStage.TRAINING)
    sampler = distributed.batch_sampler
    assert isinstance(sampler, LengthBatchSampler) and sampler.sampler is injected
    assert sampler.groups == loader.batch_sampler.groups and sampler.batch_size == 8
    expected = make(loader.batch_sampler.groups, replicas=2, rank=1)
    assert batches(sampler, 2) == batches(expected, 2)


def padding_waste(loader) -> float:
    """Share of the caption tensor's tokens that are <pad>, over an epoch."""
    padded = total = 0
    for batch in loader:
        captions = batch["caption"]
        padded += int((captions == Vocabulary.PAD).sum())
        total += captions.numel()
    return padded / total


def test_padding_waste_on_coco_like_lengths():
    source = WordsSource(coco_like_lengths(5000, seed=1))
    grouped = CaptionDataModule(source=source, batch_size=64, same_length_batches=True).train_dataloader()
    random = CaptionDataModule(source=source, batch_size=64, same_length_batches=False).train_dataloader()
    grouped_waste, random_waste = padding_waste(grouped), padding_waste(random)
    assert grouped_waste < 0.05
    assert random_waste > 0.15, f"random batches of COCO-like captions pad much more ({random_waste:.1%})"
    assert len(grouped.dataset) == len(random.dataset) == sum(len(batch) for batch in grouped.batch_sampler)


def test_image_batches_hold_whole_images_and_every_caption_once():
    source = WordsSource(coco_like_lengths(1000))  # 200 images, 5 captions each
    loader = CaptionDataModule(source=source, batch_size=64, batch_by_image=True).train_dataloader()
    sampler = loader.batch_sampler
    assert isinstance(sampler, ImageBatchSampler)
    image_of = sampler.groups
    for epoch in (0, 1):
        epoch_batches = batches(sampler, epoch)
        assert sorted(i for batch in epoch_batches for i in batch) == list(range(1000))
        assert sorted(map(len, epoch_batches)) == [40] + [60] * 16, "12 whole images of 5 captions fit in 64 rows"
        for batch in epoch_batches:
            images = {image_of[i] for i in batch}
            assert sum(image_of.count(image) for image in images) == len(batch), "no image split across batches"
    assert batches(sampler, 0) != batches(sampler, 1) and len(sampler) == 17
    with pytest.raises(ConfigError, match="same_length_batches and data.batch_by_image"):
        CaptionDataModule(source=source, same_length_batches=True, batch_by_image=True)


def test_first_occurrences_picks_each_distinct_id_once():
    ids = torch.tensor([7, 3, 7, 7, 9, 3])
    first, rows = first_occurrences(ids)
    assert first.tolist() == [1, 0, 4]  # ids 3, 7, 9 in sorted order, each at its first row
    assert torch.equal(ids[first][rows], ids)


def loader_at_epoch(epoch: int, *, batch_size: int = 8, num_workers: int = 0, **grouping) -> ResumableLoader:
    """A fresh training loader over 400 COCO-like captions, its sampler set to `epoch` (as Lightning does)."""
    source = WordsSource(coco_like_lengths(400, seed=5))
    loader = CaptionDataModule(source=source, batch_size=batch_size, num_workers=num_workers,
                               **grouping).train_dataloader()
    loader.batch_sampler.sampler.set_epoch(epoch)
    return loader


def ids_of(batches) -> list[list[int]]:
    return [batch["image_id"].tolist() + batch["caption"].flatten().tolist() for batch in batches]


@pytest.mark.parametrize("grouping", [{"same_length_batches": True}, {"batch_by_image": True}, {}],
                         ids=["same_length", "by_image", "random"])
def test_a_loader_continues_the_epoch_from_the_place_it_saved(grouping):
    whole = ids_of(loader_at_epoch(2, **grouping))
    first = loader_at_epoch(2, num_workers=2, **grouping)  # workers prepare batches ahead of those handed out
    iterator = iter(first)
    taken = [next(iterator) for _ in range(5)]
    state = first.state_dict()
    assert state["epoch"] == 2 and state["batches_done"] == 5, "the batches handed to training, not those prepared"
    del iterator
    resumed = loader_at_epoch(0, **grouping)  # as a new process builds it, before Lightning sets the epoch
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state, "a place loaded but not yet taken up is the place saved"
    resumed.batch_sampler.sampler.set_epoch(2)
    rest = list(resumed)
    assert ids_of(taken) + ids_of(rest) == whole
    assert resumed.state_dict()["batches_done"] == len(whole), "counted on from the place it resumed at"
    resumed.batch_sampler.sampler.set_epoch(3)
    assert len(list(resumed)) == len(resumed), "the next epoch starts at its beginning"


def test_random_batches_take_every_caption_once_per_epoch():
    loader = loader_at_epoch(1)
    assert isinstance(loader.batch_sampler, RandomBatchSampler)
    indices = [i for batch in loader.batch_sampler for i in batch]
    assert sorted(indices) == list(range(400)) and indices != sorted(indices)


def test_a_place_saved_with_other_batches_is_not_kept_and_says_so():
    first = loader_at_epoch(1, same_length_batches=True)
    iterator = iter(first)
    next(iterator)
    state = first.state_dict()
    other = loader_at_epoch(1, same_length_batches=True, batch_size=16)
    with pytest.warns(UserWarning,
                      match=r"saved 1 batches into epoch 1 with other training batches \(batch_size 8 -> 16\)"):
        other.load_state_dict(state)
    assert len(list(other)) == len(other), "the epoch is drawn anew"
