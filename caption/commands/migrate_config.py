"""`caption migrate-config FILE... [--in-place]`: a config of caption 0.1 with its model settings in their groups
(`caption.compat`, removed in 0.4)."""

from caption.compat import main

__all__ = ["main"]
