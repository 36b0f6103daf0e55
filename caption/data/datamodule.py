"""The LightningDataModule: a data source's records into the loaders of training, validation, test and predict.

Training iterates over (image, caption) pairs, as the paper does; validation and test iterate over
images, each carrying all its references for corpus-level scoring (`caption.data.datasets`, batched by
`caption.data.collate`). The vocabulary is built from the training split only and handed to the model (the CLI
links `data.vocabulary` to `model.vocabulary`), so every checkpoint carries the words it was trained with. Images
that cannot be used are found before training (`data.on_bad_image`), or skipped as they fail while loading
(`caption.data.skipped_images`).
"""

import functools
import os
from typing import Any, Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from caption.data.box_targets import BoxTargets, check_supervisable
from caption.data.collate import collate
from caption.data.datasets import CaptionPairs, ImageFiles, Images, LongCaptions
from caption.data.features import FeatureCache, cache_config
from caption.data.sampler import ResumableLoader, batch_grouping
from caption.data.skipped_images import SkippedImages
from caption.data.sources.base import CaptionSource, absolute_paths
from caption.data.sources.category_words import LABELS_KEY, references_name_a_label
from caption.data.sources.image_files import image_files, report_bad_images
from caption.data.sources.records import ImageRecord
from caption.data.usable_captions import with_usable_captions
from caption.errors import CaptionWarning, ConfigError
from caption.io.checkpoints import read_checkpoint
from caption.model.encoder import EncoderSettings
from caption.model.vocabulary import Vocabulary, tokenize

SPLITS = ("train", "val", "test")
TOUCHED = {"truncate": "truncated", "drop": "left out"}  # what `long_captions` did, for the log

# model settings the CLI links into the data module (`data.encoder` ...): a feature cache is checked against them
DATA_LINKS = {"encoder.name": "encoder", "encoder.weights": "encoder_weights", "encoder.freeze": "freeze_encoder",
              "encoder.grid": "encoder_grid"}


class CaptionDataModule(L.LightningDataModule):
    """Batches for training (caption pairs) and evaluation (images with references).

    Args:
        source: where records and images come from (e.g. `caption.data.synthetic.shapes.ShapesSource`).
        batch_size: captions per training batch (the paper: 64).
        eval_batch_size: images per validation/test batch.
        num_workers: DataLoader worker processes.
        min_count: words seen fewer times in training captions become <unk>.
        max_vocab_size: keep at most this many words besides the specials (None: no limit).
        max_length: training captions longer than this many words are cut or left out (`long_captions`).
        long_captions: "truncate" (keep the first max_length words) or "drop" (the original code's
            maxlen); how many captions this touched is logged.
        same_length_batches: training batches of captions of one length, so no padding (the paper,
            sec. 4.3; `caption.data.sampler.LengthBatchSampler`, also under DDP).
        batch_by_image: training batches of whole images, every caption of an image in the same batch, so a
            trained encoder runs once per image, not once per caption (`caption.data.sampler.ImageBatchSampler`).
        on_bad_image: "error" stops before training, naming every image that cannot be used;
            "skip" leaves them out and lists them (also in the feature cache's manifest), and also
            skips an image that fails only while loading (e.g. truncated behind a good header).
        max_skipped_share: with on_bad_image "skip", the share of images that may fail while loading
            before the run stops, naming them all.
        check_images: how images are checked before training without a feature cache: "header"
            (fast) or "decode" (decodes every image; also finds truncated files).
        features: folder of the feature cache that `caption features` writes (None: run the CNN on images).
        predict: what `caption predict` captions: a split ("train", "val", "test"), or an image file or a folder of
            images (write a folder named like a split as ./test).
        vocabulary_from: a checkpoint whose vocabulary to use instead of building one from the training captions
            (`caption predict` sets it to --ckpt_path, so the training data need not be there).
        encoder: linked from model.encoder.name by the CLI: image files get the transform of its weights, and the
            feature cache must have been built with it.
        encoder_weights: linked from model.encoder.weights by the CLI (the feature cache is checked against it).
        freeze_encoder: linked from model.encoder.freeze by the CLI (a feature cache needs a frozen encoder).
        encoder_grid: linked from model.encoder.grid by the CLI (the feature cache is checked against it).
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
        long_captions: LongCaptions = "truncate",
        same_length_batches: bool = False,
        batch_by_image: bool = False,
        on_bad_image: Literal["error", "skip"] = "error",
        max_skipped_share: float = 0.01,
        check_images: Literal["header", "decode"] = "header",
        features: str | None = None,
        predict: str = "test",
        vocabulary_from: str | None = None,
        encoder: str = EncoderSettings.name,  # the four linked settings default as model.encoder's do
        encoder_weights: str = EncoderSettings.weights,
        freeze_encoder: bool = EncoderSettings.freeze,
        encoder_grid: int | None = EncoderSettings.grid,
    ):
        super().__init__()
        # Under the CLI the hyperparameters are the config (the source as class_path + init_args): the
        # checkpoint keeps them so that `caption evaluate` can rebuild this data. A source object made
        # in Python cannot go into a weights_only checkpoint, so it is left out.
        # The encoder settings linked from the model (DATA_LINKS) are the model's: stored there once, not twice.
        linked = list(DATA_LINKS.values())
        self.save_hyperparameters(ignore=linked)
        if not isinstance(self.hparams["source"], dict):
            self.save_hyperparameters(ignore=["source", *linked])
        else:  # paths recorded absolute: a checkpoint used from another folder finds the same data
            self.hparams["source"] = absolute_paths(self.hparams["source"], type(source).path_arguments)
        if features is not None:
            self.hparams["features"] = os.path.abspath(features)
        at_least = {"batch_size": (batch_size, 1), "eval_batch_size": (eval_batch_size, 1),
                    "max_length": (max_length, 1), "min_count": (min_count, 1),
                    "max_vocab_size": (max_vocab_size or 1, 1), "num_workers": (num_workers, 0)}
        for key, (value, least) in at_least.items():
            if value < least:
                raise ConfigError(f"data.{key} must be >= {least}, got {value}")
        if not 0 <= max_skipped_share <= 1:
            raise ConfigError(f"data.max_skipped_share is a share: it must be in [0, 1], got {max_skipped_share}")
        if same_length_batches and batch_by_image:
            raise ConfigError("data.same_length_batches and data.batch_by_image group training batches in two "
                              "different ways: set one of them to false")
        if features is not None and not freeze_encoder:
            raise ConfigError(
                "data.features (the feature cache) needs model.encoder.freeze: true; a trained encoder needs the "
                "images: set data.features: null to fine-tune"
            )
        source.use_encoder(encoder)
        self.source = source
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.min_count = min_count
        self.max_vocab_size = max_vocab_size
        self.max_length = max_length
        self.long_captions = long_captions
        self.same_length_batches = same_length_batches
        self.batch_by_image = batch_by_image
        self.on_bad_image = on_bad_image
        self.max_skipped_share = max_skipped_share
        self.skipped = SkippedImages(max_share=max_skipped_share)  # images that failed while loading
        self.check_images = check_images
        self.features = features
        self.predict = predict
        self.vocabulary_from = vocabulary_from
        self.encoder = encoder
        self.encoder_weights = encoder_weights
        self.freeze_encoder = freeze_encoder
        self.encoder_grid = encoder_grid
        self._vocabulary: Vocabulary | None = None
        self._records: list[ImageRecord] | None = None
        self._splits: set[str] = set()  # the splits of the source's records, captioned or not
        self._bad: set[int] | None = None  # ids of images that cannot be used
        self._cache: FeatureCache | None = None
        self.box_targets: BoxTargets | None = None  # set by `supervise_attention`: training captions carry targets

    def records(self) -> list[ImageRecord]:
        """The source's records without captions that have no letter or digit (empty, whitespace,
        punctuation); an image left with no caption (or with none at all) is left out. Both are
        counted in warnings, the images named per split."""
        if self._records is None:
            records = self.source.records()
            self._splits = {record.split for record in records}  # before those without a usable caption are left out
            self._records = with_usable_captions(records)
            if not references_name_a_label(self._records, self.source.word_labels):
                labels = sorted({box.label for record in self._records for box in record.objects})
                rank_zero_warn(f"data.source has boxes of {', '.join(labels[:8])}{' ...' * (len(labels) > 8)} but no "
                               f"reference caption names one: attention accuracy will not be scored; map the caption "
                               f"words to these labels with {LABELS_KEY}")
        return self._records

    def split(self, name: str) -> list[ImageRecord]:
        records = [record for record in self.records() if record.split == name]
        if not records and name in self._splits:
            raise ConfigError(f"data.source: every image of the {name!r} split was left out, none has a caption with a "
                              "letter or digit (each is empty, whitespace or punctuation): check its captions")
        if not records:
            raise ConfigError(f"data.source has no images in the {name!r} split: "
                              "check the dataset files and split names")
        return records

    @property
    def vocabulary(self) -> list[str]:
        """The vocabulary's words (specials first), built from the training captions only (or `vocabulary_from`)."""
        if self._vocabulary is None and self.vocabulary_from is not None:
            self._vocabulary = Vocabulary(read_checkpoint(self.vocabulary_from)["hyper_parameters"]["vocabulary"])
        if self._vocabulary is None:
            captions = (tokenize(reference) for record in self.split("train") for reference in record.references)
            self._vocabulary = Vocabulary.build(captions, min_count=self.min_count, max_size=self.max_vocab_size)
        return self._vocabulary.to_list()

    @property
    def image_size(self) -> list[int]:
        """[H, W] of the images fed to the encoder, stored with the model (the frame of attention accuracy)."""
        return list(self.source.image_size)  # a list, like every sequence the CLI stores, for plain YAML

    def cache_config(self) -> dict[str, Any]:
        """What the feature cache must have been built for: this data with the model's encoder settings (linked
        by the CLI); `caption features` builds the cache for it, and training checks the cache against it."""
        return cache_config(encoder=self.encoder, weights=self.encoder_weights, freeze=self.freeze_encoder,
                            source=self.source, records=self.records(), grid=self.encoder_grid)

    def supervise_attention(self, *, grid: tuple[int, int], key: str) -> None:
        """Training captions carry where each word should look on a rows × columns attention `grid`
        (`caption.data.box_targets`); a ConfigError naming `key`, the weight that asks for it, when the training
        data has no box a caption word names."""
        check_supervisable(self.split("train"), self.source.word_labels, key=key)
        self.box_targets = BoxTargets(word_labels=self.source.word_labels, grid=grid,
                                      image_size=tuple(self.source.image_size))

    def usable(self, name: str) -> list[ImageRecord]:
        """The records of split `name` whose images can be used (see `on_bad_image`)."""
        if self._bad is None:  # once: bad images come from the feature cache, or from checking the files
            records = self.records()
            if self.features is not None:
                self._cache = FeatureCache(self.features, self.cache_config())
                bad = self._cache.skipped
            else:
                bad = self.source.check(records, decode=self.check_images == "decode")
            report_bad_images(bad, total=len(records), on_bad_image=self.on_bad_image)
            self._bad = {image.image_id for image in bad}
        records = [record for record in self.split(name) if record.image_id not in self._bad]
        if not records:
            raise ConfigError(f"every image of the {name!r} split was left out as bad (data.on_bad_image: skip)")
        return records

    def _loader(self, dataset: Dataset, batch_size: int, shuffle: bool, *, allow_empty: bool = False) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            collate_fn=functools.partial(collate, allow_empty=allow_empty),
            persistent_workers=self.num_workers > 0,
        )

    def check_vocabulary_from(self) -> None:
        """With `vocabulary_from`: warn in one line when words a vocabulary of these training captions would hold
        (the words `Vocabulary.build` keeps at data.min_count) are not in the checkpoint's: they train as <unk>."""
        if self.vocabulary_from is None:
            return
        captions = (tokenize(reference) for record in self.split("train") for reference in record.references)
        own = Vocabulary.build(captions, min_count=self.min_count, max_size=self.max_vocab_size).to_list()
        words = own[len(Vocabulary.SPECIALS):]
        given = set(self.vocabulary)
        missing = [word for word in words if word not in given]  # the most frequent first
        if missing:
            rank_zero_warn(f"data.vocabulary_from {self.vocabulary_from}: {len(missing)} of the {len(words)} words of "
                           f"the training captions are not in its vocabulary (e.g. {', '.join(missing[:5])}): they "
                           "are trained as <unk>. Was it trained on other data? Leave data.vocabulary_from out to "
                           "build the vocabulary from these captions", category=CaptionWarning)

    def train_dataloader(self) -> DataLoader:
        records = self.usable("train")
        self.check_vocabulary_from()
        dataset = CaptionPairs(self.source, records, Vocabulary(self.vocabulary), self.max_length,
                               long_captions=self.long_captions, features=self._cache, skip_bad=self.skip_bad,
                               box_targets=self.box_targets)
        touched = dataset.truncated + dataset.dropped
        rank_zero_info(
            f"Training on {len(dataset)} captions of {len(records)} images"
            f"{' from the feature cache ' + self.features if self._cache else ''}; {touched} captions longer than "
            f"data.max_length={self.max_length} words were {TOUCHED[self.long_captions]}."
        )
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self.trainer is not None else (1, 0)
        grouping, groups = batch_grouping(images=[image for image, _ in dataset.items], lengths=dataset.lengths,
                                          batch_by_image=self.batch_by_image,
                                          same_length_batches=self.same_length_batches)
        sampler = grouping(
            DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False),
            batch_size=self.batch_size,
            groups=groups,
            seed=int(os.environ.get("PL_GLOBAL_SEED", 0)),  # the seed Lightning gives its distributed samplers
        )
        # resumable: a run stopped mid-epoch continues the epoch where it stopped (caption.data.sampler)
        return ResumableLoader(dataset, batch_sampler=sampler, num_workers=self.num_workers, collate_fn=collate,
                               persistent_workers=self.num_workers > 0)

    def _images_loader(self, split: str, *, allow_empty: bool = False) -> DataLoader:
        images = Images(self.source, self.usable(split), self._cache, skip_bad=self.skip_bad)
        return self._loader(images, self.eval_batch_size, False, allow_empty=allow_empty)

    def val_dataloader(self) -> DataLoader:
        return self._images_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._images_loader("test")

    def predict_dataloader(self) -> DataLoader:
        """The split named by `predict`, or the image files it names (a file, or a folder's images)."""
        if self.predict in SPLITS:
            return self._images_loader(self.predict, allow_empty=True)
        files = [file for file, _ in image_files([self.predict], required="data.predict")]
        images = ImageFiles(files, self.source.inference_transform())
        return self._loader(images, self.eval_batch_size, False, allow_empty=True)  # a batch of bad files: skipped

    @property
    def skip_bad(self) -> bool:
        """Whether images that fail while loading are skipped (data.on_bad_image: skip)."""
        return self.on_bad_image == "skip"

    def on_before_batch_transfer(self, batch: dict[str, Any], dataloader_idx: int) -> dict[str, Any]:
        return self.count_skipped(batch)

    def teardown(self, stage: str) -> None:
        self.report_skipped()

    def count_skipped(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Count the images `collate` left out because they failed to load; stop past `max_skipped_share`."""
        return self.skipped.count(batch, total=lambda: len(self.records()))

    def report_skipped(self) -> None:
        """List, at the end, the images that failed while loading and were skipped."""
        self.skipped.report()
