"""Self-critical sequence training (SCST; Rennie et al., CVPR 2017): REINFORCE on the CIDEr-D of sampled captions.

After cross-entropy training (eq. 14, or eq. 12 for hard attention), the model is fine-tuned on the expected reward
of its own captions. Per image, k captions w^1..w^k are sampled (`caption.model.search.sample`), each scored with
CIDEr-D against the image's references (r^j, `caption.evaluation.cider_reward`), and a baseline b^j is subtracted:

    greedy          b^j = r(ŵ), the reward of the greedy caption, decoded without gradient (Rennie et al.)
    mean_of_others  b^j = 1/(k-1) Σ_{i≠j} r^i, the other samples of the same image (Luo, 2020, arXiv 2003.09971)

Soft attention, α trained through the words alone:
    loss = -Σ_j Σ_t (r^j - b^j) log p(w^j_t | a, w^j_<t)                         / Σ_j n_j
Hard attention: the caption's locations s^j_t were sampled too, so the trajectory's log-probability holds both, and
the same advantage reinforces what was said and where the model looked:
    loss = -Σ_j Σ_t (r^j - b^j) [log p(w^j_t | a, w^j_<t, s^j_≤t) + log α_{t, s^j_t}]  / Σ_j n_j
n_j counts the caption's words and its <end> (the end is a word of the reward too); the division by every sampled
token of the batch is the reference implementation's (ruotianluo/self-critical.pytorch, RewardCriterion:
`output = -input * reward * mask; output = sum(output) / sum(mask)`). The advantage is detached; nothing else is.
Of eq. 12 nothing stays: its moving-average baseline gives way to the per-image baselines above (the mean of the
other samples has lower variance than a running mean over all images), its entropy bonus is dropped (it pushes α
towards uniform, against a reward that pays for looking at what a word names), and semi-sampling is off (a
location term needs a sampled location). The gradient written out: docs/self-critical.md.
"""

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

from caption.errors import ConfigError, check_range
from caption.model.search import Sampled

SelfCriticalBaseline = Literal["greedy", "mean_of_others"]


@dataclass(frozen=True)
class SelfCriticalSettings:
    """Self-critical training after cross-entropy (`model.self_critical:` in a config; null: cross-entropy training).

    Args:
        samples: k, captions sampled per image (self-critical.pytorch: 5).
        baseline: "mean_of_others" (Luo 2020: each sample's baseline is the mean reward of the image's other samples)
            or "greedy" (Rennie et al. 2017: the reward of the greedy caption).
        max_length: words sampled at most per caption, <end> included (self-critical.pytorch: 20).
    """

    samples: int = 5                                   # ours, as self-critical.pytorch: train_sample_n 5
    baseline: SelfCriticalBaseline = "mean_of_others"  # ours, as self-critical.pytorch's "new SCST" (Luo 2020)
    max_length: int = 20                               # ours, as self-critical.pytorch: max_length 20

    def __post_init__(self) -> None:
        check_range("self_critical.samples", self.samples, low=1)
        check_range("self_critical.max_length", self.max_length, low=1)
        if self.baseline not in ("greedy", "mean_of_others"):
            raise ConfigError(f"model.self_critical.baseline must be greedy or mean_of_others, got {self.baseline!r}")
        if self.baseline == "mean_of_others" and self.samples < 2:
            raise ConfigError("model.self_critical.baseline mean_of_others needs model.self_critical.samples >= 2: "
                              "the other samples of an image are each sample's baseline")


def mean_of_others(rewards: Tensor, samples: int) -> Tensor:
    """b^j = (Σ_i r^i - r^j) / (k - 1) over the k samples of each image: rewards (B·k,) -> (B·k,)."""
    grouped = rewards.view(-1, samples)  # (B, k)
    return ((grouped.sum(dim=1, keepdim=True) - grouped) / (samples - 1)).view(-1)


@dataclass
class SelfCriticalTerms:
    """The self-critical loss and what explains it, each a scalar (`train/<name>` in the logs). The reward and its
    baseline are logged as `train/cider` and `train/cider_baseline`, not `train/reward` and `train/baseline`: those
    are hard attention's log-likelihood reward of eq. 12 and its moving average (`caption.model.objectives`)."""

    loss: Tensor
    cider: Tensor  # r, CIDEr-D of the sampled captions, mean
    cider_baseline: Tensor  # b, the baseline's CIDEr-D (the other samples' or the greedy caption's), mean
    advantage_std: Tensor  # standard deviation of r - b over the sampled captions
    advantage_positive: Tensor  # share of sampled captions with r > b (the ones made more likely)
    sample_length: Tensor  # n_j, tokens per sampled caption (<end> included), mean
    entropy: Tensor | None = None  # hard: H(α_t) summed over a caption's steps, mean (reported, not trained)

    def as_dict(self) -> dict[str, Tensor]:
        return {name: value for name, value in vars(self).items() if value is not None}


def self_critical_loss(sampled: Sampled, rewards: Tensor, baseline: Tensor) -> SelfCriticalTerms:
    """The loss above for B·k sampled captions, their rewards r (B·k,) and baselines b (B·k,)."""
    advantage = (rewards - baseline).detach().to(sampled.word_log_prob.dtype)  # r^j - b^j: (B·k,)
    log_prob = sampled.word_log_prob  # (B·k, T), zero after <end>
    if sampled.location_log_prob is not None:  # hard attention: where it looked was sampled too
        log_prob = log_prob + sampled.location_log_prob
    tokens = sampled.mask.sum()
    loss = -(advantage[:, None] * log_prob * sampled.mask).sum() / tokens.clamp(min=1)
    entropy = None if sampled.entropy is None else (sampled.entropy * sampled.mask).sum(dim=1).mean().detach()
    return SelfCriticalTerms(
        loss=loss,
        cider=rewards.mean(),
        cider_baseline=baseline.mean(),
        advantage_std=advantage.std() if advantage.numel() > 1 else advantage.new_zeros(()),
        advantage_positive=(advantage > 0).float().mean(),
        sample_length=tokens / sampled.mask.shape[0],
        entropy=entropy,
    )

