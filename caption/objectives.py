"""Training objectives: eq. 14 for soft attention, eq. 12 (the Jensen lower bound) for hard.

Notation: B captions, T steps (without <start>), L locations, V words.
    mask_t  1 on real target tokens, <end> included, 0 on padding         (B, T)
    log p(y | a)      Σ_t mask_t log p(y_t | ·), the caption log-likelihood (B,)

Every weight below is *per caption*, against that caption's NLL; the loss is the mean over captions
(the paper's per-caption form). One loss object per attention kind owns its weights (and, for hard
attention, its baseline): `OBJECTIVES[attention]`.

Soft (eq. 14):  loss = -log p(y|a) + λ Σ_i (1 - Σ_t α_ti)²    (λ = `alpha_c`; sums over real steps)

Hard (eq. 11-12), with s̃ ~ Multinoulli(α) sampled by the decoder:
    ∂L_s/∂W ≈ 1/N Σ_n [ ∂log p(y|s̃ⁿ,a)/∂W + λ_r (r(s̃ⁿ) - b) ∂log p(s̃ⁿ|a)/∂W + λ_e ∂H[s̃ⁿ]/∂W ]
We minimise a surrogate whose gradient is minus that estimate:
    loss = -log p(y|s̃,a) - λ_r (r - b) log p(s̃|a) - λ_e H[s̃]
where log p(s̃|a) = Σ_t log α_{t,s̃_t}, H[s̃] = Σ_t H(α_t), r is treated as a constant, and
b is the moving-average baseline b ← 0.9 b + 0.1 r (sec. 4.1). The reward r is the caption's
log-likelihood ("sum", the paper) or its mean per token ("mean", the original code's choice).
Images marked semi-sampled used the expected context: they carry no REINFORCE term, and the NLL's
gradient through α (exact for the expected context) is kept, as in the original's scan.

How the original code (arctic-captions, capgen.py `train()`) weighs these, and how to reproduce it
(`tests/test_original_objective.py` checks each against a transcription of capgen's update):
  - the NLL is `cost.mean()` over the minibatch, but REINFORCE and entropy enter as `known_grads` on
    alphas (T, B, L), one per caption, not divided by B: per caption λ_r = 0.1·B, λ_e = 0.002·B
    (6.4 and 0.128 at B = 64);
  - `alpha_c * ((1 - alphas.sum(0))**2).sum(0).mean()` sums over the batch and averages over the
    L locations: per caption λ = alpha_c·B/L (0.33 for COCO at B = 64, L = 196);
  - under hard attention the known gradient on alphas replaces the regulariser's, so the doubly
    stochastic term trains soft attention only (the paper gives eq. 14 for the deterministic model);
    `HardAttentionObjective` logs it and leaves it out of the loss;
  - capgen's known gradient has (baseline − cost) where eq. 12 has (cost − baseline) for a descent:
    followed literally it makes the sampled locations of *worse* captions more likely. We keep eq. 12's
    sign, whose estimator `tests/test_hard_estimator.py` checks against exact enumeration.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from caption.attention import AttentionKind
from caption.decoder import DecoderOutput

Reward = Literal["mean", "sum"]


def caption_log_likelihood(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """log p(y | a) = Σ_t mask_t log p(y_t): logits (B, T, V), targets/mask (B, T) -> (B,)."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    token_log_probs = log_probs.gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    return (token_log_probs * mask).sum(dim=1)


def doubly_stochastic_penalty(alpha: Tensor, mask: Tensor) -> Tensor:
    """Σ_i (1 - Σ_t α_ti)² of eq. 14, summing only each caption's real steps: (B, T, L) -> (B,)."""
    attention_per_location = (alpha * mask[..., None]).sum(dim=1)  # (B, L)
    return ((1.0 - attention_per_location) ** 2).sum(dim=1)


class MovingAverageBaseline(nn.Module):
    """The variance-reducing baseline of sec. 4.1: b_k = decay · b_{k-1} + (1 - decay) · r_k.

    A buffer, so it is saved in checkpoints. `update` takes the batch-mean reward; under DDP the
    caller passes the mean over all ranks so every rank holds the same baseline.
    """

    def __init__(self, decay: float = 0.9):
        super().__init__()
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"baseline decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.register_buffer("value", torch.zeros(()))

    @torch.no_grad()
    def update(self, reward_mean: Tensor) -> None:
        self.value.mul_(self.decay).add_((1.0 - self.decay) * reward_mean.detach().to(self.value))


@dataclass
class LossTerms:
    """The loss to minimise and its parts, each a scalar (mean over captions)."""

    loss: Tensor
    nll: Tensor  # -log p(y|a) (hard: -log p(y|s̃,a)), summed over tokens
    doubly_stochastic: Tensor  # Σ_i (1 - Σ_t α_ti)², before λ
    tokens: Tensor  # number of real target tokens in the batch
    reinforce: Tensor | None = None  # -(r - b) log p(s̃|a), before λ_r
    entropy: Tensor | None = None  # H[s̃] = Σ_t H(α_t), before λ_e
    reward: Tensor | None = None  # r, mean over the sampled captions
    baseline: Tensor | None = None  # b used for this batch
    sampled: Tensor | None = None  # boolean (B,): captions whose attention was sampled (not semi-sampled)

    def as_dict(self) -> dict[str, Tensor]:
        return {name: value for name, value in vars(self).items() if value is not None and name != "sampled"}


def soft_attention_loss(output: DecoderOutput, targets: Tensor, mask: Tensor, *, alpha_c: float) -> LossTerms:
    """Eq. 14: -log p(y|a) + λ Σ_i (1 - Σ_t α_ti)², averaged over captions."""
    nll = -caption_log_likelihood(output.logits, targets, mask)  # (B,)
    penalty = doubly_stochastic_penalty(output.alpha, mask)  # (B,)
    return LossTerms(
        loss=(nll + alpha_c * penalty).mean(),
        nll=nll.mean(),
        doubly_stochastic=penalty.mean(),
        tokens=mask.sum(),
    )


def hard_attention_loss(
    output: DecoderOutput,
    targets: Tensor,
    mask: Tensor,
    *,
    baseline: Tensor,
    reinforce_weight: float,
    entropy_weight: float,
    reward: Reward = "mean",
) -> LossTerms:
    """Surrogate loss whose gradient is minus the Monte Carlo estimate of eq. 12.

    With N samples per caption, the batch holds each caption N times and the mean over rows is
    the 1/N Σ_n of eq. 12. The doubly stochastic term is reported, not trained (module docstring).
    The baseline is not updated here (see HardAttentionObjective.update).
    """
    assert output.log_alpha_location is not None and output.entropy is not None, "decoder must use hard attention"
    log_likelihood = caption_log_likelihood(output.logits, targets, mask)  # log p(y|s̃,a): (B,)
    log_p_locations = (output.log_alpha_location * mask).sum(dim=1)  # log p(s̃|a): (B,)
    entropy = (output.entropy * mask).sum(dim=1)  # H[s̃]: (B,)

    r = log_likelihood.detach()
    if reward == "mean":
        r = r / mask.sum(dim=1).clamp(min=1)
    sampled = torch.ones_like(r, dtype=torch.bool) if output.semi_sampled is None else ~output.semi_sampled
    advantage = (r - baseline) * sampled  # zero for semi-sampled captions
    reinforce = -advantage * log_p_locations  # (B,)

    loss = -log_likelihood + reinforce_weight * reinforce - entropy_weight * entropy
    return LossTerms(
        loss=loss.mean(),
        nll=-log_likelihood.mean(),
        doubly_stochastic=doubly_stochastic_penalty(output.alpha.detach(), mask).mean(),
        tokens=mask.sum(),
        reinforce=reinforce.mean(),
        entropy=entropy.mean(),
        reward=r[sampled].mean() if sampled.any() else r.new_tensor(float("nan")),
        baseline=baseline.detach().clone(),
        sampled=sampled,
    )


SumOverRanks = Callable[[Tensor], Tensor]


class SoftAttentionObjective(nn.Module):
    """Eq. 14 with its weight: `objective(output, targets, mask)` -> LossTerms.

    Args:
        alpha_c: λ of the doubly stochastic regulariser, per caption; 0 turns it off.
    """

    def __init__(self, *, alpha_c: float = 1.0):
        super().__init__()
        self.alpha_c = alpha_c

    def forward(self, output: DecoderOutput, targets: Tensor, mask: Tensor) -> LossTerms:
        return soft_attention_loss(output, targets, mask, alpha_c=self.alpha_c)

    def update(self, terms: LossTerms, sum_over_ranks: SumOverRanks) -> None:
        """After a finite training step: nothing to update for soft attention."""


class HardAttentionObjective(nn.Module):
    """Eq. 12 with its weights and its moving-average baseline (a buffer, saved in checkpoints).

    Args:
        reinforce_weight: λ_r per caption (paper's form; the original code's effective value is 0.1·B).
        entropy_weight: λ_e per caption (the original code's effective value is 0.002·B).
        baseline_decay: b ← decay · b + (1 - decay) · r̄ (paper: 0.9).
        reward: "mean" per-token log-likelihood (original code) or "sum" (paper).
    """

    def __init__(
        self, *, reinforce_weight: float = 6.4, entropy_weight: float = 0.128, baseline_decay: float = 0.9,
        reward: Reward = "mean",
    ):
        super().__init__()
        self.reinforce_weight = reinforce_weight
        self.entropy_weight = entropy_weight
        self.reward = reward
        self.baseline = MovingAverageBaseline(baseline_decay)

    def forward(self, output: DecoderOutput, targets: Tensor, mask: Tensor) -> LossTerms:
        return hard_attention_loss(
            output, targets, mask, baseline=self.baseline.value, reinforce_weight=self.reinforce_weight,
            entropy_weight=self.entropy_weight, reward=self.reward,
        )

    def update(self, terms: LossTerms, sum_over_ranks: SumOverRanks) -> None:
        """b ← 0.9 b + 0.1 r̄, with r̄ the mean reward of the sampled captions over *all* ranks (so every
        DDP rank holds the same b). The original averages over every caption of the minibatch, semi-sampled
        ones included; the baseline here tracks the reward of the sampled captions it is subtracted from."""
        assert terms.reward is not None and terms.sampled is not None
        count = terms.sampled.sum()
        totals = sum_over_ranks(torch.stack([terms.reward.nan_to_num(0.0) * count, count.float()]))
        if totals[1] > 0:
            self.baseline.update(totals[0] / totals[1])


OBJECTIVES: dict[AttentionKind, type[SoftAttentionObjective] | type[HardAttentionObjective]] = {
    "soft": SoftAttentionObjective,
    "hard": HardAttentionObjective,
}
