"""The kinds of attention, each one entry of `KINDS`: its φ (sec. 4.1 hard, 4.2 soft), the objective that trains it
(eq. 12, eq. 14) and that objective's settings, with the group of a config's `model:` section that sets them.

    caption fit --config shapes_soft --model.attention.kind hard          # a kind by its name
    KINDS["uniform"] = Kind(attention=UniformAttention, objective=SoftAttentionObjective,
                            settings=SoftObjectiveSettings, group="soft")  # a new kind: one entry

A φ takes annotations (B, L, D), logits e_t (R, L) and the semi-sampled rows, and returns an `AttentionOutput`; its
class says with `locates` whether it picks one location per word (hard attention: `location` is set, semi-sampling
and `model.decoding.hard_eval_context` apply, and it is built with `eval_context`). An objective is built as
`objective(settings, hidden_dim=n)` and called as `objective(output, targets, mask, box_target)` -> `LossTerms`
(`box_target`: the batch's targets of attention supervised by boxes, or None; `caption.model.box_supervision`).
The name of a kind is checked where the model's settings are made (`kind_of`, from `ModelSettings.of`): an unknown
one is a ConfigError naming the kinds there are.
"""

from dataclasses import dataclass
from typing import Literal

from torch import nn

from caption.errors import ConfigError
from caption.model.attention import HardAttention, SoftAttention
from caption.model.decoding import HardEvalContext
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    SoftAttentionObjective,
    SoftObjectiveSettings,
)

ObjectiveGroup = Literal["soft", "hard"]  # the groups of a config's `model:` section that hold an objective's settings


@dataclass(frozen=True)
class Kind:
    """One kind of attention: what the decoder attends with, what trains it, and where its settings are."""

    attention: type[nn.Module]  # φ: (annotations, logits, semi_sampled) -> AttentionOutput; `locates` on the class
    objective: type[nn.Module]  # objective(settings, hidden_dim=n); (output, targets, mask, box_target) -> LossTerms
    settings: type  # the objective's settings dataclass
    group: ObjectiveGroup  # model.soft or model.hard: where a config sets them

    def phi(self, *, eval_context: HardEvalContext) -> nn.Module:
        """φ, built: one that locates takes how it picks the context at evaluation."""
        return self.attention(eval_context=eval_context) if self.attention.locates else self.attention()


KINDS: dict[str, Kind] = {
    "soft": Kind(attention=SoftAttention, objective=SoftAttentionObjective, settings=SoftObjectiveSettings,
                 group="soft"),  # sec. 4.2, eq. 14
    "hard": Kind(attention=HardAttention, objective=HardAttentionObjective, settings=HardObjectiveSettings,
                 group="hard"),  # sec. 4.1, eq. 12
}


def kind_of(name: str) -> Kind:
    """The entry of `KINDS` named `name`; a ConfigError naming the kinds there are when there is none."""
    if name not in KINDS:
        raise ConfigError(f"model.attention.kind must be one of {', '.join(sorted(KINDS))}, got {name!r}")
    return KINDS[name]
