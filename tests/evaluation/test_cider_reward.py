"""CiderD, the SCST reward: equal to pycocoevalcap's Cider caption by caption (on the built-in data's captions and on
COCO-like ones, perturbed as sampled captions are, with every edge case of cider_scorer.py), by hand on small cases,
per image in a batch, pad ids dropped anywhere."""

import math

import numpy as np
import pytest
import torch
from kit.lengths import coco_like_references, perturbed

from caption.data.synthetic.shapes import generate_shapes
from caption.evaluation.cider_reward import CiderD, pycocoevalcap_cider_d

END = 1  # the shapes test's <end>, appended to every caption as SCST's caller does


def padded(captions: list[list[int]], *, pad: int = 0, width: int | None = None) -> torch.Tensor:
    """(C, T) long, each caption followed by `pad`s."""
    width = max([len(c) for c in captions] + [1]) if width is None else width
    return torch.tensor([list(c) + [pad] * (width - len(c)) for c in captions], dtype=torch.long)


def assert_equals_pycocoevalcap(references, candidates, images, *, pad=0, width=None):
    ours = CiderD(references, pad=pad)(padded(candidates, pad=pad, width=width), torch.tensor(images))
    assert ours.dtype == torch.float64 and ours.shape == (len(candidates),)
    theirs = pycocoevalcap_cider_d(references, candidates, images, pad=pad)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-6)
    return ours


def edge_cases(caption: list[int], rng: np.random.Generator, *, vocabulary: int, other: list[int]) -> list[list[int]]:
    """Captions cider_scorer.py treats specially: empty, shorter than 2, 3 and 4 words, a word repeated past its count
    in any reference (clipping), far longer than any reference (the length penalty), words no reference holds."""
    return [[], caption[:1], caption[:2], caption[:3], [caption[0]] * 6, caption + other + caption,
            caption[:2] + [vocabulary + 1 + int(rng.integers(5))] + caption[2:], [vocabulary + 7] * 3]


def test_shapes_captions_equal_pycocoevalcap():
    """2,000 candidates, ten per image of the built-in data: perturbed references and every edge case."""
    _, records = generate_shapes(200, seed=3, num_objects=(1, 2))
    words = sorted({w for record in records for text in record.references for w in text.split()})
    ids = {w: i for i, w in enumerate(words, start=END + 1)}
    references = [[[ids[w] for w in text.split()] + [END] for text in record.references] for record in records]
    vocabulary, rng = END + len(words), np.random.default_rng(0)
    candidates, images = [], []
    for image, refs in enumerate(references):
        chosen = [perturbed(refs[int(rng.integers(len(refs)))], rng, vocabulary=vocabulary) for _ in range(10)]
        if image % 5 == 0:  # a fifth of the images get the edge cases in place of eight perturbed references
            chosen[2:] = edge_cases(refs[0], rng, vocabulary=vocabulary, other=references[image - 1][1])
        candidates += chosen
        images += [image] * len(chosen)
    assert len(candidates) == 2000
    scores = assert_equals_pycocoevalcap(references, candidates, images)
    assert scores.max() > 5  # many close to a reference: the comparison is not only of zeros


def test_coco_like_captions_equal_pycocoevalcap():
    """A 10,000-word vocabulary, COCO's lengths, 5 references per image but for a few (1, 3, 6, 7, a repeated one);
    images with no candidate, one, or eight."""
    counts = [5] * 300
    counts[:4] = [1, 3, 6, 7]
    references = coco_like_references(counts, vocabulary=10_000, seed=1)
    references[5][3] = references[5][1]  # a repeated reference counts twice in the mean, once in df
    references[6] = [references[7][0], *references[6][1:]]  # two images share a reference: df 2
    rng = np.random.default_rng(1)
    candidates, images = [], []
    for image, refs in enumerate(references):
        for _ in range([5, 0, 1, 8][image % 4]):
            candidates.append(perturbed(refs[int(rng.integers(len(refs)))], rng, vocabulary=10_000))
            images.append(image)
        if image % 40 == 1:  # images with no other candidate: eight slots in all
            chosen = edge_cases(refs[0], rng, vocabulary=10_000, other=references[image - 1][0])
            candidates += chosen
            images += [image] * len(chosen)
    assert_equals_pycocoevalcap(references, candidates, images, width=40)


def test_by_hand_one_reference_in_a_corpus_of_two():
    """Image 0's one reference "a b a", image 1's "b c" (N = 2, ref_len = log 2); idf = log 2 − log df."""
    a, b, c, d = 1, 2, 3, 4
    log2 = math.log(2)  # idf of what one image holds, or none (df = log max(1, 0) = 0); b is in both: idf 0
    reward = CiderD([[[a, b, a]], [[b, c]]])
    # "a b": unigrams hyp {a: log2, b: 0}, ref {a: 2 log2, b: 0}; bigrams hyp {ab: log2}, ref {ab: log2, ba: log2};
    # no 3- or 4-grams in the candidate (norm 0: val 0); lengths (bigrams) 1 and 2: delta −1
    val1 = min(log2, 2 * log2) * 2 * log2 / (log2 * 2 * log2)
    val2 = log2 * log2 / (log2 * math.sqrt(2) * log2)
    expected_ab = 10 * (val1 + val2 + 0 + 0) / 4 * math.exp(-1 / 72)
    # "a a a d": unigrams hyp {a: 3 log2, d: log2 (in no reference)}, ref {a: 2 log2, b: 0}: clipped to 2 log2;
    # bigrams {aa: 2 log2, ad: log2}, trigrams {aaa, aad}, 4-gram {aaad}: none in the reference; delta 3 − 2
    val1 = min(3 * log2, 2 * log2) * 2 * log2 / (math.sqrt(9 * log2**2 + log2**2) * 2 * log2)
    expected_aaad = 10 * val1 / 4 * math.exp(-1 / 72)
    # the reference itself: each val 1 but trigrams' (1) and 4-grams' (norm 0 on both sides: 0)
    expected_aba = 10 * 3 / 4
    scores = reward(padded([[a, b], [a, a, a, d], [a, b, a], [], [d]]), torch.tensor([0, 0, 0, 0, 0]))
    torch.testing.assert_close(scores, torch.tensor([expected_ab, expected_aaad, expected_aba, 0.0, 0.0],
                                                    dtype=torch.float64), rtol=0, atol=1e-12)
    assert_equals_pycocoevalcap([[[a, b, a]], [[b, c]]], [[a, b], [a, a, a, d], [a, b, a], [], [d]], [0] * 5)


def test_one_image_one_reference_scores_zero():
    """N = 1: ref_len = log 1 = 0 and every df ≥ log 1, so every tf-idf weight is 0, the reference itself included."""
    assert_equals_pycocoevalcap([[[1, 2, 3, 4]]], [[1, 2, 3, 4], [1, 2], [9]], [0, 0, 0])
    assert CiderD([[[1, 2, 3, 4]]])(padded([[1, 2, 3, 4]]), torch.tensor([0])).item() == 0.0


def test_each_candidate_is_scored_against_its_own_image():
    references = coco_like_references([5, 4, 5], vocabulary=50, seed=2)
    candidate = references[0][0][:4] + references[1][0][:4]
    reward = CiderD(references)
    together = reward(padded([candidate, candidate, candidate]), torch.tensor([0, 1, 2]))
    apart = [reward(padded([candidate]), torch.tensor([image])).item() for image in range(3)]
    assert together.tolist() == apart
    assert len(set(apart)) == 3 and min(apart[:2]) > 0
    assert_equals_pycocoevalcap(references, [candidate] * 3, [0, 1, 2])


def test_pad_ids_are_dropped_anywhere():
    """A pad id in the middle of a candidate or a reference is no word; any id can be the pad."""
    references = [[[5, 6, 7, 8], [5, 9, 7]], [[6, 6, 8]]]
    reward = CiderD(references, pad=3)
    with_pads = torch.tensor([[5, 3, 6, 3, 3, 7, 8], [3, 5, 9, 3, 7, 3, 3], [3] * 7])
    without = torch.tensor([[5, 6, 7, 8], [5, 9, 7, 3], [3, 3, 3, 3]])
    images = torch.tensor([0, 0, 1])
    assert reward(with_pads, images).tolist() == reward(without, images).tolist()
    padded_references = [[[5, 3, 6, 7, 3, 8], [3, 5, 9, 7]], [[6, 3, 6, 8, 3, 3]]]
    assert CiderD(padded_references, pad=3)(without, images).tolist() == reward(without, images).tolist()
    as_tensors = [[torch.tensor(ref) for ref in refs] for refs in padded_references]  # references may be tensors
    assert CiderD(as_tensors, pad=3)(without, images).tolist() == reward(without, images).tolist()
    assert_equals_pycocoevalcap(references, [[5, 6, 7, 8], [5, 9, 7], []], [0, 0, 1], pad=3)


def test_any_integer_is_a_word_id():
    """Ids need no known range: huge and negative ids, and ids no reference holds, are words like any other."""
    references = [[[10**15, -4, 2], [2, 2]], [[7, -4]], [[10**15]]]
    candidates = [[10**15, -4, 2], [-4, 10**15, 10**14], [10**14, 10**14, 2, 2], [7, -4, -4, -5]]
    assert_equals_pycocoevalcap(references, candidates, [0, 0, 0, 1])


def test_empty_batches_and_empty_references():
    reward = CiderD([[[1, 2]], [[]], [[2, 3]]])
    assert reward(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, dtype=torch.long)).shape == (0,)
    assert reward(torch.zeros(2, 0, dtype=torch.long), torch.tensor([0, 1])).tolist() == [0.0, 0.0]
    assert reward(padded([[1, 2], [1, 2]]), torch.tensor([1, 0])).tolist()[0] == 0.0  # an empty reference: norm 0
    everything_empty = CiderD([[[]], [[0, 0]]])  # no n-gram at all (pycocoevalcap cannot score this: max of no df)
    assert everything_empty(padded([[1, 2, 3], []]), torch.tensor([0, 1])).tolist() == [0.0, 0.0]


def test_bad_input_is_refused_with_one_line():
    with pytest.raises(ValueError, match="image 1 has none"):
        CiderD([[[1, 2]], []])
    reward = CiderD([[[1, 2]], [[2, 3]]])
    with pytest.raises(ValueError, match=r"image indices must be in \[0, 2\)"):
        reward(padded([[1, 2]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="candidates \\(C, T\\) and images \\(C,\\)"):
        reward(torch.tensor([1, 2]), torch.tensor([0, 1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu():
    references = coco_like_references([5] * 40, vocabulary=300, seed=3)
    rng = np.random.default_rng(3)
    candidates = [perturbed(references[i % 40][i % 5], rng, vocabulary=300) for i in range(200)]
    images = torch.arange(200) % 40
    reward = CiderD(references)
    on_cpu = reward(padded(candidates), images)
    on_cuda = reward(padded(candidates).cuda(), images.cuda())
    assert on_cuda.device.type == "cuda"
    torch.testing.assert_close(on_cuda.cpu(), on_cpu, rtol=0, atol=1e-12)
