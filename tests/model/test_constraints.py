"""The blocking rules (`caption.model.constraints`) by hand, then as properties of every search's captions on random
decoders (greedy, beam, diverse beam, sampling), each guarded by the same decoders breaking the rule without it; and
every new decoding setting's bad values refused in one line naming it."""

import pytest
import torch
from kit.models import tiny_decoder

from caption.errors import ConfigError
from caption.model.constraints import (
    BAD_ENDINGS,
    WordConstraints,
    bad_ending_words,
    last_words,
    repeated_ngram_words,
)
from caption.model.decoding import DecodingSettings
from caption.model.diverse_search import diverse_beam_search
from caption.model.search import beam_search, greedy, sample
from caption.model.vocabulary import Vocabulary

WORDS = [*Vocabulary.SPECIALS, "a", "the", "of", "red", "circle", "square"]
V, L, D = len(WORDS), 3, 4
VOCABULARY = Vocabulary(WORDS)
A, THE, OF, RED, CIRCLE, SQUARE = range(4, 10)
MAX_LENGTH = 9


def banned_words(mask: torch.Tensor) -> list[list[int]]:
    return [torch.nonzero(row).flatten().tolist() for row in mask]


def test_each_rule_by_hand():
    prefix = torch.tensor([[RED, CIRCLE, RED], [RED, CIRCLE, SQUARE], [A, A, A]])
    assert banned_words(repeated_ngram_words(prefix, n=2, vocabulary_size=V)) == [[CIRCLE], [], [A]]
    assert banned_words(repeated_ngram_words(prefix, n=1, vocabulary_size=V)) == [[RED, CIRCLE], [RED, CIRCLE, SQUARE],
                                                                                  [A]]
    assert banned_words(repeated_ngram_words(prefix, n=3, vocabulary_size=V)) == [[], [], [A]]
    assert banned_words(repeated_ngram_words(prefix, n=4, vocabulary_size=V)) == [[], [], []]  # no 4-gram yet
    longer = torch.tensor([[RED, CIRCLE, OF, A, RED, CIRCLE]])
    assert banned_words(repeated_ngram_words(longer, n=3, vocabulary_size=V)) == [[OF]]
    assert banned_words(last_words(prefix, vocabulary_size=V)) == [[RED], [SQUARE], [A]]
    assert banned_words(last_words(prefix[:, :0], vocabulary_size=V)) == [[], [], []]
    bad = torch.tensor([A, THE, OF])
    ending = torch.tensor([[RED, A], [RED, CIRCLE]])
    assert banned_words(bad_ending_words(ending, bad=bad, vocabulary_size=V, last_step=False)) == [[Vocabulary.END],
                                                                                                 []]
    assert banned_words(bad_ending_words(ending, bad=bad, vocabulary_size=V, last_step=True)) == [
        [Vocabulary.END, A, THE, OF], [A, THE, OF]]


def test_the_rules_come_from_the_decoding_settings_and_none_is_set_by_default():
    assert not WordConstraints.of(DecodingSettings(), VOCABULARY).active
    rules = WordConstraints.of(DecodingSettings(block_bad_endings=True, no_repeat_ngram_size=3), VOCABULARY)
    assert rules.bad_ending_ids == (A, THE, OF) and rules.no_repeat_ngram_size == 3  # BAD_ENDINGS in the vocabulary
    assert {"a", "an", "the", "of", "to", "with"} <= set(BAD_ENDINGS)


def test_a_row_the_rules_leave_without_a_word_may_end():
    """Every word used (n = 1): only <end> is left; used and after "a" too: nothing is, so <end> is allowed again;
    a row with words left keeps its <end> forbidden after "a"."""
    scores = torch.zeros(3, V)
    scores[:, [Vocabulary.PAD, Vocabulary.START]] = float("-inf")
    prefix = torch.tensor([[Vocabulary.UNK, A, THE, OF, RED, CIRCLE, SQUARE],
                           [Vocabulary.UNK, THE, OF, RED, CIRCLE, SQUARE, A],
                           [Vocabulary.UNK, Vocabulary.UNK, Vocabulary.UNK, Vocabulary.UNK, Vocabulary.UNK, RED, A]])
    masked = WordConstraints(no_repeat_ngram_size=1, bad_ending_ids=(A,)).apply(scores, prefix, last_step=False)
    assert banned_words(masked > float("-inf")) == [[Vocabulary.END], [Vocabulary.END], [THE, OF, CIRCLE, SQUARE]]


def decoder_and_annotations(seed: int, **biases: float):
    """A random decoder over WORDS, peaked (weights × 3) and with `biases` added to some words' logits (by name)."""
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D, seed=seed, dropout=0.0).eval()
    with torch.no_grad():
        decoder.output_words.weight.mul_(3.0)
        for word, bias in biases.items():
            decoder.output_words.bias[VOCABULARY.stoi[word]] += bias
    torch.manual_seed(seed)
    return decoder, torch.randn(3, L, D)


def captions(decoder, annotations, constraints: WordConstraints) -> list[list[int]]:
    """Every search's captions (words, <end> included) under `constraints`: greedy, beam, diverse beam, 4 samples."""
    found = [greedy(decoder, annotations, max_length=MAX_LENGTH, constraints=constraints),
             beam_search(decoder, annotations, beam_size=3, max_length=MAX_LENGTH, num_best=3,
                         constraints=constraints),
             diverse_beam_search(decoder, annotations, beam_size=4, beam_groups=2, diversity_strength=1.0,
                                 max_length=MAX_LENGTH, num_best=4, constraints=constraints)]
    with torch.no_grad():
        found.append(sample(decoder, annotations, samples=4, max_length=MAX_LENGTH, constraints=constraints))
    return [[word for word in row if word != Vocabulary.PAD] for result in found for row in result.tokens.tolist()]


def repeats_an_ngram(words: list[int], n: int) -> bool:
    ngrams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return len(set(ngrams)) < len(ngrams)


SEEDS = range(6)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_caption_holds_a_repeated_ngram(n):
    broken = 0
    for seed in SEEDS:
        decoder, annotations = decoder_and_annotations(seed, **{"<end>": -3.0})
        for words in captions(decoder, annotations, WordConstraints(no_repeat_ngram_size=n)):
            assert not repeats_an_ngram(words, n), (seed, words)
        broken += sum(repeats_an_ngram(words, n) for words in captions(decoder, annotations, WordConstraints()))
    assert broken > 0  # the same decoders repeat without the rule


def test_no_caption_holds_a_word_twice_in_a_row():
    broken = 0
    for seed in SEEDS:
        decoder, annotations = decoder_and_annotations(seed, **{"<end>": -3.0})
        for words in captions(decoder, annotations, WordConstraints(no_immediate_repeat=True)):
            assert all(first != second for first, second in zip(words, words[1:])), (seed, words)
        broken += sum(any(first == second for first, second in zip(words, words[1:]))
                      for words in captions(decoder, annotations, WordConstraints()))
    assert broken > 0


def last_word(words: list[int]) -> int | None:
    """The caption's last word before its <end> (or at the length cap)."""
    words = words[:-1] if words and words[-1] == Vocabulary.END else words
    return words[-1] if words else None


def test_no_caption_ends_on_a_listed_word():
    rules = WordConstraints.of(DecodingSettings(block_bad_endings=True), VOCABULARY)
    broken = 0
    for seed in SEEDS:
        decoder, annotations = decoder_and_annotations(seed, a=1.5, the=1.5, of=1.5)
        for words in captions(decoder, annotations, rules):
            assert last_word(words) not in rules.bad_ending_ids, (seed, words)
        broken += sum(last_word(words) in rules.bad_ending_ids
                      for words in captions(decoder, annotations, WordConstraints()))
    assert broken > 0


def test_no_caption_holds_the_unknown_word():
    rules = WordConstraints.of(DecodingSettings(suppress_unknown=True), VOCABULARY)
    broken = 0
    for seed in SEEDS:
        decoder, annotations = decoder_and_annotations(seed, **{"<unk>": 2.0})
        assert all(Vocabulary.UNK not in words for words in captions(decoder, annotations, rules))
        broken += sum(Vocabulary.UNK in words for words in captions(decoder, annotations, WordConstraints()))
    assert broken > 0


def test_a_search_out_of_words_ends_its_captions():
    """No repeated word (n = 1), <end> all but impossible, more steps than words: each caption uses every word
    once at most, then ends; no score is NaN."""
    decoder, annotations = decoder_and_annotations(0, **{"<end>": -30.0})
    for words in captions(decoder, annotations, WordConstraints(no_repeat_ngram_size=1)):
        assert len(set(words)) == len(words) and len(words) <= V - 1
    result = beam_search(decoder, annotations, beam_size=3, max_length=MAX_LENGTH,
                         constraints=WordConstraints(no_repeat_ngram_size=1))
    assert torch.isfinite(result.log_prob).all()


@pytest.mark.parametrize(("field", "value"), [
    ("beam_groups", 0), ("beam_groups", 2), ("diversity_strength", -0.5), ("diversity_strength", float("nan")),
    ("no_repeat_ngram_size", -1), ("no_repeat_ngram_size", 1.5), ("no_immediate_repeat", "yes"),
    ("block_bad_endings", 1), ("suppress_unknown", None), ("top_k", -3), ("top_p", 0.0), ("top_p", 1.5),
    ("top_p", float("nan")), ("temperature", 0.0), ("temperature", -1.0), ("temperature", float("inf")),
])
def test_a_bad_setting_is_refused_in_one_line_naming_it(field, value):
    with pytest.raises(ConfigError) as error:
        DecodingSettings(beam_size=5, **{field: value})
    assert str(error.value).startswith(f"model.decoding.{field} ") and "\n" not in str(error.value)


def test_the_bad_endings_are_self_critical_pytorchs_list():
    # ruotianluo/self-critical.pytorch, captioning/utils/misc.py, transcribed whole:
    # bad_endings = ['a','an','the','in','for','at','of','with','before','after','on','upon','near','to','is',
    #                'are','am']
    theirs = ['a', 'an', 'the', 'in', 'for', 'at', 'of', 'with', 'before', 'after', 'on', 'upon', 'near', 'to', 'is',
              'are', 'am']
    assert list(BAD_ENDINGS) == theirs
