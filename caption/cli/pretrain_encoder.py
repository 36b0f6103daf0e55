r"""`caption pretrain-encoder`: the encoder pretrained elsewhere, on data with labels but no ImageNet-like CNN.

    caption pretrain-encoder --config shapes_encoder                      # runs/shapes_encoder/encoder.pt
    caption pretrain-encoder --config shapes_encoder --config my_data.yaml \
        --trainer.default_root_dir runs/my_encoder                        # its boxes
    caption pretrain-encoder --config shapes_encoder --config my_data.yaml --images classes/ \
        --trainer.default_root_dir runs/my_encoder                        # class folders
    caption fit --config shapes_soft --config my_data.yaml --model.encoder.weights runs/my_encoder \
        --trainer.default_root_dir runs/my_soft                           # stage 1 from it (docs/datasets.md)

Trains the config's `model.encoder` from scratch as a classifier of the config's labelled objects (`data.source`
with boxes: an instances file, the built-in data), or of the images of `--images` (one folder per class), read as
the captioner reads them (`caption.data.labelled_objects`, `caption.training.encoder_pretraining`). The epoch of
the best validation accuracy is kept: OUT/encoder.pt is that encoder's state dict (no head: what
`model.encoder.weights: OUT` loads, the annotation grid unchanged), OUT/encoder.json says what it is (the encoder
settings, the categories, every epoch's validation accuracy and confusion). Prints the confusion at the end.
Pre-empted (SIGTERM) or stopped by Ctrl-C, it writes the same two files from the best epoch so far, encoder.json
saying where it stopped (`stopped`: epoch N of M, how to go on), and prints that in one line (exit 143; Ctrl-C: 130).
"""

import argparse
import io
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace

from caption.cli.options import CommandParser, add_config, add_device, add_settings, path
from caption.config.packaged import configs, merged, named_run
from caption.errors import ConfigError
from caption.io.outputs import writable_folder, write_atomically, write_json
from caption.training.pretraining_settings import PretrainingSettings

TRAINED_ELSEWHERE = ("weights", "freeze", "frozen_epochs", "finetune_stages", "learning_rate")  # set here, not read


def read_configs(values: list[str]) -> dict[str, Any]:
    """The settings of every `--config`, merged in order as `caption fit` merges them (a named run: its fragments)."""
    settings: dict[str, Any] = {}
    for value in values:
        for config in configs(value):
            path = Path(config)
            try:
                text = path.read_text(encoding="utf-8") if path.is_file() else config  # else inline YAML / JSON
                loaded = yaml.safe_load(text)
            except (OSError, yaml.YAMLError) as error:
                raise ConfigError(f"cannot read config {config}: {error}") from None
            if not isinstance(loaded, dict):
                raise ConfigError(f"config {config}: expected a mapping of settings, got {type(loaded).__name__}")
            settings = merged(settings, loaded)
    return settings


def output_folder(args: Namespace) -> Path:
    """--trainer.default_root_dir, else the folder of a named run given alone (runs/<name>): composed with other
    configs, it is other data, which must not overwrite that run's encoder."""
    if args.trainer.default_root_dir is not None:
        return args.trainer.default_root_dir
    run = named_run(args.config[0]) if len(args.config) == 1 else None
    if run is None:
        raise ConfigError("name the folder to write the encoder to: --trainer.default_root_dir runs/<data>_encoder")
    return Path("runs") / run


def main(argv: list[str]) -> None:
    parser = CommandParser(prog="caption pretrain-encoder", formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Train the config's encoder from random weights as a classifier of its data's "
                                       "labelled objects (or of class folders), for model.encoder.weights.",
                           epilog="examples:\n" + __doc__.split("\n\n")[1])
    add_config(parser, action="append", required=True,
               help="a config with `model.encoder` and `data` (a file, a packaged config or a named run such "
                    "as shapes_encoder), repeated to compose them as for `caption fit`")
    parser.add_argument("--images", type=path, default=None,
                        help="a folder of class folders (<class>/*.jpg; or train/ and val/ of them) to classify "
                             "instead of the data's boxes")
    parser.add_argument("--trainer.default_root_dir", type=path, default=None, metavar="OUT",
                        help="the run folder for encoder.pt and encoder.json (default: runs/<named run>)")
    add_settings(parser, PretrainingSettings, "pretraining")
    parser.add_argument("--seed_everything", type=int, default=None, metavar="SEED",
                        help="(default: the config's seed_everything, else 0)")
    parser.add_argument("--data.num_workers", type=int, default=0, metavar="NUM_WORKERS",
                        help="data loader workers (default: 0)")
    add_device(parser)
    args = parser.parse_args(argv)
    settings = PretrainingSettings(**vars(args.pretraining))
    folder = output_folder(args)
    config = read_configs(args.config)
    out = writable_folder(folder, what="--trainer.default_root_dir")
    from caption.cli.lightning.console import quiet_lightning

    with quiet_lightning():  # the progress bar and the summary; no device lines
        pretrain(config, settings, out=out, images=args.images, seed=args.seed_everything,
                 num_workers=args.data.num_workers, accelerator=args.trainer.accelerator,
                 devices=[args.trainer.devices] if args.trainer.devices is not None else 1,
                 precision=args.trainer.precision, command=" ".join(["caption", "pretrain-encoder", *argv]))


def pretrain(config: dict[str, Any], settings: Any, *, out: Path, images: Path | None, seed: int | None,
             num_workers: int, accelerator: str, devices: Any, precision: str, command: str) -> None:
    """Train, then write OUT/encoder.pt and OUT/encoder.json and print the summary (see the module's docstring)."""
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException
    from torch.utils.data import DataLoader

    from caption.data.labelled_objects import ClassFolders, LabelledObjects, collate_objects, object_categories
    from caption.evaluation.grid import attention_grid
    from caption.inference.evaluate import build_data
    from caption.io.device import resolved_precision
    from caption.model.encoder import EncoderSettings, annotation_shape, build_encoder
    from caption.training.encoder_pretraining import EncoderClassifier, confusion_table
    from caption.training.progress import ProgressBar

    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    given = {key: value for key, value in (model.get("encoder") or {}).items() if key not in TRAINED_ELSEWHERE}
    try:  # from scratch and trainable: this stage is the "elsewhere" the captioner's encoder comes from
        encoder_settings = EncoderSettings(**given, weights="none", freeze=False)
    except TypeError as error:
        raise ConfigError(f"model.encoder: {error}") from None
    data_settings = {key: value for key, value in (config.get("data") or {}).items() if key != "features"}
    if "source" not in data_settings:
        raise ConfigError("the config has no data.source: give the data config the captioner is trained with")
    data = build_data({**data_settings, "encoder": encoder_settings.name}, origin="the configs given")
    source = data.source
    image_size = tuple(source.image_size)
    if images is not None:
        labelled = ClassFolders(images, transform=source.inference_transform(), image_size=image_size)
        splits = {"train": labelled.split("train"), "val": labelled.split("val")}
    else:
        labelled = source
        splits = {"train": data.split("train"), "val": data.split("val")}
    categories = object_categories(splits["train"])
    L.seed_everything(config.get("seed_everything", 0) if seed is None else seed, verbose=False)
    encoder = build_encoder(encoder_settings)
    grid = attention_grid(annotation_shape(encoder, image_size)[0], image_size)  # the annotation grid of these images
    shift = round(settings.max_shift * image_size[0] / grid[0])
    loaders = {split: DataLoader(LabelledObjects(labelled, records, categories=categories, grid=grid,
                                                 max_shift=shift if split == "train" else 0),
                                 batch_size=settings.batch_size, shuffle=split == "train", num_workers=num_workers,
                                 collate_fn=collate_objects)
               for split, records in splits.items()}
    if not len(loaders["val"].dataset):
        raise ConfigError("no labelled objects in the validation split: the data's val images have no boxes")
    classifier = EncoderClassifier(encoder=encoder, categories=categories, settings=settings)
    trainer = L.Trainer(max_epochs=settings.epochs, accelerator=accelerator, devices=devices,
                        precision=resolved_precision(precision, accelerator),
                        logger=False, enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[ProgressBar(shown=("loss", "val/accuracy"))])
    counts = {split: len(loader.dataset) for split, loader in loaders.items()}
    try:
        trainer.fit(classifier, train_dataloaders=loaders["train"], val_dataloaders=loaders["val"])
    except SystemExit as stop:  # keep the best epoch so far
        # SIGTERM (SIGTERMException): Lightning stopped after the current batch; Ctrl-C: it tore the run down, exits
        pre_empted = isinstance(stop, SIGTERMException)
        if not (pre_empted or trainer.interrupted):
            raise
        reason = "pre-empted (SIGTERM)" if pre_empted else "stopped by Ctrl-C"
        stopped = {"reason": reason, "epoch": trainer.current_epoch + 1, "epochs": settings.epochs,
                   "go_on": go_on(out=out, epochs=settings.epochs)}
        if classifier.history:
            write_encoder(classifier, out=out, command=command, encoder_settings=encoder_settings,
                          image_size=image_size, grid=grid, categories=categories, images=counts, stopped=stopped)
        print(pre_emption_line(classifier.best if classifier.history else None, stopped=stopped, out=out), flush=True)
        if not pre_empted:
            raise KeyboardInterrupt from None  # the command's exit status for Ctrl-C, as every command's
        raise
    best = classifier.best
    write_encoder(classifier, out=out, command=command, encoder_settings=encoder_settings, image_size=image_size,
                  grid=grid, categories=categories, images=counts, stopped=None)
    held_out = sum(map(sum, best["confusion"]))
    print(f"encoder {encoder_settings.name} as a classifier of {len(categories)} categories: best validation accuracy "
          f"{best['accuracy']:.3f} at epoch {best['epoch'] + 1} of {settings.epochs}, on {held_out} held-out objects "
          f"(chance {1 / len(categories):.3f})\n"
          f"confusion at that epoch (rows: the object's category, columns: the one predicted):\n"
          f"{confusion_table(best['confusion'], categories)}\n"
          f"wrote {out / 'encoder.pt'} and {out / 'encoder.json'}; the captioner from it: "
          f"--model.encoder.weights {out}", flush=True)


def write_encoder(classifier: Any, *, out: Path, command: str, encoder_settings: Any, image_size: tuple[int, ...],
                  grid: tuple[int, int], categories: list[str], images: dict[str, int],
                  stopped: dict[str, Any] | None) -> None:
    """Write OUT/encoder.pt (the encoder of the best validation so far) and OUT/encoder.json, each atomically.

    Args:
        classifier: the trained `EncoderClassifier`, with at least one validation in its history.
        out: the run folder.
        command: the command line, recorded.
        encoder_settings: the encoder's settings, recorded.
        image_size: the images' (height, width).
        grid: the annotation grid (rows, columns).
        categories: the classes' names.
        images: the number of labelled images of each split.
        stopped: when training stopped early (pre-empted): why, at which epoch of how many, and how to go on.
    """
    import torch

    best = classifier.best
    buffer = io.BytesIO()
    torch.save(classifier.best_state, buffer)
    write_atomically(out / "encoder.pt", buffer.getbuffer(), what="encoder weights")
    about = {
        "command": command, "encoder": {key: list(value) if isinstance(value, tuple) else value
                                        for key, value in vars(encoder_settings).items()},
        "image_size": list(image_size), "grid": list(grid), "categories": categories, "images": images,
        "best_epoch": best["epoch"], "accuracy": best["accuracy"], "history": classifier.history,
    }
    write_json(out / "encoder.json", about if stopped is None else {**about, "stopped": stopped})


def go_on(*, out: Path, epochs: int) -> str:
    """How to go on after a pre-emption: the encoder kept so far as it is, or the command again for every epoch."""
    return (f"use the best encoder so far as it is (--model.encoder.weights {out}), or run the same command again "
            f"to train all {epochs} epochs")


def pre_emption_line(best: dict[str, Any] | None, *, stopped: dict[str, Any], out: Path) -> str:
    """The one line printed when pretraining is pre-empted or stopped by Ctrl-C: where it stopped, what was written
    and how to go on.

    Args:
        best: the best validation so far (epoch, accuracy), or None when no epoch was validated.
        stopped: the `stopped` record of encoder.json (reason, epoch, epochs, go_on).
        out: the run folder.
    """
    where = f"caption pretrain-encoder: {stopped['reason']} at epoch {stopped['epoch']} of {stopped['epochs']}"
    if not best:
        return (f"{where}, before its first validation: nothing written; run the same command again to train all "
                f"{stopped['epochs']} epochs")
    return (f"{where}: wrote {out / 'encoder.pt'} (best validation accuracy {best['accuracy']:.3f}, at epoch "
            f"{best['epoch'] + 1}) and {out / 'encoder.json'}; {stopped['go_on']}")
