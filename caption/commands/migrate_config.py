"""`caption migrate-config FILE... [--in-place]`: a config of caption < 0.2 with its model settings in their groups
(`caption.renamed`)."""

from caption.renamed import main

__all__ = ["main"]
