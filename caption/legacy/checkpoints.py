"""A checkpoint of an older version read as one of now: `upgraded`, the one call the checkpoint reader makes
(`caption.io.checkpoints.read_checkpoint`), before anything else looks at what it read.

Two upgrades, each a no-op for a checkpoint of now: the class paths of caption 0.2.0's flat layout
(`caption.data.shapes.ShapesSource`) read as their current names (`caption.legacy.moved`, each saying so in one
warning), and the flat model settings of caption 0.1 (`embed_dim`) moved into their groups (`decoder.embed_dim`,
`caption.legacy.settings`). Removed in 0.4, with the rest of `caption.legacy`.
"""

from typing import Any

from caption.legacy.moved import with_new_class_paths
from caption.legacy.settings import grouped

SETTINGS = ("hyper_parameters", "datamodule_hyper_parameters")  # the parts of a checkpoint that name classes


def upgraded(checkpoint: dict[str, Any], *, origin: str) -> dict[str, Any]:
    """`checkpoint` (its "hyper_parameters" a mapping) with the class paths of the flat layout in its settings
    replaced by their new paths, each saying so once and naming `origin`, and its model settings of 0.1 moved into
    their groups; a checkpoint of now is returned as it is."""
    for key in SETTINGS:
        if key in checkpoint:
            checkpoint[key] = with_new_class_paths(checkpoint[key], origin=origin)
    checkpoint["hyper_parameters"] = grouped(checkpoint["hyper_parameters"])
    return checkpoint
