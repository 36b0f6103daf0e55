"""`caption features`: run the frozen CNN once over a config's images, into its feature cache.

    caption features --config coco_soft
    caption features --config coco_soft --data.features data/features/coco_vgg16 --trainer.accelerator gpu

The config is parsed exactly as `caption fit` parses it (any of its options overrides the config);
the encoder is the model's, run on the trainer's device over every split, `data.eval_batch_size`
images at a time; an interrupted build resumes. The cache itself is `caption.data.features`. Lightning and the model are
imported once the options are read: `caption features --help` answers at once.
"""

import argparse


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="caption features",
        description="Build (or finish) the feature cache named by a config's data.features.",
        epilog="Any `caption fit` option (see `caption fit --help`) overrides the config, e.g. "
               "--data.features DIR, --data.eval_batch_size 64, --trainer.accelerator gpu.",
    )
    parser.add_argument("-c", "--config", action="append", required=True, metavar="CONFIG",
                        help="the training config (YAML); may be given more than once, as for `caption fit`")
    parser.add_argument("--print_config", action="store_true",
                        help="print the config as `caption fit` resolves it (overrides applied) as YAML, then exit")
    args, overrides = parser.parse_known_args(argv)
    if args.print_config:  # LightningCLI's own, which prints and exits
        overrides.append("--print_config")
    from caption.cli.lightning.commands import CaptionCLI
    from caption.cli.lightning.parser import CaptionArgumentParser
    from caption.data.datamodule import CaptionDataModule
    from caption.data.features import FeatureCacheError, build_cache
    from caption.training.module import CaptionModule
    from caption.training.trainer import CaptionTrainer

    configs = [item for config in args.config for item in ("--config", config)]
    cli = CaptionCLI(CaptionModule, CaptionDataModule, args=[*configs, *overrides], run=False,
                     trainer_class=CaptionTrainer, parser_class=CaptionArgumentParser,  # one-line config errors
                     auto_configure_optimizers=False)
    data = cli.datamodule
    if data.features is None:
        raise FeatureCacheError("set data.features in the config: the cache folder, e.g. data/features/coco_vgg16")
    build_cache(data.features, encoder=cli.model.model.encoder, config=data.cache_config(), source=data.source,
                records=data.records(), on_bad_image=data.on_bad_image, batch_size=data.eval_batch_size,
                num_workers=data.num_workers, device=cli.trainer.strategy.root_device)
