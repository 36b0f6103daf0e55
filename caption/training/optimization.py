"""How `caption fit` optimizes the model: the one group of a config's `model:` section that is the training's alone.

The other groups are the trained model's (`caption.model.caption_model.ModelSettings`: each a dataclass beside the
module it configures), which inference reads back without this layer.
"""

from dataclasses import dataclass
from typing import Literal

from caption.errors import check_range


@dataclass(frozen=True)
class OptimizationSettings:
    """How `caption fit` trains the model (`model.optimization:` in a config).

    Args:
        optimizer: "adam" (paper: Flickr30k, COCO) or "rmsprop" (paper: Flickr8k).
        learning_rate: optimizer step size.
        on_nonfinite_loss: when the loss is NaN/inf on any rank: stop, naming the step and the loss terms ("error"),
            or skip the batch on every rank and count it in train/nonfinite_batches ("skip").
        init_from: a checkpoint of this project whose weights a new `fit` starts from (stage 2 of the two-stage
            recipe: fresh optimizer, epochs and steps); a run resumed with --ckpt_path keeps its own weights.
        compile: torch.compile the decoder step (the per-word recurrence of training and decoding).
    """

    optimizer: Literal["adam", "rmsprop"] = "adam"          # paper: Adam for COCO and Flickr30k
    learning_rate: float = 2e-4                             # original code: its Adam steps 2e-4 (optimizers.py)
    on_nonfinite_loss: Literal["error", "skip"] = "error"   # ours
    init_from: str | None = None                            # ours: a new run starts from scratch
    compile: bool = False                                   # ours

    def __post_init__(self) -> None:
        check_range("optimization.learning_rate", self.learning_rate, low=0, strict=True)
