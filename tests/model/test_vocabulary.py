import json
import random

import pytest
from nltk.tokenize import TreebankWordTokenizer

from caption.io.outputs import write_text
from caption.model.vocabulary import Vocabulary, tokenize


def test_tokenize_lowercases_and_drops_punctuation():
    assert tokenize("A Large RED circle, left of the Square!") == [
        "a", "large", "red", "circle", "left", "of", "the", "square",
    ]
    assert tokenize('He said "hi" -- ... ?!') == ["he", "said", "hi"]
    assert tokenize("") == []


def test_tokenize_keeps_contractions_and_digits():
    assert tokenize("Don't count 3 dogs.") == ["do", "n't", "count", "3", "dogs"]


def test_tokenize_non_ascii():
    assert tokenize("Café NAÏVE — 日本語 😀") == ["café", "naïve", "日本語"]


def _captions():
    return [tokenize(c) for c in ["a red circle", "a blue circle", "a red square", "a dog"]]


def test_plain_captions_split_exactly_as_the_treebank_tokenizer_does():
    """The fast path for plain captions against the Treebank tokenizer itself, on random strings of the characters and
    words where the two could differ (commas before digits and commas, periods inside, its contractions)."""
    treebank = TreebankWordTokenizer()
    pieces = [*"ab1 ,.A", "cannot", "gonna", "wanna ", " can not", "gotta", "lemme", "gimme", "3,000", "st. "]
    rng = random.Random(0)
    for _ in range(50_000):
        text = "".join(rng.choices(pieces, k=rng.randint(0, 12)))
        expected = [token for token in treebank.tokenize(text.lower()) if any(ch.isalnum() for ch in token)]
        assert tokenize(text) == expected, text
    assert (tokenize("A man riding a wave, on top of a surfboard.")
            == "a man riding a wave on top of a surfboard".split())


def test_vocabulary_specials():
    vocab = Vocabulary.build(_captions())
    assert (Vocabulary.PAD, Vocabulary.START, Vocabulary.END, Vocabulary.UNK) == (0, 1, 2, 3)
    assert vocab.itos[:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    assert vocab.stoi["<unk>"] == Vocabulary.UNK


def test_build_orders_by_count_then_alphabetically():
    vocab = Vocabulary.build(_captions())
    # a:4, circle:2, red:2, then singletons alphabetically
    assert vocab.itos[4:] == ["a", "circle", "red", "blue", "dog", "square"]


def test_build_min_count_and_max_size():
    assert Vocabulary.build(_captions(), min_count=2).itos[4:] == ["a", "circle", "red"]
    vocab = Vocabulary.build(_captions(), max_size=2)
    assert vocab.itos[4:] == ["a", "circle"]
    assert len(vocab) == 6  # specials are not counted in max_size


def test_build_is_deterministic_under_reordering():
    captions = _captions() * 3
    shuffled = captions[:]
    random.Random(0).shuffle(shuffled)
    assert Vocabulary.build(captions) == Vocabulary.build(shuffled)


def test_build_ignores_special_token_names():
    vocab = Vocabulary.build([["<unk>", "<pad>", "cat"]])
    assert vocab.itos == ["<pad>", "<start>", "<end>", "<unk>", "cat"]


def test_encode_decode_round_trip():
    vocab = Vocabulary.build(_captions())
    tokens = tokenize("A red square")
    ids = vocab.encode(tokens)
    assert ids[0] == Vocabulary.START and ids[-1] == Vocabulary.END
    assert vocab.decode(ids) == tokens


def test_unknown_words_map_to_unk():
    vocab = Vocabulary.build(_captions())
    ids = vocab.encode(["a", "zebra"])
    assert ids == [Vocabulary.START, vocab.stoi["a"], Vocabulary.UNK, Vocabulary.END]
    assert vocab.decode(ids) == ["a", "<unk>"]


def test_decode_skips_pad_and_start_and_stops_at_end():
    vocab = Vocabulary.build(_captions())
    red, dog = vocab.stoi["red"], vocab.stoi["dog"]
    ids = [Vocabulary.START, Vocabulary.PAD, red, Vocabulary.END, dog, Vocabulary.PAD]
    assert vocab.decode(ids) == ["red"]


def test_constructor_validates():
    with pytest.raises(ValueError):
        Vocabulary(["cat", "dog"])
    with pytest.raises(ValueError):
        Vocabulary([*Vocabulary.SPECIALS, "cat", "cat"])


def test_list_round_trip():
    vocab = Vocabulary.build(_captions())
    words = vocab.to_list()
    assert type(words) is list and all(type(w) is str for w in words)
    assert Vocabulary.from_list(words) == vocab


def test_json_file_round_trip(tmp_path):
    vocab = Vocabulary.build([["café", "naïve", "a"]])
    path = tmp_path / "vocab.json"
    write_text(path, vocab.to_json())
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == {"words": vocab.itos}
    assert Vocabulary.from_json(text, origin=path) == vocab
    assert Vocabulary.from_json(text, origin=str(path)) == vocab


@pytest.mark.parametrize(
    "content",
    [
        "not json {",
        "[1, 2]",
        '{"itos": []}',
        '{"words": ["cat"]}',
        '{"words": ["<pad>", "<start>", "<end>", "<unk>", 3]}',
    ],
)
def test_malformed_json_names_its_file(tmp_path, content):
    path = tmp_path / "broken_vocab.json"
    with pytest.raises(ValueError, match="broken_vocab.json"):
        Vocabulary.from_json(content, origin=path)
