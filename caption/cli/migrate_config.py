"""`caption migrate-config FILE... [--in-place]`: a config of caption 0.1 with its model settings in their groups
(the rewriting: `caption.legacy.config_text`). Removed in 0.4, together with `caption.legacy`. No torch here: the
command answers at once.
"""

import argparse
import os
import sys
from pathlib import Path

from caption.errors import ConfigError
from caption.io.outputs import write_atomically
from caption.legacy.config_text import migrate_yaml


def read_config(path: str) -> str:
    """A config file's text, or a ConfigError in one line naming it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}): save it "
                          "as UTF-8 first") from None


def main(argv: list[str]) -> None:
    """`caption migrate-config FILE... [--in-place]`. Every file is read and migrated before any is written; a file
    with no setting of 0.1 is left as it is."""
    parser = argparse.ArgumentParser(prog="caption migrate-config",
                                     description="a config of caption 0.1 with its model settings in their groups")
    parser.add_argument("files", nargs="+", help="config files (YAML) written for caption 0.1")
    parser.add_argument("--in-place", action="store_true", help="rewrite each file instead of printing it")
    args = parser.parse_args(argv)
    migrated = []
    for path in args.files:
        text = read_config(path)
        migrated.append((path, text, migrate_yaml(text, where=path)))
    for path, text, result in migrated:
        if not args.in_place:
            sys.stdout.write(result)
        elif result == text:
            print(f"{path}: nothing to migrate", file=sys.stderr)
        else:  # a link: the file it points to is the config (replacing the link would leave that one unmigrated)
            real = Path(os.path.realpath(path))
            write_atomically(real, result.encode("utf-8"), what="config")
            print(f"{path}: migrated{f' (the file it links to, {real})' if Path(path).is_symlink() else ''}",
                  file=sys.stderr)


__all__ = ["main"]
