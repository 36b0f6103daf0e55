"""Where each module of the flat layout (caption 0.2.0, every module beside the others under caption/), and each
module moved since, lives now, so that the class paths configs and checkpoints of then name
(`caption.data.shapes.ShapesSource`, `caption.cli._prediction_writer.CaptionWriter`) keep working.

`new_class_path` names a class's new path; the checkpoint reader and the class-path lookup (`caption.io`) use it;
`moved_modules()` lets the `caption` command import a module by its old name while a config of then is parsed.
Each old name read says its new one in one `caption: warning:` line. Removed in 0.4, with the rest of `caption.legacy`.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from caption.errors import CaptionWarning

# module of the flat layout, or of a later release's tree -> the module it is now
MOVED = {
    "caption.allocator": "caption.training.allocator",
    "caption.attention": "caption.model.attention",
    "caption.attention_grid": "caption.evaluation.grid",
    "caption.attention_images": "caption.training.overlay_logging",
    "caption.attention_scores": "caption.evaluation.grounding",
    "caption.callbacks": "caption.training.callbacks",
    "caption.checkpoints": "caption.io.checkpoints",
    "caption.class_paths": "caption.io.class_paths",
    "caption.commands": "caption.cli",
    "caption.commands.argument_parser": "caption.cli.lightning.parser",
    "caption.commands.checkpoint_path": "caption.cli.lightning.checkpoint_settings",
    "caption.commands.common": "caption.cli.options",
    "caption.commands.compare": "caption.cli.compare",
    "caption.commands.describe": "caption.cli.describe",
    "caption.commands.evaluate": "caption.cli.evaluate",
    "caption.commands.features": "caption.cli.features",
    "caption.commands.given": "caption.cli.lightning.given",
    "caption.commands.lightning": "caption.cli.lightning.commands",
    "caption.commands.migrate_config": "caption.cli.migrate_config",
    "caption.commands.predict_arguments": "caption.cli.lightning.predict_arguments",
    "caption.commands.prediction_writer": "caption.cli.lightning.prediction_writer",
    "caption.commands.quiet_lightning": "caption.cli.lightning.console",
    "caption.commands.run_folders": "caption.cli.lightning.run_folders",
    "caption.commands.run_outputs": "caption.cli.lightning.run_files",
    "caption.commands.serve": "caption.cli.serve",
    "caption.cli._checkpoint_settings": "caption.cli.lightning.checkpoint_settings",
    "caption.cli._class_paths": "caption.cli.lightning.class_paths",
    "caption.cli._given": "caption.cli.lightning.given",
    "caption.cli._lightning_parser": "caption.cli.lightning.parser",
    "caption.cli._options": "caption.cli.options",
    "caption.cli._predict_arguments": "caption.cli.lightning.predict_arguments",
    "caption.cli._prediction_writer": "caption.cli.lightning.prediction_writer",
    "caption.cli._quiet_lightning": "caption.cli.lightning.console",
    "caption.cli._run_folders": "caption.cli.lightning.run_folders",
    "caption.cli._run_outputs": "caption.cli.lightning.run_files",
    "caption.cli._short_help": "caption.cli.lightning.short_help",
    "caption.cli._commands": "caption.cli",
    "caption.comparison": "caption.reports",
    "caption.comparison.figures": "caption.reports.figures",
    "caption.comparison.logs": "caption.reports.logs",
    "caption.comparison.model_card": "caption.reports.model_card",
    "caption.comparison.models": "caption.reports.runs",
    "caption.comparison.table": "caption.reports.table",
    "caption.inference.split": "caption.inference.evaluate",
    "caption.compat": "caption.legacy.settings",
    "caption.console": "caption.config.console",
    "caption.data.annotation_files": "caption.data.sources.annotation_files",
    "caption.data.category_words": "caption.data.sources.category_words",
    "caption.data.coco_categories": "caption.data.sources.coco_categories",
    "caption.data.coco_instances": "caption.data.sources.coco_instances",
    "caption.data.image_files": "caption.data.sources.image_files",
    "caption.data.image_source": "caption.data.sources.image_source",
    "caption.data.karpathy": "caption.data.sources.karpathy",
    "caption.data.positions": "caption.data.synthetic.positions",
    "caption.data.records": "caption.data.sources.records",
    "caption.data.scene_files": "caption.data.synthetic.scene_files",
    "caption.data.shapes": "caption.data.synthetic.shapes",
    "caption.data.silhouettes": "caption.data.synthetic.silhouettes",
    "caption.decoder": "caption.model.decoder",
    "caption.decoding": "caption.model.search",
    "caption.encoder": "caption.model.encoder",
    "caption.evaluation": "caption.evaluation.scoring",
    "caption.finetuning": "caption.training.finetuning",
    "caption.flops": "caption.model.flops",
    "caption.meteor": "caption.evaluation.meteor",
    "caption.metrics": "caption.evaluation.metrics",
    "caption.module": "caption.training.module",
    "caption.objectives": "caption.model.objectives",
    "caption.outputs": "caption.io.outputs",
    "caption.packaged_configs": "caption.config.packaged",
    "caption.preemption": "caption.training.preemption",
    "caption.progress": "caption.training.progress",
    "caption.ptb_tokenizer": "caption.evaluation.ptb_tokenizer",
    "caption.report": "caption.evaluation.report",
    "caption.results": "caption.evaluation.results",
    "caption.settings_keys": "caption.config.keys",
    "caption.text": "caption.model.vocabulary",
    "caption.visualize": "caption.evaluation.overlays",
}
# caption.evaluation is a package now: its module's classes of then (no config names them) are found by path only
OLD_PACKAGES = {"caption.commands", "caption.comparison"}  # old names of packages, whose modules are looked up here too


# class of a module that stays -> where the class is now
MOVED_CLASSES = {"caption.data.sources.records.CaptionSource": "caption.data.sources.base.CaptionSource"}


def new_class_path(class_path: Any) -> str | None:
    """The path that `class_path` (`module.Class`) has now when it or its module moved, else None."""
    if not isinstance(class_path, str):
        return None
    if class_path in MOVED_CLASSES:
        return MOVED_CLASSES[class_path]
    module, _, name = class_path.rpartition(".")
    return f"{MOVED[module]}.{name}" if module in MOVED and name else None


def warn_moved(old: str, new: str, *, origin: str) -> None:
    warnings.warn(f"{origin} names {old}, which is now {new}: read as {new} (the old name is read until caption "
                  "0.4)", CaptionWarning, stacklevel=3)


def with_new_class_paths(value: Any, *, origin: str) -> Any:
    """`value` (a checkpoint's settings: mappings and lists) with every `class_path` of the flat layout's modules
    replaced by its new path, each saying so once; anything else as it is."""
    if isinstance(value, list):
        return [with_new_class_paths(item, origin=origin) for item in value]
    if not isinstance(value, dict):
        return value
    result = {}
    for key, item in value.items():
        new = new_class_path(item) if key in ("class_path", "_class_path") else None
        if new is not None:
            warn_moved(item, new, origin=origin)
        result[key] = new if new is not None else with_new_class_paths(item, origin=origin)
    return result


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module of the flat layout by its old name as a view of its new module (the same classes)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=name in OLD_PACKAGES)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # a plain module, filled by exec_module

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__]
        warn_moved(module.__name__, new, origin="a config")
        module.__dict__.update({name: value for name, value in vars(importlib.import_module(new)).items()
                                if not name.startswith("__")})


@contextmanager
def moved_modules() -> Iterator[None]:
    """While inside, `import caption.callbacks` (any module of `MOVED`) gives its new module's names: for the parsing of
    configs of the flat layout by Lightning's CLI, which imports each class path it reads. Only names no module has now
    are looked up; the old modules imported meanwhile are forgotten on the way out."""
    finder = _OldNames()
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name, module in list(sys.modules.items()):
            if getattr(getattr(module, "__spec__", None), "loader", None) is finder:
                del sys.modules[name]
                parent, _, child = name.rpartition(".")
                if getattr(sys.modules.get(parent), child, None) is module:
                    delattr(sys.modules[parent], child)
