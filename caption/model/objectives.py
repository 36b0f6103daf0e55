"""Training objectives: eq. 14 for soft attention, eq. 12 (the Jensen lower bound) for hard.

Soft (eq. 14):  loss = -log p(y|a) + λ Σ_i (1 - Σ_t α_ti)²    (`SoftAttentionObjective`, λ = `alpha_c`)
Hard (eq. 12):  a surrogate whose gradient is minus eq. 12's Monte Carlo estimate (`HardAttentionObjective`),
    loss = -log p(y|s̃,a) - λ_r Σ_t (R_t - b_t) log α_{t,s̃_t} - λ_e H[s̃],    H[s̃] = Σ_t H(α_t)
with the rewards R_t (`credited_rewards`) and a baseline b_t: the paper's moving average, or beyond it leave-one-out
or learned. Every weight is per caption, and the loss is the mean over captions. The surrogate, the estimators beyond
the paper and how the original code's update maps onto these weights: docs/paper.md#the-objectives and
docs/paper.md#the-original-codes-effective-weights. Either objective may add, beyond the paper, attention supervised
by object boxes (`caption.model.box_supervision`, weight `box_supervision`; 0, the default, adds nothing).
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from caption.errors import ConfigError, check_range
from caption.model.box_supervision import box_supervision_loss, check_box_target
from caption.model.decoder import DecoderOutput
from caption.model.precision import at_least_float32

Reward = Literal["mean", "sum"]
Credit = Literal["caption", "step"]
BaselineKind = Literal["moving_average", "leave_one_out", "learned"]


def token_log_likelihood(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """ℓ_t = mask_t log p(y_t): logits (B, T, V), targets/mask (B, T) -> (B, T)."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, targets[..., None]).squeeze(-1) * mask  # (B, T)


def caption_log_likelihood(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """log p(y | a) = Σ_t mask_t log p(y_t): logits (B, T, V), targets/mask (B, T) -> (B,)."""
    return token_log_likelihood(logits, targets, mask).sum(dim=1)


def doubly_stochastic_penalty(alpha: Tensor, mask: Tensor) -> Tensor:
    """Σ_i (1 - Σ_t α_ti)² of eq. 14, summing only each caption's real steps: (B, T, L) -> (B,)."""
    attention_per_location = (alpha * mask[..., None]).sum(dim=1)  # (B, L)
    return ((1.0 - attention_per_location) ** 2).sum(dim=1)


def credited_rewards(token_ll: Tensor, mask: Tensor, *, reward: Reward, credit: Credit) -> Tensor:
    """R_t, the reward credited to the location sampled at step t: ℓ (B, T) -> (B, T), zero on padding.

    credit "caption": the caption's reward r at every step (the paper); "step": the part of r from the words
    y_t.. that s_t can affect (the reward-to-go). reward "mean" divides by the caption's length n."""
    if credit == "caption":
        rewards = token_ll.sum(dim=1, keepdim=True).expand_as(token_ll)  # r at every step
    else:
        rewards = token_ll.flip(1).cumsum(1).flip(1)  # Σ_{t' ≥ t} ℓ_t'
    if reward == "mean":
        rewards = rewards / mask.sum(dim=1, keepdim=True).clamp(min=1)
    return rewards * mask


def remaining_share(mask: Tensor, credit: Credit) -> Tensor:
    """The share of a caption's reward that R_t holds on average: 1 for credit "caption", (n - t + 1)/n for
    "step" (the words still to come): mask (B, T) -> (B, T)."""
    if credit == "caption":
        return mask
    remaining = mask.flip(1).cumsum(1).flip(1)  # n - t + 1 on real steps
    return remaining / mask.sum(dim=1, keepdim=True).clamp(min=1) * mask


class MovingAverageBaseline(nn.Module):
    """The variance-reducing baseline of sec. 4.1: b_k = decay · b_{k-1} + (1 - decay) · r_k.

    A buffer, so it is saved in checkpoints. `update` takes the batch-mean caption reward; under DDP the
    caller passes the mean over all ranks so every rank holds the same baseline. Per step it gives b scaled
    by the share of the reward that step is credited with (1 for the paper's credit).
    """

    def __init__(self, decay: float):
        super().__init__()
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"baseline decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.register_buffer("value", torch.zeros(()))

    def forward(self, rewards: Tensor, *, hidden: Tensor, share: Tensor) -> Tensor:
        return self.value * share  # (B·N, T)

    @torch.no_grad()
    def update(self, reward_mean: Tensor) -> None:
        self.value.mul_(self.decay).add_((1.0 - self.decay) * reward_mean.detach().to(self.value))


class LeaveOneOutBaseline(nn.Module):
    """Sample n's baseline: the mean reward of the other N - 1 samples of its caption (docs/paper.md).
    The batch holds each caption's N samples in consecutive rows."""

    def __init__(self, samples: int):
        super().__init__()
        self.samples = samples

    def forward(self, rewards: Tensor, *, hidden: Tensor, share: Tensor) -> Tensor:
        grouped = rewards.view(-1, self.samples, rewards.shape[-1])  # (B, N, T)
        others = (grouped.sum(dim=1, keepdim=True) - grouped) / (self.samples - 1)
        return others.view_as(rewards)  # (B·N, T)


class LearnedBaseline(nn.Module):
    """b_t = w·h_{t-1} + c from the state the step attends from (detached), regressed on R_t (docs/paper.md)."""

    def __init__(self, hidden_dim: int):
        super().__init__()
        self.layer = nn.Linear(hidden_dim, 1)

    def forward(self, rewards: Tensor, *, hidden: Tensor, share: Tensor) -> Tensor:
        return at_least_float32(self.layer(hidden.detach()).squeeze(-1))  # (B·N, T), fp32 as R_t; padding masked


@dataclass
class LossTerms:
    """The loss to minimise and its parts, each a scalar (mean over captions)."""

    loss: Tensor
    nll: Tensor  # -log p(y|a) (hard: -log p(y|s̃,a)), summed over tokens
    doubly_stochastic: Tensor  # Σ_i (1 - Σ_t α_ti)², before λ
    tokens: Tensor  # number of real target tokens in the batch
    reinforce: Tensor | None = None  # -Σ_t (R_t - b_t) log α_{t,s̃_t}, before λ_r
    entropy: Tensor | None = None  # H[s̃] = Σ_t H(α_t), before λ_e
    reward: Tensor | None = None  # r, mean over the sampled captions
    baseline: Tensor | None = None  # b_t, mean over the sampled captions' steps
    advantage_square: Tensor | None = None  # (R_t - b_t)², mean over sampled steps: what the baseline leaves
    sampled: Tensor | None = None  # boolean (B·N,): captions whose attention was sampled (not semi-sampled)
    box_supervision: Tensor | None = None  # mean over words naming a boxed label of −log Σ_l α_tl m_tl, before weight

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
    baseline: Tensor | nn.Module,
    reinforce_weight: float,
    entropy_weight: float,
    reward: Reward,
    credit: Credit,
) -> LossTerms:
    """Surrogate loss whose gradient is minus the Monte Carlo estimate of eq. 12.

    With N samples per caption, the batch holds each caption N times and the mean over rows is
    the 1/N Σ_n of eq. 12 (B·N rows). `baseline` is a constant b (any shape that broadcasts to (B·N, T)) or one of
    the baselines above; a learned one adds its squared error to the loss. The doubly stochastic term is reported,
    not trained (docs/paper.md#the-original-codes-effective-weights). The moving average is not updated here
    (HardAttentionObjective.update).
    """
    assert output.log_alpha_location is not None and output.entropy is not None, "decoder must use hard attention"
    token_ll = token_log_likelihood(output.logits, targets, mask)  # ℓ_t: (B·N, T)
    log_likelihood = token_ll.sum(dim=1)  # log p(y|s̃,a): (B·N,)
    entropy = (output.entropy * mask).sum(dim=1)  # H[s̃]: (B·N,)

    rewards = credited_rewards(token_ll.detach(), mask, reward=reward, credit=credit)  # R_t: (B·N, T)
    if isinstance(baseline, nn.Module):
        share = remaining_share(mask, credit)
        baseline = baseline(rewards, hidden=output.hidden, share=share)  # b_t: (B·N, T)
    baseline = baseline.expand_as(rewards) * mask
    sampled = torch.ones_like(log_likelihood, dtype=torch.bool) if output.semi_sampled is None else ~output.semi_sampled
    sampled_steps = mask * sampled[:, None]  # semi-sampled captions carry no REINFORCE term
    advantage = (rewards - baseline.detach()) * sampled_steps  # (B·N, T)
    reinforce = -(advantage * output.log_alpha_location).sum(dim=1)  # (B·N,)
    squared_error = ((rewards - baseline) ** 2 * sampled_steps).sum(dim=1)  # (B·N,)

    loss = -log_likelihood + reinforce_weight * reinforce - entropy_weight * entropy
    if baseline.requires_grad:  # a learned baseline regresses on the rewards
        loss = loss + squared_error
    steps = sampled_steps.sum().clamp(min=1)
    caption_reward = rewards[:, 0]  # r: at the first step, either credit holds the whole caption's reward
    return LossTerms(
        loss=loss.mean(),
        nll=-log_likelihood.mean(),
        doubly_stochastic=doubly_stochastic_penalty(output.alpha.detach(), mask).mean(),
        tokens=mask.sum(),
        reinforce=reinforce.mean(),
        entropy=entropy.mean(),
        reward=caption_reward[sampled].mean() if sampled.any() else caption_reward.new_tensor(float("nan")),
        baseline=(baseline.detach() * sampled_steps).sum() / steps,
        advantage_square=squared_error.detach().sum() / steps,
        sampled=sampled,
    )


def with_box_supervision(terms: LossTerms, alpha: Tensor, box_target: Tensor | None, *, weight: float,
                         key: str) -> LossTerms:
    """`terms` with weight × the box supervision of α (B, T, L) against the batch's targets added to the loss
    (`caption.model.box_supervision`); weight 0: `terms` as they are, and no targets needed."""
    if weight == 0:
        return terms
    term, _ = box_supervision_loss(alpha, check_box_target(box_target, alpha, key=key))
    return replace(terms, loss=terms.loss + weight * term, box_supervision=term)


SumOverRanks = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class SoftObjectiveSettings:
    """Eq. 14's weight (`model.soft:` in a config; soft attention only).

    Args:
        alpha_c: λ of the doubly stochastic regulariser per caption; 0 turns it off (original code: alpha_c·B/L per
            caption; docs/paper.md).
        box_supervision: beyond the paper, the weight of attention supervised by object boxes
            (`caption.model.box_supervision`; needs data with boxes); 0: the paper's objective.
    """

    alpha_c: float = 1.0  # paper (eq. 14) and original code (COCO: alpha_c=1.0)
    box_supervision: float = 0.0  # paper: no supervision of α

    def __post_init__(self) -> None:
        check_range("soft.alpha_c", self.alpha_c, low=0)
        check_range("soft.box_supervision", self.box_supervision, low=0)


@dataclass(frozen=True)
class HardObjectiveSettings:
    """Eq. 12 and what sec. 4.1 adds to reduce its variance (`model.hard:` in a config; hard attention only).

    Args:
        samples: N, Monte Carlo samples per caption (eq. 12).
        reinforce_weight: λ_r per caption (paper's form; the original code's effective value is 0.1·B, 6.4 at B = 64).
        entropy_weight: λ_e per caption (the original code's effective value is 0.002·B, 0.128 at B = 64).
        baseline: "moving_average" (paper), or beyond it "leave_one_out" (samples >= 2) or "learned" (b(h_{t-1})).
        baseline_decay: moving average: b ← decay · b + (1 - decay) · r̄ (paper: 0.9).
        reward: "mean" per-token log-likelihood (original code) or "sum" (paper).
        credit: "caption" (paper: each location gets the caption's reward) or, beyond it, "step" (only the words it
            can affect).
        semi_sampling: probability per image of training on the expected context instead of a sample (sec. 4.1: 0.5).
        semi_sampling_final: beyond the paper: semi-sampling moves linearly from semi_sampling in the first epoch to
            this in epoch semi_sampling_epochs, then stays; None: constant (paper).
        semi_sampling_epochs: the epochs that schedule takes; None: trainer.max_epochs (which must then be set: under
            early stopping, with max_epochs an upper bound, give the number here).
        box_supervision: beyond the paper, the weight of attention supervised by object boxes, on α, the distribution
            s_t is sampled from (`caption.model.box_supervision`; needs data with boxes); 0: the paper's objective.
    """

    samples: int = 1  # original code: one Monte Carlo sample per caption
    reinforce_weight: float = 6.4  # original code: 0.1 per caption (hard-coded /10) summed over B = 64
    entropy_weight: float = 0.128  # original code: alpha_entropy_c = 0.002 per caption summed over B = 64
    baseline: BaselineKind = "moving_average"  # paper (sec. 4.1)
    baseline_decay: float = 0.9  # paper: b_k = 0.9 b_(k-1) + 0.1 log p(y|s,a)
    reward: Reward = "mean"  # original code: the mean per-token log-likelihood
    credit: Credit = "caption"  # paper: each location gets the caption's reward
    semi_sampling: float = 0.5  # paper: the expected context with probability 0.5 per image
    semi_sampling_final: float | None = None  # paper: a constant semi-sampling probability
    semi_sampling_epochs: int | None = None  # ours: the schedule spans trainer.max_epochs
    box_supervision: float = 0.0  # paper: no supervision of α

    def __post_init__(self) -> None:
        check_range("hard.samples", self.samples, low=1)
        check_range("hard.semi_sampling_epochs", self.semi_sampling_epochs, low=1)
        for key in ("reinforce_weight", "entropy_weight", "box_supervision"):
            check_range(f"hard.{key}", getattr(self, key), low=0)
        check_range("hard.baseline_decay", self.baseline_decay, low=0, high=1, below_high=True)  # 1: b never moves
        for key in ("semi_sampling", "semi_sampling_final"):
            check_range(f"hard.{key}", getattr(self, key), low=0, high=1)
        if self.baseline == "leave_one_out" and self.samples < 2:
            raise ConfigError("model.hard.baseline leave_one_out needs model.hard.samples >= 2: the other samples of a "
                              "caption are each sample's baseline")


class SoftAttentionObjective(nn.Module):
    """Eq. 14 with its weight: `objective(output, targets, mask, box_target=None)` -> LossTerms (`box_target` (B, T, L):
    the batch's targets of the box supervision, needed when its weight is positive)."""

    def __init__(self, settings: SoftObjectiveSettings = SoftObjectiveSettings(), *, hidden_dim: int = 0):
        super().__init__()  # hidden_dim: the LSTM's size, which eq. 14 does not need
        self.alpha_c = settings.alpha_c
        self.box_supervision = settings.box_supervision

    def forward(self, output: DecoderOutput, targets: Tensor, mask: Tensor,
                box_target: Tensor | None = None) -> LossTerms:
        terms = soft_attention_loss(output, targets, mask, alpha_c=self.alpha_c)
        return with_box_supervision(terms, output.alpha, box_target, weight=self.box_supervision,
                                    key="model.soft.box_supervision")

    def update(self, terms: LossTerms, sum_over_ranks: SumOverRanks) -> None:
        """After a finite training step: nothing to update for soft attention."""


class HardAttentionObjective(nn.Module):
    """Eq. 12 with its weights, its credit and its baseline (a module, saved in checkpoints).

    Args:
        settings: the objective's weights, reward, credit and baseline (semi-sampling is the decoder's).
        hidden_dim: the LSTM's size n, the input of a learned baseline.
    """

    def __init__(self, settings: HardObjectiveSettings = HardObjectiveSettings(), *, hidden_dim: int = 0):
        super().__init__()
        self.reinforce_weight = settings.reinforce_weight
        self.entropy_weight = settings.entropy_weight
        self.reward = settings.reward
        self.credit = settings.credit
        self.box_supervision = settings.box_supervision
        if settings.baseline == "learned" and hidden_dim < 1:
            raise ConfigError("model.hard.baseline learned needs the LSTM's size (hidden_dim) to build b(h_{t-1})")
        builders = {"moving_average": lambda: MovingAverageBaseline(settings.baseline_decay),
                    "leave_one_out": lambda: LeaveOneOutBaseline(settings.samples),
                    "learned": lambda: LearnedBaseline(hidden_dim)}
        if settings.baseline not in builders:
            raise ConfigError(f"model.hard.baseline must be one of {sorted(builders)}, got {settings.baseline!r}")
        self.baseline = builders[settings.baseline]()

    def forward(self, output: DecoderOutput, targets: Tensor, mask: Tensor,
                box_target: Tensor | None = None) -> LossTerms:
        terms = hard_attention_loss(
            output, targets, mask, baseline=self.baseline, reinforce_weight=self.reinforce_weight,
            entropy_weight=self.entropy_weight, reward=self.reward, credit=self.credit,
        )
        return with_box_supervision(terms, output.alpha, box_target, weight=self.box_supervision,
                                    key="model.hard.box_supervision")

    def update(self, terms: LossTerms, sum_over_ranks: SumOverRanks) -> None:
        """Moving average: b ← 0.9 b + 0.1 r̄, with r̄ the mean reward of the sampled captions over *all* ranks
        (so every DDP rank holds the same b). The original averages over every caption of the minibatch,
        semi-sampled ones included; the baseline here tracks the reward of the sampled captions it is
        subtracted from. The other baselines have nothing to track."""
        if not isinstance(self.baseline, MovingAverageBaseline):
            return
        assert terms.reward is not None and terms.sampled is not None
        count = terms.sampled.sum()
        totals = sum_over_ranks(torch.stack([terms.reward.nan_to_num(0.0) * count, count.float()]))
        if totals[1] > 0:
            self.baseline.update(totals[0] / totals[1])

