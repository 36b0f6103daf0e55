"""The inference layer: what every command that captions images calls, and the Python API.

- `Captioner`: a checkpoint (file or URL) and its input transform; images in, `Caption`s out.
- `describe`: caption images of your own, a figure per caption of where the model looked.
- `evaluate`: caption a split in batches and score it (coco-caption metrics, attention accuracy).
"""

from caption.evaluation.report import Evaluation
from caption.inference.captioner import Captioner, pick_device
from caption.inference.describe_images import describe
from caption.inference.evaluate import (
    build_data, evaluate, made_by, training_data, write_captions, write_evaluation,
)
from caption.inference.inputs import Captions, Failure, ImageInputError
from caption.inference.trained import TrainedModel, load_trained
from caption.model.captions import Caption

__all__ = [
    "Caption", "Captioner", "Captions", "Evaluation", "Failure", "ImageInputError", "TrainedModel", "build_data",
    "describe", "evaluate", "load_trained", "made_by", "pick_device",
    "training_data", "write_captions", "write_evaluation",
]
