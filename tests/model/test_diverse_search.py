"""Diverse beam search (`caption.model.diverse_search`): one group is beam search bit for bit; G groups keep the
beams a plain-Python reference of the grouped objective keeps, step by step, group by group, every candidate scored
(on kit.search's tiny decoder, whose next-word distribution is a fixed function of the image and the prefix); a strong
Hamming penalty sends the groups to different words; `generate` takes it from the decoding settings."""

import pytest
import torch
import torch.nn.functional as F
from kit.search import D, EMITTABLE, L, make_decoder, strip

from caption.errors import ConfigError
from caption.model.decoding import DecodingSettings
from caption.model.diverse_search import diverse_beam_search
from caption.model.search import beam_search, generate
from caption.model.vocabulary import Vocabulary


@pytest.mark.parametrize("attention", ["soft", "hard"])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("seed", range(3))
def test_one_group_is_beam_search_bit_for_bit(attention, length_penalty, seed):
    decoder = make_decoder(attention, seed=seed)
    annotations = torch.randn(4, L, D)
    plain = beam_search(decoder, annotations, beam_size=3, max_length=6, length_penalty=length_penalty, num_best=3)
    grouped = diverse_beam_search(decoder, annotations, beam_size=3, beam_groups=1, diversity_strength=0.5,
                                  max_length=6, length_penalty=length_penalty, num_best=3)
    for name in ("tokens", "log_prob", "alpha", "beta", "lengths", "location"):
        mine, theirs = getattr(grouped, name), getattr(plain, name)
        assert (mine is None and theirs is None) or torch.equal(mine, theirs), name


def next_word_log_probs(decoder, annotations, prefix: tuple[int, ...]) -> list[float]:
    """log p(w | prefix, a) for every word w, by teacher forcing the prefix (the search's log-softmax over V)."""
    captions = torch.tensor([[Vocabulary.START, *prefix]])
    with torch.no_grad():
        # a one-step caption: the forced prefix runs through the decoder, the last position predicts the next word
        logits = decoder(annotations, torch.cat([captions, captions[:, :1]], dim=1)).logits[0, -1]
    return F.log_softmax(logits, dim=-1).tolist()


def reference_diverse_search(decoder, annotations, *, beam_size: int, groups: int, strength: float, max_length: int):
    """Every group's beams by the grouped objective, candidate by candidate in plain Python: a beam is (words, running
    score with its penalties, log p, finished); at each step group g scores each of its beams' extensions by running
    score + log p(w) - strength × (how many beams of groups 0..g-1 chose w at this step; <pad> never counts), and
    keeps its beam_size / groups best. A finished beam's one extension is itself, at no cost."""
    width = beam_size // groups
    beams = [[((), 0.0, 0.0, False)] for _ in range(groups)]
    for _ in range(max_length):
        chosen_now: dict[int, int] = {}
        for group in range(groups):
            candidates = []
            for words, score, log_p, finished in beams[group]:
                if finished:
                    candidates.append(((*words, Vocabulary.PAD), score, log_p, True))
                    continue
                log_probs = next_word_log_probs(decoder, annotations, words)
                for word in EMITTABLE:
                    penalty = strength * chosen_now.get(word, 0)
                    candidates.append(((*words, word), score + log_probs[word] - penalty, log_p + log_probs[word],
                                       word == Vocabulary.END))
            beams[group] = sorted(candidates, key=lambda beam: -beam[1])[:width]
            for words, *_ in beams[group]:
                if words[-1] != Vocabulary.PAD:
                    chosen_now[words[-1]] = chosen_now.get(words[-1], 0) + 1
        if all(finished for group in beams for *_, finished in group):
            break
    return [(tuple(w for w in words if w != Vocabulary.PAD), log_p) for group in beams for words, _, log_p, _ in group]


@pytest.mark.parametrize(("beam_size", "groups", "strength"), [(4, 2, 0.7), (4, 4, 0.4), (6, 3, 2.0), (4, 2, 0.0)])
@pytest.mark.parametrize("seed", range(3))
def test_the_groups_keep_the_beams_of_the_grouped_objective(beam_size, groups, strength, seed):
    decoder = make_decoder(seed=seed)
    annotations = torch.randn(1, L, D)
    max_length = 4
    expected = reference_diverse_search(decoder, annotations, beam_size=beam_size, groups=groups, strength=strength,
                                        max_length=max_length)
    found = diverse_beam_search(decoder, annotations, beam_size=beam_size, beam_groups=groups,
                                diversity_strength=strength, max_length=max_length, num_best=beam_size)
    found_beams = sorted((strip(tokens), log_p) for tokens, log_p in zip(found.tokens, found.log_prob.tolist()))
    expected = sorted(expected)
    assert [words for words, _ in found_beams] == [words for words, _ in expected]
    for (_, mine), (_, theirs) in zip(found_beams, expected):
        assert mine == pytest.approx(theirs, abs=1e-4)
    assert found.log_prob.tolist() == sorted(found.log_prob.tolist(), reverse=True)  # the n best, best first


def test_the_objective_differs_from_independent_beams_here():
    """Guards the test above: on these decoders the penalty changes the beams kept (groups without it keep the same
    beams, each group a copy of one beam search of width k/G)."""
    differs = 0
    for seed in range(3):
        decoder = make_decoder(seed=seed)
        annotations = torch.randn(1, L, D)
        independent = reference_diverse_search(decoder, annotations, beam_size=4, groups=2, strength=0.0,
                                               max_length=4)
        assert independent[:2] == independent[2:]
        diverse = reference_diverse_search(decoder, annotations, beam_size=4, groups=2, strength=0.7, max_length=4)
        differs += sorted(diverse) != sorted(independent)
    assert differs > 0


def test_a_strong_penalty_starts_every_group_with_another_word():
    """Four groups of one beam, four words to start with: at strength 100 each group's first word is one no earlier
    group took; without diversity the four groups find the same caption."""
    decoder = make_decoder(seed=1)
    with torch.no_grad():
        decoder.output_words.bias[Vocabulary.END] = -5.0  # long enough captions to compare
    annotations = torch.randn(2, L, D)
    diverse = diverse_beam_search(decoder, annotations, beam_size=4, beam_groups=4, diversity_strength=100.0,
                                  max_length=3, num_best=4)
    same = diverse_beam_search(decoder, annotations, beam_size=4, beam_groups=4, diversity_strength=0.0,
                               max_length=3, num_best=4)
    for image in range(2):
        rows = range(4 * image, 4 * image + 4)
        assert sorted(int(diverse.tokens[row, 0]) for row in rows) == sorted(EMITTABLE)
        assert len({strip(same.tokens[row]) for row in rows}) == 1


def test_generate_searches_in_groups_from_the_decoding_settings():
    decoder = make_decoder(seed=2)
    annotations = torch.randn(3, L, D)
    decoding = DecodingSettings(beam_size=4, beam_groups=2, diversity_strength=0.7, max_caption_length=4)
    found = generate(decoder, annotations, decoding=decoding, num_captions=4)
    direct = diverse_beam_search(decoder, annotations, beam_size=4, beam_groups=2, diversity_strength=0.7,
                                 max_length=4, num_best=4)
    assert torch.equal(found.tokens, direct.tokens)
    greedy = generate(decoder, annotations, decoding=DecodingSettings(max_caption_length=4), beam_size=1)
    assert torch.equal(generate(decoder, annotations, decoding=decoding, beam_size=1).tokens, greedy.tokens)
    with pytest.raises(ConfigError, match=r"^model\.decoding\.beam_groups must divide the beam size \(3\)"):
        generate(decoder, annotations, decoding=decoding, beam_size=3)
