"""The configs shipped inside the package, addressable by name from any folder:

    caption fit --config shapes_soft          # the packaged caption/configs/shapes_soft.yaml
    caption fit --config my_run.yaml          # a file: always a file when one is there

In a source checkout `caption/configs` is a link to the top-level `configs/` folder (the one the README names,
`configs/shapes_soft.yaml`), so both spellings read the same file; a wheel carries them as package data.
"""

from importlib import resources
from pathlib import Path

from caption.errors import ConfigError

SUFFIX = ".yaml"


def packaged_configs() -> dict[str, Path]:
    """{name: file} of every config the package ships, e.g. {"shapes_soft": .../caption/configs/shapes_soft.yaml}."""
    folder = Path(str(resources.files("caption") / "configs"))
    return {file.stem: file for file in sorted(folder.glob(f"*{SUFFIX}"))}


def config_file(value: str) -> str:
    """`value` if it names a file; else the packaged config called `value` (with or without .yaml).

    A value that is neither is returned as it is when it may be an inline YAML/JSON config (jsonargparse takes
    those), and is a ConfigError naming the packaged configs when it looks like a file name."""
    if Path(value).is_file():
        return value
    packaged = packaged_configs()
    name = value.removesuffix(SUFFIX)
    if name in packaged:
        return str(packaged[name])
    if any(mark in value for mark in "{}:\n"):  # inline YAML or JSON
        return value
    raise ConfigError(f"config {value}: no such file, nor a packaged config of that name (packaged: "
                      f"{', '.join(packaged)})")


def with_packaged_configs(args: list[str]) -> list[str]:
    """Command-line `args` with each `--config X`, `--config=X` and `-c X` resolved by `config_file`."""
    resolved, follows_flag = [], False
    for arg in args:
        if follows_flag:
            arg = config_file(arg)
        elif arg.startswith("--config="):
            arg = "--config=" + config_file(arg.removeprefix("--config="))
        resolved.append(arg)
        follows_flag = arg in ("--config", "-c") and not follows_flag
    return resolved
