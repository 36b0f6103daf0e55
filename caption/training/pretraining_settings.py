"""The settings of `caption pretrain-encoder` (`caption.training.encoder_pretraining`), without torch: the command's
`--help` shows their defaults at once."""

from dataclasses import dataclass

from caption.errors import check_range


@dataclass(frozen=True)
class PretrainingSettings:
    """How the encoder is trained as a classifier (`caption pretrain-encoder`'s options).

    Args:
        epochs: passes over the training images; the epoch of the best validation accuracy is kept (the last of equals).
        batch_size: images per step.
        learning_rate: Adam's step size, constant.
        background_weight: weight of the background cells' loss beside the object cells' (0: objects only).
        max_shift: random translation of each training image, in grid cells (0: none).
    """

    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 0.001
    background_weight: float = 1.0
    max_shift: float = 1.0

    def __post_init__(self) -> None:
        check_range("epochs", self.epochs, low=1)
        check_range("batch_size", self.batch_size, low=1)
        check_range("learning_rate", self.learning_rate, low=0, strict=True)
        check_range("background_weight", self.background_weight, low=0)
        check_range("max_shift", self.max_shift, low=0)
