"""The settings of a `CaptionModule`, in typed groups as a config's `model:` section gives them.

Each group is a dataclass beside the module it configures (`EncoderSettings` in `caption.model.encoder`,
`DecoderSettings`, `AttentionSettings`, the objectives' `SoftObjectiveSettings` and `HardObjectiveSettings`,
`DecodingSettings`, `SelfCriticalSettings`); the optimizer's is here. The groups of the trained model, all but the
optimizer's, are `caption.model.caption_model.ModelSettings`, which inference reads back without this layer. A
checkpoint stores them as plain dicts, read back by `ModuleSettings.of`.
"""

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from caption.errors import check_range
from caption.model.attention import AttentionSettings
from caption.model.caption_model import ModelSettings, typed
from caption.model.decoder import DecoderSettings
from caption.model.decoding import DecodingSettings
from caption.model.encoder import EncoderSettings
from caption.model.objectives import HardObjectiveSettings, SoftObjectiveSettings
from caption.model.self_critical import SelfCriticalSettings


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


@dataclass(frozen=True)
class ModuleSettings:
    """Every setting of a `CaptionModule`, typed, group by group as in a config's `model:` section."""

    encoder: EncoderSettings
    decoder: DecoderSettings
    attention: AttentionSettings
    soft: SoftObjectiveSettings | None  # soft attention only
    hard: HardObjectiveSettings | None  # hard attention only
    decoding: DecodingSettings
    optimization: OptimizationSettings
    self_critical: SelfCriticalSettings | None = None  # null: cross-entropy training

    @classmethod
    def of(cls, **groups: Any) -> "ModuleSettings":
        """The groups as dataclasses (a checkpoint stores plain dicts): the model's as `ModelSettings.of` reads them
        (the objective of the attention kind given its defaults when unset; a ConfigError for a group of the other kind,
        or a setting a group does not have), and the optimizer's."""
        model = ModelSettings.of(**{name: value for name, value in groups.items() if name != "optimization"})
        return cls(**vars(model), optimization=typed(OptimizationSettings, groups.get("optimization"), "optimization"))

    @property
    def model(self) -> ModelSettings:
        """The groups of the trained model: all but the optimizer's."""
        return ModelSettings(**{field.name: getattr(self, field.name) for field in fields(ModelSettings)})

    def as_dicts(self) -> dict[str, dict[str, Any] | None]:
        """Each group as a plain dict (None for the objective of the other kind), for the checkpoint."""
        return {name: None if value is None else asdict(value) for name, value in vars(self).items()}
