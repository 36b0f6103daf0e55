"""The hard-attention gradient estimator (eq. 12) is unbiased for the Jensen lower bound (eq. 9).

On a tiny decoder with L = 3 locations and T = 2 words, every location sequence s can be
enumerated (3² = 9), so the exact gradient of L_s = Σ_s p(s|a) log p(y|s,a) is computable. The mean
of many single-sample Monte Carlo estimates (λ_r = 1, reward = log p(y|s̃,a), λ_e = 0) must match
it, for all parameters and for f_att's alone (which only the REINFORCE term reaches).

Any constant baseline b keeps the estimate unbiased; b only changes its variance. We use
b = E_s[log p(y|s,a)] (computed by enumeration), the value the moving-average baseline tracks:
with it, 50,000 samples give a relative error of about 1% (measured over seeds: 0.3-1.6% for
f_att), against a tolerance of 4%. (With b off by 3 nats, f_att's error is still ~10% at 240,000
samples: that is what the baseline is for.) Float64 keeps the mean of 50,000 small terms exact.
Dropping the REINFORCE term (λ_r = 0) leaves f_att without gradient and the whole estimate
biased, so the same comparison then fails.

The estimators beyond the paper must stay unbiased too, and are held to the same tolerance: the per-step
credit (reward-to-go, with the moving average scaled to the words still to come), the leave-one-out
baseline over N = 4 samples of a caption, and the learned baseline b(h_{t-1}) (untrained here: random weights large
enough that b moves with the state by more than the reward does, and a bias near the mean reward-to-go; its
value changes the variance, not the mean). Each has a negative control: the same check fails for a baseline that
sees the sample it is subtracted from.
"""

import itertools

import pytest
import torch
from kit.models import tiny_decoder

from caption.model.decoder import Decoder
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    caption_log_likelihood,
    hard_attention_loss,
)

L, D, V = 3, 4, 6
SAMPLES = 50_000
TOLERANCE = 0.04


def make_problem():
    decoder = tiny_decoder("hard", vocab_size=V, annotation_dim=D, seed=3, embed_dim=4, hidden_dim=5, attention_dim=4,
                           dropout=0.0, semi_sampling=0.0).train()
    with torch.no_grad():  # sharpen attention so the locations matter
        decoder.scorer.score.weight.mul_(4.0)
    annotations = torch.randn(1, L, D) * 2.0
    captions = torch.tensor([[1, 4, 2]])  # <start> w <end>: T = 2 steps
    return decoder.double(), annotations.double(), captions


def flat_grad(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for p in module.parameters()])


def scorer_slice(decoder: Decoder) -> slice:
    """Where f_att's parameters (reached only through log p(s|a)) sit in the flat gradient."""
    offset = 0
    for name, parameter in decoder.named_parameters():
        if name.startswith("scorer."):
            break
        offset += parameter.numel()
    return slice(offset, offset + sum(p.numel() for p in decoder.scorer.parameters()))


def exact_lower_bound(decoder, annotations, captions) -> tuple[torch.Tensor, torch.Tensor]:
    """L_s = Σ_s p(s|a) log p(y|s,a) over all 9 location sequences, and its gradient."""
    decoder.zero_grad()
    targets, mask = captions[:, 1:], torch.ones(1, 2, dtype=torch.double)
    bound = torch.zeros((), dtype=torch.double)
    for sequence in itertools.product(range(L), repeat=2):
        steps = iter(sequence)
        decoder.attention.sample = lambda alpha: torch.tensor([next(steps)])  # force s = sequence
        out = decoder(annotations, captions)
        log_p_y = caption_log_likelihood(out.logits, targets, mask)[0]
        log_p_s = out.log_alpha_location.sum()
        bound = bound + log_p_s.exp() * log_p_y  # p(s|a) log p(y|s,a)
    del decoder.attention.sample
    bound.backward()
    return bound.detach(), flat_grad(decoder)


def monte_carlo_gradient(decoder, annotations, captions, *, baseline: torch.Tensor,
                         reinforce_weight: float) -> torch.Tensor:
    decoder.zero_grad()
    torch.manual_seed(0)
    annotations, captions = annotations.expand(SAMPLES, -1, -1), captions.expand(SAMPLES, -1)
    targets = captions[:, 1:]
    out = decoder(annotations, captions)
    terms = hard_attention_loss(
        out, targets, torch.ones_like(targets, dtype=torch.double), baseline=baseline,
        reinforce_weight=reinforce_weight, entropy_weight=0.0, reward="sum", credit="caption",
    )
    terms.loss.backward()  # the mean over samples of minus the eq. 12 estimate
    return -flat_grad(decoder)


@pytest.mark.slow
def test_monte_carlo_gradient_is_unbiased():
    decoder, annotations, captions = make_problem()
    expected_reward, exact = exact_lower_bound(decoder, annotations, captions)  # E_s[log p(y|s,a)] = L_s
    estimate = monte_carlo_gradient(decoder, annotations, captions, baseline=expected_reward, reinforce_weight=1.0)
    relative_error = (estimate - exact).norm() / exact.norm()
    assert relative_error < TOLERANCE, f"relative error {relative_error:.3f}"

    attention = scorer_slice(decoder)
    attention_error = (estimate[attention] - exact[attention]).norm() / exact[attention].norm()
    assert attention_error < TOLERANCE, f"f_att relative error {attention_error:.3f}"

    biased = monte_carlo_gradient(decoder, annotations, captions, baseline=expected_reward, reinforce_weight=0.0)
    assert biased[attention].abs().max() == 0, "without REINFORCE, f_att gets no gradient from the samples"
    assert (biased - exact).norm() / exact.norm() > 0.1


def spread_out(baseline: torch.nn.Module, expected_reward: torch.Tensor) -> None:
    """A learned baseline b(h_{t-1}) that moves with the state (b_2 with s_1 by more than the reward-to-go R_2 does,
    whose standard deviation is 0.085 here), around the mean reward-to-go of the two steps (share 1 and 1/2)."""
    with torch.no_grad():
        baseline.layer.weight.mul_(2.0)
        baseline.layer.bias.fill_(0.75 * expected_reward)


@pytest.mark.slow
@pytest.mark.parametrize(("credit", "baseline"), [("step", "moving_average"), ("caption", "leave_one_out"),
                                                  ("step", "leave_one_out"), ("step", "learned")])
def test_estimators_beyond_the_paper_are_unbiased(credit, baseline):
    decoder, annotations, captions = make_problem()
    expected_reward, exact = exact_lower_bound(decoder, annotations, captions)
    settings = HardObjectiveSettings(reinforce_weight=1.0, entropy_weight=0.0, reward="sum", credit=credit,
                                     baseline=baseline, samples=4)
    objective = HardAttentionObjective(settings, hidden_dim=5).double()
    if baseline == "moving_average":
        objective.baseline.value.fill_(expected_reward)
    if baseline == "learned":
        spread_out(objective.baseline, expected_reward)
    decoder.zero_grad()
    torch.manual_seed(0)
    annotations, captions = annotations.expand(SAMPLES, -1, -1), captions.expand(SAMPLES, -1)
    targets = captions[:, 1:]
    output = decoder(annotations, captions)
    objective(output, targets, torch.ones_like(targets, dtype=torch.double)).loss.backward()
    if baseline == "learned":  # b_2 = b(h_1) moves with s_1 by about as much as the reward-to-go R_2 does
        values = objective.baseline(None, hidden=output.hidden, share=None)[:, 1].detach()
        assert values.std() > 0.1, "the learned baseline is nearly constant"
    estimate = -flat_grad(decoder)
    attention = scorer_slice(decoder)
    for part, name in ((slice(None), "all"), (attention, "f_att")):
        error = (estimate[part] - exact[part]).norm() / exact[part].norm()
        assert error < TOLERANCE, f"{credit}/{baseline}: {name} relative error {error:.3f}"


class MeanWithItself(torch.nn.Module):
    """A wrong leave-one-out: the mean over all N samples, the sample's own reward included."""

    def forward(self, rewards, *, hidden, share):
        grouped = rewards.view(-1, 4, rewards.shape[-1])
        return grouped.mean(dim=1, keepdim=True).expand_as(grouped).reshape_as(rewards)


@pytest.mark.slow
def test_a_baseline_that_sees_its_own_sample_is_caught():
    """The check above can fail: a baseline that includes the sample's own reward shrinks every advantage by
    (N - 1)/N, so f_att's gradient comes out about 25% short."""
    decoder, annotations, captions = make_problem()
    _, exact = exact_lower_bound(decoder, annotations, captions)
    decoder.zero_grad()
    torch.manual_seed(0)
    annotations, captions = annotations.expand(SAMPLES, -1, -1), captions.expand(SAMPLES, -1)
    targets = captions[:, 1:]
    hard_attention_loss(decoder(annotations, captions), targets, torch.ones_like(targets, dtype=torch.double),
                        baseline=MeanWithItself(), reinforce_weight=1.0, entropy_weight=0.0, reward="sum",
                        credit="step").loss.backward()
    attention = scorer_slice(decoder)
    estimate = -flat_grad(decoder)[attention]
    assert (estimate - exact[attention]).norm() / exact[attention].norm() > 0.15


class SeesItsSample(torch.nn.Module):
    """A wrong learned baseline: b(h_{t-1}) plus half the sample's own reward-to-go."""

    def __init__(self, learned: torch.nn.Module):
        super().__init__()
        self.learned = learned

    def forward(self, rewards, *, hidden, share):
        return self.learned(rewards, hidden=hidden, share=share) + 0.5 * rewards


@pytest.mark.slow
def test_a_learned_baseline_that_sees_its_sample_is_caught():
    """The learned baseline's check can fail: with half of each sample's own reward in b, every advantage shrinks by
    half and f_att's gradient comes out far short."""
    decoder, annotations, captions = make_problem()
    expected_reward, exact = exact_lower_bound(decoder, annotations, captions)
    objective = HardAttentionObjective(HardObjectiveSettings(baseline="learned"), hidden_dim=5).double()
    spread_out(objective.baseline, expected_reward)
    decoder.zero_grad()
    torch.manual_seed(0)
    annotations, captions = annotations.expand(SAMPLES, -1, -1), captions.expand(SAMPLES, -1)
    targets = captions[:, 1:]
    hard_attention_loss(decoder(annotations, captions), targets, torch.ones_like(targets, dtype=torch.double),
                        baseline=SeesItsSample(objective.baseline), reinforce_weight=1.0, entropy_weight=0.0,
                        reward="sum", credit="step").loss.backward()
    attention = scorer_slice(decoder)
    estimate = -flat_grad(decoder)[attention]
    assert (estimate - exact[attention]).norm() / exact[attention].norm() > 0.3


def test_the_learned_baselines_regression_stays_off_the_decoder():
    """b(h_{t-1}) learns from (R_t - b_t)² alone: the decoder's gradient is the one it gets with b held constant
    at the same values (were h_{t-1} not detached, the regression would pull the LSTM's states toward the rewards)."""
    decoder, annotations, captions = make_problem()
    objective = HardAttentionObjective(HardObjectiveSettings(baseline="learned", reward="sum", credit="step"),
                                       hidden_dim=5).double()
    with torch.no_grad():
        objective.baseline.layer.weight.mul_(20.0)
    annotations, captions = annotations.expand(64, -1, -1), captions.expand(64, -1)
    targets, mask = captions[:, 1:], torch.ones(64, 2, dtype=torch.double)
    torch.manual_seed(0)
    output = decoder(annotations, captions)
    learned = objective(output, targets, mask)
    assert learned.advantage_square > 0, "the regression has something to learn"
    gradients = torch.autograd.grad(learned.loss, list(decoder.parameters()), retain_graph=True, allow_unused=True)
    held = objective.baseline(None, hidden=output.hidden, share=None).detach()
    weights = {"reinforce_weight": objective.reinforce_weight, "entropy_weight": objective.entropy_weight}
    constant = hard_attention_loss(output, targets, mask, baseline=held, reward="sum", credit="step", **weights)
    expected = torch.autograd.grad(constant.loss, list(decoder.parameters()), retain_graph=True, allow_unused=True)
    assert all(same_gradient(got, want) for got, want in zip(gradients, expected))

    class Attached(torch.nn.Module):  # negative control: the same baseline on h_{t-1} not detached
        def forward(self, rewards, *, hidden, share):
            return objective.baseline.layer(hidden).squeeze(-1)

    leaking = hard_attention_loss(output, targets, mask, baseline=Attached(), reward="sum", credit="step", **weights)
    leaked = torch.autograd.grad(leaking.loss, list(decoder.parameters()), allow_unused=True)
    assert not all(same_gradient(got, want) for got, want in zip(leaked, expected))


def same_gradient(got: torch.Tensor | None, want: torch.Tensor | None) -> bool:
    if got is None or want is None:
        return all(g is None or g.abs().max() == 0 for g in (got, want))
    return torch.allclose(got, want)
