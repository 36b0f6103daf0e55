"""Errors that tell the user what went wrong and what to do; the CLI prints them without a traceback. Beside them, what
their messages share: the settings' range check (`check_range`), byte counts for people (`size_text`) and text read
from a file shown safely (`shown_text`)."""


import math


class CaptionError(Exception):
    """Base class: the message names the file or config key at fault and the fix."""


class ConfigError(CaptionError, ValueError):
    """A config value that is invalid or conflicts with another (raised before any work starts)."""


class CaptionWarning(UserWarning):
    """Something left out or worked around (a skipped image, an unreadable checkpoint passed over): the message says
    what and why; `caption` prints it as one `caption: warning:` line, without the source line."""


class InstallError(CaptionError):
    """Installed packages that do not work together (torchvision built for another torch): the message names both
    and the install line of a matching pair."""


class CheckpointError(CaptionError):
    """A checkpoint that cannot be used: unreadable, unsafe, foreign, or made for other data."""


class EncoderWeightsError(CaptionError):
    """The requested encoder weights cannot be found, read or loaded."""


def check_range(key: str, value: float | None, *, low: float, high: float | None = None, strict: bool = False,
                below_high: bool = False) -> None:
    """ConfigError naming `model.<key>` when `value` is below `low` (strict: not above it) or above `high` (below_high:
    not below it); the one range check of the settings dataclasses, each calling it for its own fields. None (unset)
    passes."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"model.{key} must be a finite number, got {value}")
    if high is not None and not (low <= value < high if below_high else low <= value <= high):
        interval = f"[{low:g}, {high:g}{')' if below_high else ']'}"
        what = " is a probability: it" if (low, high, below_high) == (0, 1, False) else ""
        raise ConfigError(f"model.{key}{what} must be in {interval}, got {value}")
    if not (value > low if strict else value >= low):
        raise ConfigError(f"model.{key} must be {'>' if strict else '>='} {low:g}, got {value}")


def size_text(size: int) -> str:
    """A byte count for people: 708 KB, 1.2 GB."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if size < 10 * scale else f"{size // scale} {unit}"
    return f"{size} bytes"


def shown_text(text: str, *, limit: int = 80) -> str:
    """Text read from a file, for a message: every character a terminal would not print as it is (an escape
    sequence's ESC, a newline, a lone surrogate) written as its escape (\\x1b, \\n, \\ud800), at most `limit`
    characters of it."""
    shown = "".join(character if character.isprintable() else character.encode("unicode_escape").decode("ascii")
                    for character in text[:limit])
    return shown + ("..." if len(text) > limit else "")
