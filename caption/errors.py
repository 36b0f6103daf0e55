"""Errors that tell the user what went wrong and what to do; the CLI prints them without a traceback."""


class CaptionError(Exception):
    """Base class: the message names the file or config key at fault and the fix."""


class ConfigError(CaptionError, ValueError):
    """A config value that is invalid or conflicts with another (raised before any work starts)."""


class CheckpointError(CaptionError):
    """A checkpoint that cannot be used: unreadable, unsafe, foreign, or made for other data."""
