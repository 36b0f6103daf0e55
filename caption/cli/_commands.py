"""The `caption` command's subcommands, one module each under `caption.cli`; `caption.cli.main` dispatches to them.

fit, validate, test and predict are LightningCLI's (`caption.cli.lightning`); the others are
small argparse programs on the inference layer (`caption.inference`) or the feature cache. Commands
never import each other, except that `features` parses its config with the Lightning one.
"""

import importlib
from collections.abc import Callable

# name -> (module under caption.cli with a `main(argv)`, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("lightning", "train a model from a YAML config, then score its best checkpoint on the test split"),
    "validate": ("lightning", "score a checkpoint on the validation split, inside Lightning"),
    "test": ("lightning", "score a checkpoint on the test split, inside Lightning (one or many GPUs, as fit)"),
    "predict": ("lightning", "caption a folder of images or a split into COCO-results JSON (one or many GPUs)"),
    "pretrain-encoder": ("pretrain_encoder", "train the config's encoder as a classifier of its labelled objects, for "
                         "model.encoder.weights"),
    "features": ("features", "run the frozen CNN once over a config's images into its feature cache"),
    "describe": ("describe", "caption images and draw where the model looked for each word"),
    "evaluate": ("evaluate", "score a checkpoint on a split with the coco-caption metrics (pycocoevalcap)"),
    "compare": ("compare", "evaluate several models (soft vs hard) on one split: table, overlays, curves"),
    "export": ("export", "a model folder to share: safetensors weights, config.json, a model card (--push: to the Hub)"),
    "serve": ("serve", "a local page: drop an image, hover a word, see where the model looked (soft and hard)"),
    "migrate-config": ("migrate_config", "rewrite a config of caption < 0.2 with its model settings in their groups"),
}


def command(name: str) -> Callable[[list[str]], None]:
    """The `main(argv)` of command `name` (imported on use: `caption --help` stays fast)."""
    module_name, _ = COMMANDS[name]
    module = importlib.import_module(f"caption.cli.{module_name}")
    if module_name == "lightning":
        return lambda argv: module.main([name, *argv])
    return module.main
