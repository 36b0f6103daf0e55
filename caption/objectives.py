"""Training objectives: eq. 14 for soft attention, eq. 12 (the Jensen lower bound) for hard.

Notation: B captions, T steps (without <start>), L locations, V words.
    mask_t  1 on real target tokens, <end> included, 0 on padding         (B, T)
    log p(y | a)      Σ_t mask_t log p(y_t | ·), the caption log-likelihood (B,)

Soft (eq. 14):  loss = -log p(y|a) + λ Σ_i (1 - Σ_t α_ti)²    (λ = `alpha_c`; sums over real steps)

Hard (eq. 11-12), with s̃ ~ Multinoulli(α) sampled by the decoder:
    ∂L_s/∂W ≈ 1/N Σ_n [ ∂log p(y|s̃ⁿ,a)/∂W + λ_r (r(s̃ⁿ) - b) ∂log p(s̃ⁿ|a)/∂W + λ_e ∂H[s̃ⁿ]/∂W ]
We minimise a surrogate whose gradient is minus that estimate:
    loss = -log p(y|s̃,a) - λ_r (r - b) log p(s̃|a) - λ_e H[s̃]  (+ the eq. 14 regulariser if λ > 0)
where log p(s̃|a) = Σ_t log α_{t,s̃_t}, H[s̃] = Σ_t H(α_t), r is treated as a constant, and
b is the moving-average baseline b ← 0.9 b + 0.1 r (sec. 4.1). The reward r is the caption's
log-likelihood ("sum", the paper) or its mean per token ("mean", the original code's choice).
Images marked semi-sampled used the expected context, so they carry no REINFORCE term.
All losses are means over captions of per-caption sums, as the original code.
"""

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    alpha_c: float,
    reward: Reward = "mean",
) -> LossTerms:
    """Surrogate loss whose gradient is minus the Monte Carlo estimate of eq. 12.

    With N samples per caption, the batch holds each caption N times and the mean over rows is
    the 1/N Σ_n of eq. 12. The baseline is not updated here (see MovingAverageBaseline).
    """
    assert output.log_alpha_location is not None and output.entropy is not None, "decoder must use hard attention"
    log_likelihood = caption_log_likelihood(output.logits, targets, mask)  # log p(y|s̃,a): (B,)
    log_p_locations = (output.log_alpha_location * mask).sum(dim=1)  # log p(s̃|a): (B,)
    entropy = (output.entropy * mask).sum(dim=1)  # H[s̃]: (B,)
    penalty = doubly_stochastic_penalty(output.alpha, mask)  # (B,)

    r = log_likelihood.detach()
    if reward == "mean":
        r = r / mask.sum(dim=1).clamp(min=1)
    sampled = torch.ones_like(r, dtype=torch.bool) if output.semi_sampled is None else ~output.semi_sampled
    advantage = (r - baseline) * sampled  # zero for semi-sampled captions
    reinforce = -advantage * log_p_locations  # (B,)

    loss = -log_likelihood + reinforce_weight * reinforce - entropy_weight * entropy + alpha_c * penalty
    return LossTerms(
        loss=loss.mean(),
        nll=-log_likelihood.mean(),
        doubly_stochastic=penalty.mean(),
        tokens=mask.sum(),
        reinforce=reinforce.mean(),
        entropy=entropy.mean(),
        reward=r[sampled].mean() if sampled.any() else r.new_tensor(float("nan")),
        sampled=sampled,
    )
