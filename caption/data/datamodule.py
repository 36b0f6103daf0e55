"""From records to batches: datasets, padding, the vocabulary, and the LightningDataModule.

Training iterates over (image, caption) pairs, as the paper does; validation and test iterate over
images, each carrying all its references for corpus-level scoring. The vocabulary is built from
the training split only and handed to the model (the CLI links `data.vocabulary` to
`model.vocabulary`), so every checkpoint carries the words it was trained with.
"""

from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from caption.data.records import CaptionSource, ImageRecord
from caption.errors import ConfigError
from caption.text import Vocabulary, tokenize


class CaptionPairs(Dataset):
    """One item per (image, reference caption) of the given records."""

    def __init__(self, source: CaptionSource, records: list[ImageRecord], vocabulary: Vocabulary, max_length: int):
        self.source = source
        self.records = records
        self.items: list[tuple[int, list[int]]] = []
        for index, record in enumerate(records):
            for reference in record.references:
                tokens = tokenize(reference)[:max_length]
                if tokens:
                    self.items.append((index, vocabulary.encode(tokens)))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record_index, caption = self.items[index]
        record = self.records[record_index]
        return {"image": self.source.image(record), "caption": torch.tensor(caption), "image_id": record.image_id}


class Images(Dataset):
    """One item per image, with all its references tokenised and re-joined (for scoring)."""

    def __init__(self, source: CaptionSource, records: list[ImageRecord]):
        self.source = source
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        references = [" ".join(tokenize(reference)) for reference in record.references]
        return {"image": self.source.image(record), "image_id": record.image_id, "references": references}


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack images, pad captions with <pad> to (B, T+1), keep references as lists."""
    batch: dict[str, Any] = {
        "image": torch.stack([item["image"] for item in items]),
        "image_id": torch.tensor([item["image_id"] for item in items]),
    }
    if "caption" in items[0]:
        captions = [item["caption"] for item in items]
        batch["caption"] = torch.nn.utils.rnn.pad_sequence(captions, batch_first=True, padding_value=Vocabulary.PAD)
    if "references" in items[0]:
        batch["references"] = [item["references"] for item in items]
    return batch


class CaptionDataModule(L.LightningDataModule):
    """Batches for training (caption pairs) and evaluation (images with references).

    Args:
        source: where records and images come from (e.g. `caption.data.shapes.ShapesSource`).
        batch_size: captions per training batch (the paper: 64).
        eval_batch_size: images per validation/test batch.
        num_workers: DataLoader worker processes.
        min_count: words seen fewer times in training captions become <unk>.
        max_vocab_size: keep at most this many words besides the specials (None: no limit).
        max_length: training captions are truncated to this many words.
    """

    def __init__(
        self,
        *,
        source: CaptionSource,
        batch_size: int = 64,
        eval_batch_size: int = 100,
        num_workers: int = 0,
        min_count: int = 1,
        max_vocab_size: int | None = None,
        max_length: int = 50,
    ):
        super().__init__()
        # Under the CLI the hyperparameters are the config (the source as class_path + init_args): the
        # checkpoint keeps them so that `caption evaluate` can rebuild this data. A source object made
        # in Python cannot go into a weights_only checkpoint, so it is left out.
        self.save_hyperparameters()
        if not isinstance(self.hparams["source"], dict):
            self.save_hyperparameters(ignore="source")
        if batch_size < 1 or eval_batch_size < 1:
            raise ConfigError("data.batch_size and data.eval_batch_size must be >= 1")
        self.source = source
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.min_count = min_count
        self.max_vocab_size = max_vocab_size
        self.max_length = max_length
        self._vocabulary: Vocabulary | None = None

    def split(self, name: str) -> list[ImageRecord]:
        records = [record for record in self.source.records() if record.split == name]
        if not records:
            raise ConfigError(f"data.source has no images in the {name!r} split: check the dataset files and split names")
        return records

    @property
    def vocabulary(self) -> list[str]:
        """The vocabulary's words (specials first), built from the training captions only."""
        if self._vocabulary is None:
            captions = (tokenize(reference) for record in self.split("train") for reference in record.references)
            self._vocabulary = Vocabulary.build(captions, min_count=self.min_count, max_size=self.max_vocab_size)
        return self._vocabulary.to_list()

    @property
    def image_size(self) -> list[int]:
        """[H, W] of the images fed to the encoder (the first training image's), stored with the model."""
        height, width = self.source.image(self.split("train")[0]).shape[-2:]
        return [int(height), int(width)]  # a list, like every sequence the CLI stores, for plain YAML

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=collate,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        vocabulary = Vocabulary(self.vocabulary)
        return self._loader(CaptionPairs(self.source, self.split("train"), vocabulary, self.max_length), self.batch_size, True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(Images(self.source, self.split("val")), self.eval_batch_size, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(Images(self.source, self.split("test")), self.eval_batch_size, False)

