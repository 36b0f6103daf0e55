"""`caption features`: run the frozen CNN once over a config's images, into its feature cache.

    caption features --config coco_soft
    caption features --config coco_soft --data.features data/features/coco_vgg16 --trainer.accelerator gpu

The config is parsed exactly as `caption fit` parses it, by the same parser (any of its options overrides the config;
`--help` lists the model's, the data's and the Trainer's basics, `--help-all` every one); the encoder is the model's,
run on the trainer's device over every split, `data.eval_batch_size` images at a time; an interrupted build resumes.
The cache itself is `caption.data.features`.
"""

from caption.cli.lightning.commands import CaptionCLI, CLI_SETTINGS
from caption.data.datamodule import CaptionDataModule
from caption.data.features import FeatureCacheError, build_cache
from caption.training.module import CaptionModule


def main(argv: list[str]) -> None:
    cli = CaptionCLI(CaptionModule, CaptionDataModule, args=argv, run=False, **CLI_SETTINGS)
    data = cli.datamodule
    if data.features is None:
        raise FeatureCacheError("set data.features in the config: the cache folder, e.g. data/features/coco_vgg16")
    build_cache(data.features, encoder=cli.model.model.encoder, config=data.cache_config(), source=data.source,
                records=data.records(), on_bad_image=data.on_bad_image, batch_size=data.eval_batch_size,
                num_workers=data.num_workers, device=cli.trainer.strategy.root_device)
