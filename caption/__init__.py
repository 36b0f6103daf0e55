"""Show, Attend and Tell (Xu et al., ICML 2015): soft and hard attention image captioning.

    from caption import Captioner
    captioner = Captioner.from_checkpoint("runs/shapes_soft/checkpoints/last.ckpt")
    print(captioner("photo.jpg").text)
"""

from importlib import metadata
from typing import Any

try:
    __version__ = metadata.version("show-attend-tell")
except metadata.PackageNotFoundError:  # run from a source tree that was not installed
    __version__ = "unknown"

__all__ = ["Caption", "Captioner", "__version__"]


def __getattr__(name: str) -> Any:
    """`Captioner` and `Caption` on first use: `import caption.data` alone does not load the model and Lightning.
    `Captioner` is the one that also shares itself (`save_pretrained`, `push_to_hub`: `caption.reports.sharing`)."""
    if name == "Captioner":
        from caption.reports import sharing

        return sharing.Captioner
    if name == "Caption":
        from caption import inference

        return inference.Caption
    raise AttributeError(f"module 'caption' has no attribute {name!r}")
