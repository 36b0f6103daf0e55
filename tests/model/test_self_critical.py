"""Self-critical training's estimator (`caption.model.self_critical`, `caption.model.search.sample`).

The loss is the reference implementation's line transcribed (self-critical.pytorch, RewardCriterion:
`output = -input * reward * mask; output = sum(output) / sum(mask)`, reward = r - b); its gradient raises the
expected reward, checked against exact enumeration: on a tiny decoder with two words, two steps and (hard attention)
two locations, every caption (and every location sequence) is enumerated, so E[r] = Σ_τ p(τ) r(τ) and its gradient
are exact; the mean-of-others estimator over many samples points the same way, and a small step along it raises E[r].
"""

import itertools
import math

import pytest
import torch
from kit.models import tiny_decoder

from caption.errors import ConfigError
from caption.model.search import Sampled, sample
from caption.model.self_critical import SelfCriticalSettings, mean_of_others, self_critical_loss
from caption.model.vocabulary import Vocabulary

L, D, V = 2, 3, 6  # two locations; the specials and two words, 4 and 5
ALLOWED = (Vocabulary.END, Vocabulary.UNK, 4, 5)  # what a caption's step may draw (never <pad> or <start>)
MAX_LENGTH = 2


def reward_of(words: list[int]) -> float:
    """Any fixed reward of the words: here word 4 first pays most, word 5 anywhere a little, <end> at once nothing."""
    return 1.0 * (words[:1] == [4]) + 0.3 * (5 in words)


def test_mean_of_others_leaves_each_sample_out_of_its_own_baseline():
    rewards = torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0, 30.0])  # two images, k = 3 samples each
    assert torch.equal(mean_of_others(rewards, 3), torch.tensor([2.5, 2.0, 1.5, 25.0, 20.0, 15.0]))
    # the baseline of sample j does not move with r^j: its advantage is unbiased
    rewards.requires_grad_(True)
    baseline = mean_of_others(rewards, 3)
    assert torch.autograd.grad(baseline[0], rewards)[0].tolist() == [0.0, 0.5, 0.5, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("hard", [False, True])
def test_the_loss_is_the_reference_reward_criterion_with_locations_added_for_hard_attention(hard):
    torch.manual_seed(0)
    word_log_prob = torch.rand(3, 4).neg().requires_grad_(True)
    location_log_prob = torch.rand(3, 4).neg().requires_grad_(True) if hard else None
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])  # words and <end>; padding after
    sampled = Sampled(tokens=torch.ones(3, 4, dtype=torch.long), mask=mask, word_log_prob=word_log_prob * mask,
                      location_log_prob=None if not hard else location_log_prob * mask,
                      entropy=torch.ones(3, 4) if hard else None, alpha=torch.full((3, 4, L), 0.5))
    rewards, baseline = torch.tensor([0.9, 0.2, 0.4]), torch.tensor([0.3, 0.65, 0.55], requires_grad=True)
    terms = self_critical_loss(sampled, rewards, baseline)
    # the reference: input = log-probabilities (B, T), reward = r - b per token, mask with the <end> counted
    log_prob = word_log_prob + (location_log_prob if hard else 0)
    reward = (rewards - baseline.detach())[:, None].expand(3, 4)
    expected = torch.sum(-log_prob * reward * mask) / torch.sum(mask)
    assert torch.allclose(terms.loss, expected)
    terms.loss.backward()
    assert baseline.grad is None, "the advantage is detached"
    assert torch.allclose(word_log_prob.grad, -(rewards - baseline.detach())[:, None] * mask / mask.sum())
    if hard:  # the same advantage reinforces where the caption looked
        assert torch.allclose(location_log_prob.grad, word_log_prob.grad)
    advantage = rewards - baseline.detach()
    assert torch.isclose(terms.advantage_positive, torch.tensor(1 / 3))
    assert torch.isclose(terms.advantage_std, advantage.std())
    assert torch.isclose(terms.sample_length, torch.tensor(8 / 3))
    assert torch.isclose(terms.cider, rewards.mean()) and torch.isclose(terms.cider_baseline, baseline.mean())
    assert (terms.entropy is not None) == hard
    assert not {"reward", "baseline"} & set(terms.as_dict()), "train/reward is hard attention's log-likelihood"


def test_settings_refuse_what_cannot_work():
    with pytest.raises(ConfigError, match="samples >= 2"):
        SelfCriticalSettings(samples=1)
    assert SelfCriticalSettings(samples=1, baseline="greedy").samples == 1
    with pytest.raises(ConfigError, match="greedy or mean_of_others"):
        SelfCriticalSettings(baseline="moving_average")
    with pytest.raises(ConfigError, match="max_length"):
        SelfCriticalSettings(max_length=0)


def scorer_slice(decoder) -> slice:
    """Where f_att's parameters sit in the flat gradient."""
    sizes = [(name, parameter.numel()) for name, parameter in decoder.named_parameters()]
    start = sum(size for name, size in itertools.takewhile(lambda item: not item[0].startswith("scorer."), sizes))
    return slice(start, start + sum(size for name, size in sizes if name.startswith("scorer.")))


def make_decoder(kind: str):
    decoder = tiny_decoder(kind, vocab_size=V, annotation_dim=D, seed=5, embed_dim=4, hidden_dim=5, attention_dim=4,
                           dropout=0.0, semi_sampling=0.0).double().train()
    if kind == "hard":
        with torch.no_grad():  # sharpen attention so where it looks changes what it says
            decoder.scorer.score.weight.mul_(3.0)
    torch.manual_seed(1)
    return decoder, torch.randn(1, L, D, dtype=torch.double) * 2.0


def trajectories(kind: str):
    """Every caption of at most MAX_LENGTH steps (<end> included when drawn), with every location sequence."""
    captions = [[Vocabulary.END]] + [[first, second] for first in ALLOWED[1:] for second in ALLOWED]
    for words in captions:
        for locations in itertools.product(range(L), repeat=len(words)) if kind == "hard" else [()]:
            yield words, locations


def trajectory_log_prob(decoder, annotations, words, locations):
    """log p(τ): Σ_t log p(w_t | ...) over the allowed words, plus Σ_t log α_{t,s_t} for hard attention, stepping
    the decoder with the words (and locations) forced."""
    state, projected = decoder.init_state(annotations), decoder.project_annotations(annotations)
    forced = iter(locations)
    if locations:
        decoder.attention.sample = lambda alpha: torch.tensor([next(forced)])
    previous, total = Vocabulary.START, torch.zeros((), dtype=torch.double)
    for word in words:
        embedded, gates = decoder.word_gates(torch.tensor([previous]))
        out = decoder.step(gates, state, annotations, projected)
        logits = decoder.output_logits(embedded, out.state.h, out.context)[0]
        total = total + torch.log_softmax(logits[list(ALLOWED)], dim=0)[ALLOWED.index(word)]
        if locations:
            total = total + out.log_alpha_location[0]
        state, previous = out.state, word
    if locations:
        del decoder.attention.sample
    return total


def expected_reward(decoder, annotations, kind):
    return sum(trajectory_log_prob(decoder, annotations, words, locations).exp() * reward_of(words)
               for words, locations in trajectories(kind))


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_probabilities_of_every_trajectory_sum_to_one(kind):
    decoder, annotations = make_decoder(kind)
    with torch.no_grad():
        total = sum(trajectory_log_prob(decoder, annotations, words, locations).exp()
                    for words, locations in trajectories(kind))
    assert math.isclose(float(total), 1.0, abs_tol=1e-9)


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_the_self_critical_gradient_raises_the_expected_reward(kind):
    decoder, annotations = make_decoder(kind)
    exact = expected_reward(decoder, annotations, kind)
    exact_gradient = torch.autograd.grad(exact, list(decoder.parameters()), allow_unused=True)
    exact_gradient = torch.cat([g.flatten() if g is not None else torch.zeros(p.numel(), dtype=torch.double)
                                for g, p in zip(exact_gradient, decoder.parameters())])
    torch.manual_seed(2)
    samples = 20_000
    sampled = sample(decoder, annotations, samples=samples, max_length=MAX_LENGTH)  # one image, k = 20,000
    rewards = torch.tensor([reward_of(row[mask > 0].tolist()) for row, mask in zip(sampled.tokens, sampled.mask)],
                           dtype=torch.double)
    self_critical_loss(sampled, rewards, mean_of_others(rewards, samples)).loss.backward()
    descent = -torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), dtype=torch.double)
                          for p in decoder.parameters()])
    cosine = torch.nn.functional.cosine_similarity(descent, exact_gradient, dim=0)
    assert cosine > 0.9, float(cosine)  # the estimate points where E[r] rises (not exactly: / Σ n_j, sampling noise)
    if kind == "hard":  # f_att's share: only the location term reaches it (a_{s_t} passes no gradient to α)
        scorer = scorer_slice(decoder)
        assert descent[scorer].abs().sum() > 0
        assert torch.nn.functional.cosine_similarity(descent[scorer], exact_gradient[scorer], dim=0) > 0.9
    with torch.no_grad():  # and a small step along it raises E[r]
        for parameter in decoder.parameters():
            if parameter.grad is not None:
                parameter.sub_(0.05 * parameter.grad)
        assert expected_reward(decoder, annotations, kind) > exact


def test_a_sample_stops_at_its_end_and_its_log_probabilities_are_the_decoders():
    decoder, annotations = make_decoder("soft")
    torch.manual_seed(3)
    sampled = sample(decoder, annotations.expand(4, L, D), samples=3, max_length=5)  # 4 images x 3 samples
    assert sampled.tokens.shape[0] == 12 and sampled.location_log_prob is None
    for row, mask, log_prob in zip(sampled.tokens, sampled.mask, sampled.word_log_prob):
        length = int(mask.sum())
        words = row[:length].tolist()
        assert Vocabulary.PAD not in words and Vocabulary.START not in words
        assert all(token == Vocabulary.PAD for token in row[length:].tolist())
        assert Vocabulary.END not in words[:-1]  # nothing after <end>; capped captions have none
        assert torch.isclose(log_prob.sum(), trajectory_log_prob(decoder, annotations, words, ()))  # forced


def worst_draw(decoder, annotations, kind: str, draws: int = 20_000) -> float:
    """How far, in standard errors, the share of `draws` sampled captions (with their locations) of the likeliest-off
    trajectory lies from the probability the sampler reports for it; every draw must report the exact log p(τ) of
    the trajectory it drew (keyed by that value)."""
    with torch.no_grad():
        exact: dict[float, float] = {}
        for words, locations in trajectories(kind):
            log_prob = float(trajectory_log_prob(decoder, annotations, words, locations))
            exact[round(log_prob, 9)] = exact.get(round(log_prob, 9), 0.0) + math.exp(log_prob)
        torch.manual_seed(4)
        sampled = sample(decoder, annotations, samples=draws, max_length=MAX_LENGTH)
    reported = sampled.word_log_prob.sum(dim=1)
    if sampled.location_log_prob is not None:
        reported = reported + sampled.location_log_prob.sum(dim=1)
    counts: dict[float, int] = {}
    for value in reported.tolist():
        assert round(value, 9) in exact, f"a draw reports log p = {value}, no trajectory's"
        counts[round(value, 9)] = counts.get(round(value, 9), 0) + 1
    return max(abs(counts.get(key, 0) / draws - p) / math.sqrt(p * (1 - p) / draws) for key, p in exact.items())


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_sampling_draws_from_the_distribution_whose_log_probabilities_it_reports(kind, monkeypatch):
    """Self-critical training differentiates the log-probabilities `sample` reports: drawn from another distribution
    (a temperature or a mask on the draw alone) the estimator is biased. Every trajectory's share of 20,000 draws
    lies within 4.5 standard errors of its exact probability; a draw at temperature 0.7 does not."""
    decoder, annotations = make_decoder(kind)
    assert worst_draw(decoder, annotations, kind) < 4.5
    multinomial = torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda probs, *args, **kwargs: multinomial(probs ** (1 / 0.7), *args,
                                                                                          **kwargs))
    assert worst_draw(decoder, annotations, kind) > 4.5
