"""Greedy and beam search against each other and against exhaustive search."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from kit.models import tiny_decoder

from caption.model.decoder import Decoder
from caption.model.search import beam_search, greedy
from caption.model.vocabulary import Vocabulary

L, D, V = 4, 6, 6  # words the model may emit: <end>, <unk>, 4, 5 (never <pad> or <start>)
EMITTABLE = [Vocabulary.END, Vocabulary.UNK, 4, 5]


def make_decoder(attention: str = "soft", seed: int = 0) -> Decoder:
    decoder = tiny_decoder(attention, vocab_size=V, annotation_dim=D, seed=seed, embed_dim=5, hidden_dim=7)
    with torch.no_grad():  # spread the output distribution so that greedy and exhaustive search disagree
        decoder.output_words.weight.mul_(3.0)
    return decoder.eval()


def sequence_log_prob(decoder: Decoder, annotations: torch.Tensor, words: tuple[int, ...]) -> float:
    """log p(words | a) by teacher forcing, the way generation scores it."""
    captions = torch.tensor([[Vocabulary.START, *words]])
    with torch.no_grad():
        log_probs = F.log_softmax(decoder(annotations, captions).logits, dim=-1)[0]  # (T, V)
    return sum(log_probs[t, w].item() for t, w in enumerate(words))


def all_hypotheses(max_length: int):
    """Every caption search can return: ends at its first <end>, or runs to the length cap."""
    for length in range(1, max_length + 1):
        for words in itertools.product(EMITTABLE, repeat=length):
            if Vocabulary.END in words[:-1]:
                continue
            if length < max_length and words[-1] != Vocabulary.END:
                continue
            yield words


def strip(tokens: torch.Tensor) -> tuple[int, ...]:
    return tuple(t for t in tokens.tolist() if t != Vocabulary.PAD)


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
    for result in (greedy(decoder, annotations, max_length=4), beam_search(decoder, annotations, beam_size=3, max_length=4)):
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
