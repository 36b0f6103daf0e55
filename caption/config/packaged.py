"""The configs shipped inside the package, addressable by name from any folder:

    caption fit --config shapes_soft          # a named run: its fragments, composed (NAMED_RUNS)
    caption fit --config coco --config soft   # fragments by name: configs/coco.yaml, then configs/soft.yaml
    caption fit --config my_run.yaml          # a file: always a file when one is there

The configs are composed: a base per dataset, a fragment per attention kind and per encoder, merged in order by
repeated `--config` (README "Configs"). A named run (`coco_soft`, `coco_resnet101_hard_finetune` ...: the twelve
configs there were before they were composed) stands for its fragments and its own run folder, runs/<name>; its
old path, `configs/<name>.yaml`, still means the same run. In a source checkout `caption/configs` is a link to the
top-level `configs/` folder, so both spellings read the same file; a wheel carries them as package data.
"""

import json
from importlib import resources
from pathlib import Path

import yaml

from caption.config.suggestions import did_you_mean
from caption.errors import ConfigError

SUFFIX = ".yaml"
FINETUNE = "_finetune"  # a named run `<stage 1>_finetune` starts from its stage 1's best checkpoint
ENCODER = "_encoder"  # a named run `<data>_encoder` is `caption pretrain-encoder`'s, not `caption fit`'s
SELF_CRITICAL = "_scst"  # a named run `<run>_scst` fine-tunes run <run> on CIDEr-D (configs/scst.yaml)
# named run -> its fragments (configs/<fragment>.yaml), merged in this order
NAMED_RUNS: dict[str, tuple[str, ...]] = {
    "coco_soft": ("paper", "coco", "soft"),
    "coco_hard": ("paper", "coco", "hard"),
    "flickr8k_soft": ("paper", "flickr8k", "soft"),
    "flickr8k_hard": ("paper", "flickr8k", "hard"),
    "flickr30k_soft": ("paper", "flickr30k", "soft"),
    "flickr30k_hard": ("paper", "flickr30k", "hard"),
    "coco_resnet101_soft": ("paper", "coco", "resnet101", "soft"),
    "coco_resnet101_hard": ("paper", "coco", "resnet101", "hard"),
    "coco_resnet101_soft_finetune": ("paper", "coco", "resnet101", "soft", "finetune"),
    "coco_resnet101_hard_finetune": ("paper", "coco", "resnet101", "hard", "finetune"),
    "coco_soft_scst": ("paper", "coco", "soft", "scst"),
    "coco_hard_scst": ("paper", "coco", "hard", "scst"),
    "shapes_encoder": ("shapes",),  # stage 0, for `caption pretrain-encoder` (ENCODER)
    "shapes_soft": ("shapes", "soft", "shapes_stage1"),
    "shapes_soft_scratch": ("shapes", "soft", "shapes_stage1", "scratch"),
    "shapes_hard": ("shapes", "hard", "shapes_stage2"),
    "shapes_soft_scst": ("shapes", "soft", "shapes_stage1", "scst", "shapes_scst"),
    "shapes_hard_scst": ("shapes", "hard", "shapes_stage2", "scst", "shapes_scst"),
}


def packaged_configs() -> dict[str, Path]:
    """{name: file} of every config file the package ships, e.g. {"coco": .../caption/configs/coco.yaml}."""
    folder = Path(str(resources.files("caption") / "configs"))
    return {file.stem: file for file in sorted(folder.glob(f"*{SUFFIX}"))}


def run_settings(name: str) -> dict:
    """What a named run sets beyond its fragments: its folder runs/<name> (logs too) and, for a fine-tuning or
    self-critical stage, the checkpoint it starts from."""
    folder = f"runs/{name}"
    settings: dict = {"trainer": {"default_root_dir": folder, "logger": {"init_args": {"save_dir": folder}}}}
    if name.endswith(FINETUNE):
        settings["model"] = {"optimization": {"init_from": f"runs/{name.removesuffix(FINETUNE)}/checkpoints/best.ckpt"}}
    if name.endswith(SELF_CRITICAL):  # the run folder: its checkpoint as `caption compare` picks it
        settings["model"] = {"optimization": {"init_from": f"runs/{name.removesuffix(SELF_CRITICAL)}"}}
    return settings


def named_run(value: str) -> str | None:
    """The named run `value` stands for (`coco_soft`, `coco_soft.yaml`, or its old path `configs/coco_soft.yaml`
    when no such file is there), or None."""
    path = Path(value)
    if path.is_file():
        return None
    name = path.name.removesuffix(SUFFIX)
    if name in NAMED_RUNS and (path.parent == Path() or path.parent.name == "configs"):
        return name
    return None


def named_run_configs(name: str) -> list[str]:
    """The configs a named run composes: its fragment files, in order, then its own settings (inline JSON)."""
    packaged = packaged_configs()
    return [*(str(packaged[fragment]) for fragment in NAMED_RUNS[name]), json.dumps(run_settings(name))]


def data_section(value: str) -> dict:
    """The `data:` settings of config `value` (a file, a packaged config's name, or a named run, whose fragments'
    sections are merged in order, as repeated --config merges them); {} when it has none."""
    run = named_run(value)
    files = [str(packaged_configs()[fragment]) for fragment in NAMED_RUNS[run]] if run else [config_file(value)]
    data: dict = {}
    for file in files:
        try:
            settings = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read config {file}: {error}") from error
        section = settings.get("data") if isinstance(settings, dict) else None
        data = merged(data, section if isinstance(section, dict) else {})
    return data


def merged(base: dict, update: dict) -> dict:
    """`update` over `base`, mappings merged key by key."""
    return base | {key: merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict)
                   else value for key, value in update.items()}


def config_file(value: str) -> str:
    """`value` if it names a file; else the packaged config called `value` (with or without .yaml).

    A value that is neither is returned as it is when it may be an inline YAML/JSON config (jsonargparse takes
    those), and is a ConfigError naming the packaged configs when it looks like a file name. A named run is several
    files: a command that reads one file (`caption evaluate --config`) is told to pass the run's saved config."""
    if Path(value).is_file():
        return value
    packaged = packaged_configs()
    name = value.removesuffix(SUFFIX)
    if name in packaged:
        return str(packaged[name])
    run = named_run(value)
    if run is not None:
        raise ConfigError(f"config {value}: a composed run ({' + '.join(NAMED_RUNS[run])}); here pass one file with a "
                          f"`data:` section, e.g. the run's saved runs/{run}/logs/version_*/config.yaml")
    if any(mark in value for mark in "{}:\n"):  # inline YAML or JSON
        return value
    names = [*packaged, *NAMED_RUNS]
    suggestion = did_you_mean(name, names)
    raise ConfigError(f"config {value}: no such file, nor a packaged config of that name; "
                      f"{suggestion or 'packaged: ' + ', '.join(names)}")


def configs(value: str) -> list[str]:
    """The configs `--config value` stands for: a named run's, else the one `config_file` finds."""
    run = named_run(value)
    return named_run_configs(run) if run is not None else [config_file(value)]


def encoder_run(args: list[str]) -> str | None:
    """The first named run of `caption pretrain-encoder` (`<data>_encoder`) that `args` give as a --config, or None."""
    return next((run for run in map(named_run, config_values(args)) if run is not None and run.endswith(ENCODER)),
                None)


def config_values(args: list[str]) -> list[str]:
    """The values of `--config X`, `-c X` and `--config=X` among command-line `args`."""
    values = [value for flag, value in zip(["", *args], args) if flag in ("--config", "-c")]
    return values + [arg.removeprefix("--config=") for arg in args if arg.startswith("--config=")]


def with_packaged_configs(args: list[str]) -> list[str]:
    """Command-line `args` with each `--config X`, `--config=X` and `-c X` resolved: a named run becomes one
    `--config` per config it composes, any other X the file `config_file` finds."""
    resolved: list[str] = []
    flag = None  # the flag whose value comes next
    for arg in args:
        if flag is not None:
            first, *more = configs(arg)
            resolved.extend([first, *(item for config in more for item in (flag, config))])
            flag = None
        elif arg.startswith("--config="):
            resolved.extend(f"--config={config}" for config in configs(arg.removeprefix("--config=")))
        else:
            resolved.append(arg)
            flag = arg if arg in ("--config", "-c") else None
    return resolved
