"""Self-critical training's estimator (`caption.model.self_critical`, `caption.model.search.sample`).

The loss is the reference implementation's line transcribed (self-critical.pytorch, RewardCriterion:
`output = -input * reward * mask; output = sum(output) / sum(mask)`, reward = r - b); its gradient raises the
expected reward, checked against exact enumeration: on a tiny decoder with two words, two steps and (hard attention)
two locations, every caption (and every location sequence) is enumerated, so E[r] = Σ_τ p(τ) r(τ) and its gradient
are exact; the mean-of-others estimator over many samples points the same way, and a small step along it raises E[r].
The reward of a step (`caption.training.self_critical`) is pycocoevalcap's CIDEr-D with <end> counted as a word.
"""

import itertools
import math

import numpy as np
import pytest
import torch
from kit.models import tiny_decoder
from pycocoevalcap.cider.cider import Cider

from caption.data.sources.records import ImageRecord
from caption.errors import ConfigError
from caption.model.decoding import DecodingSettings
from caption.model.search import Sampled, sample
from caption.model.self_critical import SelfCriticalSettings, mean_of_others, self_critical_loss
from caption.model.vocabulary import Vocabulary
from caption.training import self_critical as self_critical_stage

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


WORDS = [*Vocabulary.SPECIALS, "a", "b", "c", "d"]
REFERENCES = {10: ("a b c", "a b"), 11: ("b c d", "c d"), 12: ("a d", "d a b"), 13: ("c c a",)}  # image id: texts


def cider_d_of_texts(candidates: list[str], images: list[int]) -> np.ndarray:
    """pycocoevalcap's CIDEr-D of each candidate text against REFERENCES[image] with "<end>" appended to every
    reference, document frequencies from all of REFERENCES: one call per candidate slot (the k-th of each image),
    every image in each (an image without a k-th candidate gets an empty one, which changes no df)."""
    gts = {image: [f"{text} <end>" for text in texts] for image, texts in REFERENCES.items()}
    slot = [images[:index].count(image) for index, image in enumerate(images)]
    scores = np.zeros(len(candidates))
    for k in range(max(slot) + 1):
        chosen = [index for index in range(len(candidates)) if slot[index] == k]
        res = {image: [""] for image in gts} | {images[index]: [candidates[index]] for index in chosen}
        per_image = dict(zip(gts, Cider().compute_score(gts, res)[1], strict=True))
        scores[chosen] = [per_image[images[index]] for index in chosen]
    return scores


def test_the_reward_counts_each_captions_end_as_a_word_as_self_critical_pytorch_scores_it(monkeypatch):
    """A self-critical step's rewards, of the samples and of the greedy baseline, are CIDEr-D with <end> a word of
    each caption that emitted it and of every reference: self-critical.pytorch's array_to_str appends the end token
    to each. Checked against pycocoevalcap on those texts, on samples that stop early (their last n-grams end in
    <end>, as the references' do) and samples capped at max_length (no <end> to count); dropping <end> from the
    candidates scores them differently."""
    vocabulary = Vocabulary(WORDS)
    records = [ImageRecord(image_id=image, split="train", references=texts) for image, texts in REFERENCES.items()]
    stage = self_critical_stage.SelfCritical(SelfCriticalSettings(samples=5, baseline="greedy", max_length=3),
                                             decoding=DecodingSettings(), vocabulary=vocabulary)
    stage.build_reward(records, vocabulary)
    decoder = tiny_decoder("soft", vocab_size=len(WORDS), annotation_dim=D, seed=4, dropout=0.0).train()
    seen = {}  # what the step scored: its samples, their rewards, the baseline, the greedy captions
    loss, greedy = self_critical_stage.self_critical_loss, self_critical_stage.greedy

    def recording_loss(sampled, rewards, baseline):
        seen.update(sampled=sampled, rewards=rewards, baseline=baseline)
        return loss(sampled, rewards, baseline)

    def recording_greedy(*args, **kwargs):
        seen["greedy"] = greedy(*args, **kwargs)
        return seen["greedy"]

    monkeypatch.setattr(self_critical_stage, "self_critical_loss", recording_loss)
    monkeypatch.setattr(self_critical_stage, "greedy", recording_greedy)
    images = [12, 10, 11]
    torch.manual_seed(0)
    stage.step(decoder, torch.randn(len(images), L, D), torch.tensor(images))

    def texts(tokens: torch.Tensor, *, end: bool = True) -> list[str]:
        """Each caption's words and, where it emitted one, its <end> (`end`), as the scorer reads them."""
        return [" ".join(WORDS[w] for w in row if w != Vocabulary.PAD and (end or w != Vocabulary.END))
                for row in tokens.tolist()]

    sampled, sample_images = seen["sampled"], [image for image in images for _ in range(5)]
    ended = [Vocabulary.END in row for row in sampled.tokens.tolist()]
    assert any(ended) and not all(ended), "samples that end early and samples capped at max_length"
    expected = cider_d_of_texts(texts(sampled.tokens), sample_images)
    np.testing.assert_allclose(seen["rewards"].numpy(), expected, rtol=1e-6, atol=1e-6)
    assert expected.max() > 0 and not np.allclose(cider_d_of_texts(texts(sampled.tokens, end=False), sample_images),
                                                  expected, atol=1e-3)
    greedy_rewards = cider_d_of_texts(texts(seen["greedy"].tokens), images)  # each ends with its <end>
    np.testing.assert_allclose(seen["baseline"].numpy(), np.repeat(greedy_rewards, 5), rtol=1e-6, atol=1e-6)
    assert not np.allclose(cider_d_of_texts(texts(seen["greedy"].tokens, end=False), images), greedy_rewards,
                           atol=1e-3)
