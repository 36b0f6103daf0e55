"""Greedy and beam search against each other and against exhaustive search."""

import pytest
import torch
from kit.search import D, L, all_hypotheses, make_decoder, sequence_log_prob, strip

from caption.model.search import beam_search, greedy
from caption.model.vocabulary import Vocabulary


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_beam_size_one_equals_greedy(attention):
    decoder = make_decoder(attention)
    annotations = torch.randn(5, L, D)
    g = greedy(decoder, annotations, max_length=6)
    b = beam_search(decoder, annotations, beam_size=1, max_length=6)
    assert torch.equal(g.tokens, b.tokens)
    torch.testing.assert_close(g.log_prob, b.log_prob)
    torch.testing.assert_close(g.alpha, b.alpha)
    torch.testing.assert_close(g.beta, b.beta)
    assert torch.equal(g.lengths, b.lengths)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_equals_exhaustive_search(seed, length_penalty):
    max_length = 3
    decoder = make_decoder(seed=seed)
    annotations = torch.randn(1, L, D)
    scored = {
        words: sequence_log_prob(decoder, annotations, words) / len(words) ** length_penalty
        for words in all_hypotheses(max_length)
    }
    best = max(scored, key=scored.get)
    result = beam_search(decoder, annotations, beam_size=len(scored), max_length=max_length,
                         length_penalty=length_penalty)
    assert strip(result.tokens[0]) == best
    assert result.log_prob[0].item() == pytest.approx(sequence_log_prob(decoder, annotations, best), abs=1e-4)


def test_greedy_is_not_always_optimal_here():
    """Guards the test above: on these decoders exhaustive search sometimes beats greedy."""
    beats = 0
    for seed in range(4):
        decoder = make_decoder(seed=seed)
        annotations = torch.randn(1, L, D)
        g = greedy(decoder, annotations, max_length=3)
        best = max(sequence_log_prob(decoder, annotations, w) for w in all_hypotheses(3))
        beats += best > g.log_prob[0].item() + 1e-6
    assert beats > 0


def test_batched_beam_search_equals_one_image_at_a_time():
    decoder = make_decoder()
    annotations = torch.randn(4, L, D)
    batched = beam_search(decoder, annotations, beam_size=3, max_length=5)
    for i in range(4):
        alone = beam_search(decoder, annotations[i : i + 1], beam_size=3, max_length=5)
        assert strip(alone.tokens[0]) == strip(batched.tokens[i])
        torch.testing.assert_close(alone.log_prob[0], batched.log_prob[i])
        n = int(alone.lengths[0])
        torch.testing.assert_close(alone.alpha[0, :n], batched.alpha[i, :n])


def test_no_hypothesis_ends_within_the_cap():
    decoder = make_decoder()
    with torch.no_grad():
        decoder.output_words.bias[Vocabulary.END] = -1e4  # <end> is (almost) impossible
    annotations = torch.randn(3, L, D)
    for result in (greedy(decoder, annotations, max_length=4),
                   beam_search(decoder, annotations, beam_size=3, max_length=4)):
        assert result.tokens.shape == (3, 4) and (result.lengths == 4).all()
        assert not (result.tokens == Vocabulary.END).any()
        assert result.alpha.shape == (3, 4, L) and torch.isfinite(result.log_prob).all()


def test_outputs_shapes_and_attention_rows():
    decoder = make_decoder("hard")
    result = beam_search(decoder, torch.randn(2, L, D), beam_size=3, max_length=5)
    T = result.tokens.shape[1]
    assert result.alpha.shape == (2, T, L) and result.beta.shape == (2, T) and result.location.shape == (2, T)
    torch.testing.assert_close(result.alpha.sum(-1), torch.ones(2, T))
    assert not ((result.tokens == Vocabulary.PAD) | (result.tokens == Vocabulary.START))[:, 0].any()
