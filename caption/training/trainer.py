"""Lightning's Trainer, its `precision` taking "auto" (the default) and refusing in one line what the model cannot run.

    caption fit --config shapes_soft --trainer.precision auto        # = unset: bf16-mixed where it pays, else 32-true
    caption fit --config shapes_soft --trainer.precision 32-true

Every other argument is Lightning's own, passed on unchanged (LightningCLI reads them through `**kwargs`).
"""

from typing import Any

from lightning.pytorch import Trainer

from caption.errors import ConfigError
from caption.io.device import resolved_precision

# Lightning's settings that keep the weights in half precision or need another library: the model keeps its weights,
# LSTM state, α and losses in float32 (caption.model.precision), so these are refused rather than half-run
REFUSED = ("16-true", "bf16-true", "transformer-engine", "transformer-engine-float16")
ACCEPTED = ("auto", "32-true", "bf16-mixed", "16-mixed", "64-true", "32", "bf16", "16", "64")  # Lightning's spellings


class CaptionTrainer(Trainer):
    def __init__(self, *, precision: str | int | None = None, **kwargs: Any) -> None:
        """Lightning's Trainer.

        Args:
            precision: auto (or unset: bf16-mixed where the device has bf16 matrix units, else 32-true;
                caption.io.device), 32-true, bf16-mixed, 16-mixed or 64-true (Lightning's short spellings too)
        """
        if str(precision) in REFUSED:
            raise ConfigError(f"trainer.precision {precision}: the model keeps its weights, LSTM state, attention and "
                              "losses in float32; use bf16-mixed (bf16 matrix products, float32 weights), 16-mixed "
                              "or 32-true, or auto")
        if precision is not None and str(precision) not in ACCEPTED:
            raise ConfigError(f"trainer.precision {precision!r} is none of {', '.join(ACCEPTED)}")
        setting, accelerator = None if precision is None else str(precision), kwargs.get("accelerator")
        if accelerator is None or isinstance(accelerator, str):
            setting = resolved_precision(setting, accelerator)
        elif setting in (None, "auto"):  # an Accelerator object: no bf16 units are asked of it
            setting = "32-true"
        super().__init__(precision=setting, **kwargs)  # type: ignore[arg-type]
