"""Several captions per image: the k best beams, with their scores and attention, from beam search, `Captioner`
and `caption describe --predictions.num_captions k`; and `Captioner.plot`, the paper's figure in one call."""

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
from kit.figures import GRACE_HOPPER, word_axes
from kit.models import tiny_module
from kit.search import D, L, all_hypotheses, make_decoder, sequence_log_prob, strip
from torchvision.transforms.functional import to_tensor

from caption.cli import main
from caption.errors import ConfigError
from caption.inference import Captioner
from caption.model.search import beam_search
from caption.model.vocabulary import Vocabulary


@pytest.mark.parametrize("seed", range(3))
def test_the_n_best_of_a_wide_beam_are_those_of_exhaustive_search(seed):
    decoder = make_decoder(seed=seed)
    annotations = torch.randn(1, L, D)
    scored = {words: sequence_log_prob(decoder, annotations, words) for words in all_hypotheses(3)}
    expected = sorted(scored, key=scored.get, reverse=True)[:5]
    result = beam_search(decoder, annotations, beam_size=len(scored), max_length=3, num_best=5)
    assert [strip(row) for row in result.tokens] == expected
    torch.testing.assert_close(result.log_prob, torch.tensor([scored[words] for words in expected]), atol=1e-4,
                               rtol=0)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_each_of_the_n_best_carries_its_own_score_and_attention_and_the_first_is_the_beam_caption(length_penalty):
    decoder = make_decoder(seed=1)
    annotations = torch.randn(3, L, D)
    best = beam_search(decoder, annotations, beam_size=4, max_length=5, length_penalty=length_penalty)
    ranked = beam_search(decoder, annotations, beam_size=4, max_length=5, length_penalty=length_penalty, num_best=4)
    assert ranked.tokens.shape[0] == 3 * 4
    for image in range(3):
        rows = range(image * 4, image * 4 + 4)
        assert torch.equal(ranked.tokens[rows[0]], best.tokens[image]), "the first of the k is the beam caption"
        assert len({strip(ranked.tokens[row]) for row in rows}) == 4, "k different captions"
        lengths = torch.tensor([float(ranked.lengths[row]) for row in rows])
        ranking = torch.stack([ranked.log_prob[row] for row in rows]) / lengths ** length_penalty
        assert torch.all(ranking[:-1] >= ranking[1:]), "best first"
        for row in rows:  # score and α of each hypothesis, by teacher forcing its words
            words = strip(ranked.tokens[row])
            captions = torch.tensor([[Vocabulary.START, *words]])
            with torch.no_grad():
                forced = decoder(annotations[image:image + 1], captions)
            log_probs = F.log_softmax(forced.logits[0], dim=-1)
            assert ranked.log_prob[row].item() == pytest.approx(
                sum(log_probs[t, w].item() for t, w in enumerate(words)), abs=1e-4)
            torch.testing.assert_close(ranked.alpha[row, :len(words)], forced.alpha[0], atol=1e-5, rtol=0)


def test_more_captions_than_beams_is_refused():
    with pytest.raises(ValueError, match=r"num_captions must be between 1 and the beam size \(2\), got 3"):
        beam_search(make_decoder(), torch.randn(1, L, D), beam_size=2, max_length=4, num_best=3)


@pytest.mark.slow
def test_captioner_returns_the_k_best_and_plots_them(tiny_runs):
    captioner = Captioner.from_checkpoint(tiny_runs["soft"] / "checkpoints" / "last.ckpt", device="cpu")
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 64)]
    beam = captioner.module.settings.decoding.beam_size
    single = captioner(images)
    ranked = captioner(images, num_captions=beam)
    assert [len(captions) for captions in ranked] == [beam, beam]
    for one, several in zip(single, ranked):
        assert several[0].text == one.text and several[0].log_prob == pytest.approx(one.log_prob)
        assert all(c.alpha.shape == (len(c.words), one.alpha.shape[1]) for c in several)
    wider = captioner(images[0], num_captions=beam + 2)
    assert len(wider) == beam + 2, "the beam widens to k when k is larger"
    with pytest.raises(ConfigError, match="num_captions must be between 1 and the beam size"):
        captioner(images[0], beam_size=2, num_captions=3)

    figure = captioner.plot(GRACE_HOPPER)
    caption = captioner(GRACE_HOPPER)
    assert [ax.get_xlabel().split("\n")[0] for ax in word_axes(figure)] == caption.words
    assert figure._repr_png_().startswith(b"\x89PNG"), "a notebook shows the returned figure"
    several = captioner.plot(GRACE_HOPPER, num_captions=2)
    assert len(several.subfigs) == 2


@pytest.mark.slow
def test_describe_writes_the_k_best_with_their_scores(tiny_runs, tmp_path, capsys):
    out = tmp_path / "out"
    main(["describe", "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"), GRACE_HOPPER,
          "--predictions.num_captions", "3", "--predictions.out", str(out)])
    [entry] = json.loads((out / "captions.json").read_text())
    assert [item["figure"].rsplit("/", 1)[1] for item in entry["n_best"]] == [
        "grace_hopper_1.png", "grace_hopper_2.png", "grace_hopper_3.png"]
    assert all((out / f"grace_hopper_{rank}.png").is_file() for rank in (1, 2, 3))
    scores = [item["log_prob"] for item in entry["n_best"]]
    assert scores == sorted(scores, reverse=True)
    printed = capsys.readouterr().out
    assert f"  1. {entry['n_best'][0]['caption']}  (log p = {scores[0]:.2f})" in printed


def tiny_captioner() -> Captioner:
    """A Captioner of an untrained tiny model over 8 tokens: 6 possible first words (<pad> and <start> never are)."""
    torch.manual_seed(0)
    module = tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a", "red", "circle", "square"])
    return Captioner(module.model, transform=lambda image: to_tensor(image.resize((32, 32))),
                     normalization=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)))


def test_more_captions_than_the_search_holds_gives_each_hypothesis_once_and_no_impossible_one():
    captioner = tiny_captioner()
    image = torch.rand(3, 32, 32)
    one_word = captioner(image, num_captions=10, max_length=1)
    assert len(one_word) == 6, "every one-word caption, once: fewer than asked"
    assert len({caption.text for caption in one_word}) == 6
    assert all(math.isfinite(caption.log_prob) for caption in one_word)
    assert [caption.log_prob for caption in one_word] == sorted((c.log_prob for c in one_word), reverse=True)
    assert len(captioner(image, num_captions=10, max_length=3)) == 10, "a longer search fills the beam"


@pytest.mark.parametrize("num_captions", [0, -1, 1.5, True])
def test_a_num_captions_that_is_not_a_positive_integer_is_refused_by_name(num_captions):
    with pytest.raises(ValueError, match=rf"num_captions must be an integer >= 1 \(or None: one caption per image\), "
                                         rf"got {re.escape(repr(num_captions))}"):
        tiny_captioner()(torch.rand(3, 32, 32), num_captions=num_captions)
