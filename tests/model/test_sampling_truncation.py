"""Sampling at a temperature, cut to the top k or top p (`caption.model.constraints.truncated_logits`, used by
`caption.model.search.sample`), checked as the self-critical sampler is (tests/model/test_self_critical.py): on a tiny
decoder with two words and two steps every caption is enumerated, its probability under the truncated,
temperature-scaled softmax computed by hand, step by step; 20,000 draws must report exactly one caption's log q, never
draw a caption of probability 0, and each caption's share must lie within 4.5 standard errors of its probability."""

import itertools
import math

import pytest
import torch
from kit.models import tiny_decoder

from caption.model.constraints import truncated_logits
from caption.model.decoding import DecodingSettings
from caption.model.search import sample
from caption.model.vocabulary import Vocabulary

L, D, V = 2, 3, 6
ALLOWED = (Vocabulary.END, Vocabulary.UNK, 4, 5)  # what a step may draw (never <pad> or <start>)
MAX_LENGTH = 2
DRAWS = 20_000


def make_decoder():
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D, seed=5, embed_dim=4, hidden_dim=5,
                           attention_dim=4, dropout=0.0).double().eval()
    torch.manual_seed(1)
    return decoder, torch.randn(1, L, D, dtype=torch.double) * 2.0


def kept_by_hand(logits: list[float], *, temperature: float, top_k: int, top_p: float) -> dict[int, float]:
    """The distribution a step draws from, in plain Python: softmax of logit / temperature over ALLOWED, cut to the
    top_k likeliest, then to the fewest likeliest whose probability reaches top_p, renormalised."""
    scaled = {word: logits[word] / temperature for word in ALLOWED}
    ranked = sorted(scaled, key=scaled.get, reverse=True)
    if top_k:
        ranked = ranked[:top_k]
    total = sum(math.exp(scaled[word]) for word in ranked)
    kept, mass = [], 0.0
    for word in ranked:
        if mass >= top_p:
            break
        kept.append(word)
        mass += math.exp(scaled[word]) / total
    total = sum(math.exp(scaled[word]) for word in kept)
    return {word: math.exp(scaled[word]) / total for word in kept}


def exact_distribution(decoder, annotations, decoding: DecodingSettings) -> dict[tuple[int, ...], float]:
    """q(caption) for every caption of at most MAX_LENGTH words, <end> included, by teacher forcing."""
    settings = {"temperature": decoding.temperature, "top_k": decoding.top_k, "top_p": decoding.top_p}
    captions = [(Vocabulary.END,)] + list(itertools.product(ALLOWED[1:], ALLOWED))
    exact = {}
    for words in captions:
        forced = torch.tensor([[Vocabulary.START, *words]])
        with torch.no_grad():
            logits = decoder(annotations, forced).logits[0].tolist()  # (T, V): step t's logits
        probability = 1.0
        for step, word in enumerate(words):
            probability *= kept_by_hand(logits[step], **settings).get(word, 0.0)
        exact[words] = probability
    return exact


def worst_draw(decoder, annotations, decoding: DecodingSettings, *,
               drawn_with: DecodingSettings | None = None) -> float:
    """How far, in standard errors, the share of DRAWS sampled captions (`drawn_with`, by default `decoding`) lies
    from its exact probability under `decoding`, at worst; with `decoding`, each draw must report the exact log q of
    its caption and be a caption of probability > 0."""
    exact = exact_distribution(decoder, annotations, decoding)
    assert math.isclose(sum(exact.values()), 1.0, abs_tol=1e-9)
    torch.manual_seed(4)
    with torch.no_grad():
        sampled = sample(decoder, annotations, samples=DRAWS, max_length=MAX_LENGTH, decoding=drawn_with or decoding)
    counts = dict.fromkeys(exact, 0)
    for row, mask, log_q in zip(sampled.tokens.tolist(), sampled.mask, sampled.word_log_prob.sum(dim=1).tolist()):
        words = tuple(row[: int(mask.sum())])
        if drawn_with is None:
            assert exact[words] > 0, f"drew {words}, which the truncation cuts"
            assert log_q == pytest.approx(math.log(exact[words]), abs=1e-9)
        counts[words] += 1
    return max(abs(counts[words] / DRAWS - p) / math.sqrt(p * (1 - p) / DRAWS)
               for words, p in exact.items() if 0 < p < 1)


CUTS = [DecodingSettings(top_k=2), DecodingSettings(top_k=3, temperature=0.7), DecodingSettings(top_p=0.6),
        DecodingSettings(top_p=0.8, temperature=1.5), DecodingSettings(temperature=0.5)]


@pytest.mark.parametrize("decoding", CUTS, ids=lambda d: f"k{d.top_k}-p{d.top_p}-t{d.temperature}")
def test_sampling_draws_from_the_truncated_temperature_scaled_softmax(decoding):
    decoder, annotations = make_decoder()
    exact = exact_distribution(decoder, annotations, decoding)
    if decoding.top_k or decoding.top_p < 1:
        assert 0 in exact.values()  # the cut removes captions here
    assert worst_draw(decoder, annotations, decoding) < 4.5


def test_the_untruncated_sampler_fails_that_check():
    """Guards the test above: drawing from the model's distribution is told apart from a cut one and from one at
    another temperature."""
    decoder, annotations = make_decoder()
    assert worst_draw(decoder, annotations, DecodingSettings(temperature=0.5), drawn_with=DecodingSettings()) > 4.5
    exact = exact_distribution(decoder, annotations, DecodingSettings(top_p=0.8, temperature=1.5))
    torch.manual_seed(4)
    with torch.no_grad():
        sampled = sample(decoder, annotations, samples=DRAWS, max_length=MAX_LENGTH)
    drawn = {tuple(row[: int(mask.sum())]) for row, mask in zip(sampled.tokens.tolist(), sampled.mask)}
    assert any(exact[words] == 0 for words in drawn)


def test_truncation_by_hand():
    logits = torch.tensor([[float("-inf"), 0.0, math.log(4.0), math.log(3.0), math.log(2.0), math.log(1.0)]])
    # probabilities over the five finite words: 1/11, 4/11, 3/11, 2/11, 1/11
    kept = truncated_logits(logits, temperature=1.0, top_k=2, top_p=1.0) > float("-inf")
    assert torch.nonzero(kept[0]).flatten().tolist() == [2, 3]
    kept = truncated_logits(logits, temperature=1.0, top_k=0, top_p=0.6) > float("-inf")  # 4/11 < 0.6 <= 7/11
    assert torch.nonzero(kept[0]).flatten().tolist() == [2, 3]
    kept = truncated_logits(logits, temperature=1.0, top_k=0, top_p=0.3) > float("-inf")  # the likeliest alone
    assert torch.nonzero(kept[0]).flatten().tolist() == [2]
    assert torch.equal(truncated_logits(logits, temperature=2.0, top_k=0, top_p=1.0), logits / 2.0)
    assert truncated_logits(logits, temperature=1.0, top_k=0, top_p=1.0) is logits  # off: untouched
