"""CIDEr-D as a training reward: coco-caption's Cider (pycocoevalcap.cider) recomputed in integer-id space, batched
over every caption of a self-critical step, equal to pycocoevalcap's caption by caption (to float64 rounding).

Evaluation keeps calling pycocoevalcap (`caption.evaluation.metrics`); this is only the reward of self-critical
sequence training (Rennie et al., 2017), where pycocoevalcap's Python dictionaries would cost seconds a step.

The formula, with pycocoevalcap's names (cider_scorer.py). N images with references; for n = 1..4:
    document_frequency[g]  the number of images one of whose references holds the n-gram g
    ref_len                = log(N)
    df                     = log(max(1, document_frequency[g]))       (0 for an n-gram no reference holds)
    vec[n][g]              = term_freq(g) · (ref_len − df)            (counts2vec, for a candidate and each reference)
    norm[n]                = ‖vec[n]‖₂
    length                 = the number of bigrams, max(words − 1, 0) (counts2vec adds term_freq `if n == 1`, n being
                             len(g) − 1); delta only counts where both captions have words (else val is 0), and there
                             it is the difference in words
    delta                  = length_hyp − length_ref
    val[n]                 = Σ_g min(vec_hyp[n][g], vec_ref[n][g]) · vec_ref[n][g]   (clipped; g over the candidate's)
                             / (norm_hyp[n] · norm_ref[n])            (only where both norms are non-zero)
                             · exp(−delta² / (2σ²))                   (σ = 6)
    score                  = 10 · mean over n of (Σ over the image's references of val[n]) / len(refs)
Repeated references count once each in the mean and once in the image's document frequency, as there. N = 1 gives
ref_len = 0 and every score 0, as there.

Document frequencies and N come from the `references` given at init, as pycocoevalcap takes them from the references
of the captions it scores. For SCST, pass the training split's references: self-critical.pytorch's practice
(`--cached_tokens coco-train-idxs`, df from the 113,287 training images' references), whatever batch is scored.

What is vectorised how:
- Word ids become codes: a reference word's code is its rank among the references' distinct words (K₁ of them). An
  n-gram is (its (n−1)-gram's code, its last word's code), keyed `prefix · K₁ + word`; its code is the key's rank
  among the references' distinct n-gram keys (K_n of them). No base-(V+1) polynomial, whose 4-grams overflow int64
  past V ≈ 55,000: ids need no known range (any int64 is a word), and every int64 stays small. At init keys are below
  K_{n−1} · K₁ + K₁; per call a candidate's word or n-gram no reference holds gets a code past the table (K_n + its
  rank among the call's absent keys; an absent n-gram is keyed `−1 − (prefix · M + word)`, M above every word code of
  the call), so it keeps its own term frequency and norm (idf = ref_len) and never matches; the (caption, code) pairs
  are keyed `caption · (K_n + W + 1) + code` (W: the call's words). With random COCO-like captions of 113,287 images
  K_4 ≈ 4.5·10⁶, so a step of 25,000 captions of 20 words keeps every key below 10¹⁴, far from 2⁶³ ≈ 9.2·10¹⁸.
- At init (torch, on the CPU): each reference's term frequencies (torch.unique of `reference · K_n + code`), document
  frequencies (unique `image · K_n + code`, bincount), vec_ref, norm_ref and length_ref; and the entries: for each
  (image, n-gram) of the references, sorted by `image · K_n + code`, the slots of the image's references that hold it
  and their term frequencies (vec_ref = term_freq · idf, recomputed per call as at init).
- Per call, for each n (the one Python loop), all captions at once: the n-gram codes by searchsorted of the distinct
  keys into the table, term frequencies by torch.unique of the pair keys, vec_hyp and norm_hyp (index_add); the clipped
  products by searchsorted of `image · K_n + code` into the entries, each (caption, n-gram) expanded to the references
  of its image that hold it (repeat_interleave), index_add into (C, R) sums (R: the most references an image has).
  Then the norms and the length penalty on (C, R), the mean over each image's real references (the other slots
  masked), over n, × 10. The tables are copied to a device once, on the first call with captions there.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import torch
from pycocoevalcap.cider.cider import Cider
from torch import Tensor

N_GRAMS = 4  # n = 1..4, as coco-caption's Cider


def _flat_tokens(lengths: Tensor) -> tuple[Tensor, Tensor]:
    """For sequences of `lengths` laid end to end: each token's sequence and its position in it (W,), (W,)."""
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)  # (W,)
    starts = torch.cumsum(lengths, 0) - lengths  # (S,)
    return seq, torch.arange(len(seq), device=lengths.device) - starts[seq]


def _codes(keys: Tensor, table: Tensor) -> Tensor:
    """Each key's index in the sorted `table` where it is there, else len(table) + its rank among the absent keys.
    The distinct keys are looked up, in order (a sorted search is a cache-friendly one)."""
    distinct, inverse = torch.unique(keys, return_inverse=True)  # (U,) sorted, (W,)
    index = torch.searchsorted(table, distinct)  # (U,)
    found = table[index.clamp(max=len(table) - 1)] == distinct if len(table) else torch.zeros_like(distinct) == 1
    absent = torch.cumsum(~found, 0) - 1  # (U,)
    return torch.where(found, index, len(table) + absent)[inverse]


def _ngram_keys(prefix: Tensor, word: Tensor, prefixes: int, words: int, *, bound: int) -> Tensor:
    """The key of (prefix code, word code): prefix · words + word where both are the references' (codes below
    `prefixes`, `words`), else −1 − (prefix · bound + word), `bound` above every word code."""
    known = (prefix < prefixes) & (word < words)
    return torch.where(known, prefix * words + word, -1 - (prefix * bound + word))


def _term_frequencies(seq: Tensor, codes: Tensor, stride: int) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct (sequence, n-gram code) pairs of the tokens and their counts, sorted: (P,) each."""
    pairs, counts = torch.unique(seq * stride + codes, return_counts=True)
    return pairs // stride, pairs % stride, counts


class CiderD:
    """CIDEr-D (coco-caption's Cider: tf-idf n-grams 1..4, clipped, the σ = 6 length penalty, ×10) of token-id
    captions against each image's references, batched over every caption of a step."""

    def __init__(self, references: Sequence[Sequence[Sequence[int]]], *, pad: int = 0, sigma: float = 6.0):
        """references[i]: image i's reference captions, each a sequence of word ids; every id but `pad` is a word
        (append <end> to each to count it). Document frequencies and log N come from these, once."""
        counts = [len(refs) for refs in references]
        if not counts or min(counts) == 0:
            where = f"image {counts.index(0)} has none" if counts else "no images given"
            raise ValueError(f"CiderD needs at least one reference caption per image: {where}")
        refs = [ref.tolist() if isinstance(ref, Tensor) else ref for ref in chain.from_iterable(references)]
        raw_lengths = torch.tensor([len(ref) for ref in refs])  # (R,)
        raw = torch.from_numpy(np.fromiter(chain.from_iterable(refs), dtype=np.int64, count=int(raw_lengths.sum())))
        keep = raw != pad
        self.pad, self.sigma, self.images = pad, sigma, len(counts)
        self.ref_len = float(np.log(float(self.images)))
        image_refs = torch.tensor(counts)  # (N,)
        image_start = torch.cumsum(image_refs, 0) - image_refs  # (N,)
        ref_image = torch.repeat_interleave(torch.arange(self.images), image_refs)  # (R,)
        lengths = torch.bincount(_flat_tokens(raw_lengths)[0][keep], minlength=len(refs))  # (R,) words but pad
        seq, pos = _flat_tokens(lengths)
        words = raw[keep]  # (W,)
        tables = {"image_refs": image_refs, "image_start": image_start,
                  "ref_length": (lengths - 1).clamp(min=0).double(), "ref_norm": torch.zeros(len(refs), N_GRAMS,
                                                                                             dtype=torch.float64)}
        self.sizes: list[int] = []  # K_n: the references' distinct n-grams
        room, codes = lengths[seq] - pos, torch.full_like(words, -1)  # (W,): words from each token on; its code
        for n in range(1, N_GRAMS + 1):
            start = (room >= n).nonzero().squeeze(1)  # (W_n,) the tokens that start an n-gram
            if n == 1:
                table, gram = torch.unique(words, return_inverse=True)  # (K_1,), (W,)
                codes_1 = gram
            else:  # every reference n-gram is known: its key is prefix · K_1 + word
                keys = _ngram_keys(codes[start], codes_1[start + n - 1], self.sizes[-1], self.sizes[0], bound=1)
                table, gram = torch.unique(keys, return_inverse=True)  # (K_n,), (W_n,)
            codes[start] = gram
            size = len(table)
            self.sizes.append(size)
            ref, gram, tf = _term_frequencies(seq[start], gram, size)  # (P,)
            image_gram = ref_image[ref] * size + gram  # (P,)
            frequency = torch.bincount(torch.unique(image_gram) % size, minlength=size)  # (K_n,) document_frequency
            idf = self.ref_len - torch.log(frequency.double().clamp(min=1.0))  # (K_n,) ref_len − df
            vec = tf.double() * idf[gram]  # (P,) vec_ref
            tables["ref_norm"][:, n - 1].index_add_(0, ref, vec**2)
            order = torch.argsort(image_gram)  # the entries: (image, n-gram) → each reference holding it
            entry_keys, entry_counts = torch.unique_consecutive(image_gram[order], return_counts=True)  # (P_n,)
            tables |= {f"table{n}": table, f"idf{n}": idf, f"entry_keys{n}": entry_keys,
                       f"entry_start{n}": torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), entry_counts]), 0),
                       f"entry_tf{n}": tf[order].int(),
                       f"entry_slot{n}": (ref - image_start[ref_image[ref]])[order].int()}
        tables["ref_norm"] = tables["ref_norm"].sqrt()
        self.slots = max(counts)  # R: the most references an image has
        self._tables: dict[torch.device, dict[str, Tensor]] = {torch.device("cpu"): tables}

    def _on(self, device: torch.device) -> dict[str, Tensor]:
        """The references' tables on `device` (copied there once)."""
        if device not in self._tables:
            self._tables[device] = {name: t.to(device) for name, t in self._tables[torch.device("cpu")].items()}
        return self._tables[device]

    def __call__(self, candidates: Tensor, images: Tensor) -> Tensor:
        """candidates (C, T) long word ids (`pad` ids dropped wherever they are), images (C,) long: the index in
        `references` of each candidate's image. Each candidate's CIDEr-D, (C,) float64 on the candidates' device."""
        if candidates.dim() != 2 or images.shape != candidates.shape[:1]:
            raise ValueError(f"CiderD takes candidates (C, T) and images (C,), got {tuple(candidates.shape)} and "
                             f"{tuple(images.shape)}")
        if len(images) and not (0 <= int(images.min()) and int(images.max()) < self.images):
            raise ValueError(f"CiderD: image indices must be in [0, {self.images}), the references given at init")
        t = self._on(candidates.device)
        device, count = candidates.device, len(candidates)
        mask = candidates != self.pad  # (C, T)
        words, lengths = candidates[mask].long(), mask.sum(1)  # (W,), (C,)
        seq, pos = _flat_tokens(lengths)
        images = images.to(device)
        refs = t["image_start"][images, None] + torch.arange(self.slots, device=device)  # (C, R) reference indices
        real = torch.arange(self.slots, device=device) < t["image_refs"][images, None]  # (C, R)
        refs = refs.clamp(max=len(t["ref_length"]) - 1)
        dot = torch.zeros(count * self.slots, N_GRAMS, dtype=torch.float64, device=device)  # (C·R, 4)
        norm_hyp = torch.zeros(count, N_GRAMS, dtype=torch.float64, device=device)  # (C, 4)
        bound = self.sizes[0] + len(words) + 1  # above every word code of this call
        room, codes = lengths[seq] - pos, torch.full_like(words, -1)  # (W,): words from each token on; its code
        for n in range(1, N_GRAMS + 1):
            start = (room >= n).nonzero().squeeze(1)  # (W_n,) the tokens that start an n-gram
            size = self.sizes[n - 1]
            if n == 1:
                gram = codes_1 = _codes(words, t["table1"])  # (W,)
            else:
                keys = _ngram_keys(codes[start], codes_1[start + n - 1], self.sizes[n - 2], self.sizes[0], bound=bound)
                gram = _codes(keys, t[f"table{n}"])  # (W_n,)
            codes[start] = gram
            stride = size + len(words) + 1  # above every n-gram code of this call
            candidate, gram, tf = _term_frequencies(seq[start], gram, stride)  # (P,)
            known = gram < size
            idf = torch.where(known, t[f"idf{n}"][gram.clamp(max=max(size - 1, 0))] if size else 0.0, self.ref_len)
            vec = tf.double() * idf  # (P,) vec_hyp
            norm_hyp[:, n - 1].index_add_(0, candidate, vec**2)
            # the clipped products: each known (candidate, n-gram) with each reference of its image that holds it
            known = known.nonzero().squeeze(1)
            candidate, gram, vec = candidate[known], gram[known], vec[known]  # (P',)
            query = images[candidate] * size + gram
            entry_keys = t[f"entry_keys{n}"]
            index = torch.searchsorted(entry_keys, query).clamp(max=max(len(entry_keys) - 1, 0))
            held = (entry_keys[index] == query if len(entry_keys) else torch.zeros_like(query, dtype=torch.bool))
            held = held.nonzero().squeeze(1)
            index, candidate, gram, vec = index[held], candidate[held], gram[held], vec[held]  # (Q,)
            first, spans = t[f"entry_start{n}"][index], t[f"entry_start{n}"][index + 1] - t[f"entry_start{n}"][index]
            which = torch.repeat_interleave(torch.arange(len(index), device=device), spans)  # (E,)
            offset = torch.arange(len(which), device=device) - (torch.cumsum(spans, 0) - spans)[which]  # (E,)
            entry = first[which] + offset  # (E,)
            vec_ref = t[f"entry_tf{n}"][entry].double() * t[f"idf{n}"][gram[which]]  # (E,) as at init
            clipped = torch.minimum(vec[which], vec_ref) * vec_ref  # (E,)
            dot[:, n - 1].index_add_(0, candidate[which] * self.slots + t[f"entry_slot{n}"][entry], clipped)
        dot = dot.view(count, self.slots, N_GRAMS)  # (C, R, 4)
        norms = norm_hyp.sqrt()[:, None, :] * t["ref_norm"][refs]  # (C, R, 4)
        both = (norm_hyp[:, None, :] != 0) & (t["ref_norm"][refs] != 0)
        val = torch.where(both, dot / torch.where(both, norms, 1.0), dot)  # (C, R, 4)
        delta = (lengths - 1).clamp(min=0).double()[:, None] - t["ref_length"][refs]  # (C, R)
        val = val * torch.exp(-(delta**2) / (2 * self.sigma**2))[..., None]
        per_reference = (val.mean(-1) * real).sum(1)  # (C,)
        return 10.0 * per_reference / t["image_refs"][images].double()


def pycocoevalcap_cider_d(references: Sequence[Sequence[Sequence[int]]], candidates: Sequence[Sequence[int]],
                          images: Sequence[int], *, pad: int = 0) -> np.ndarray:
    """The same scores by pycocoevalcap itself, slowly (what the tests and benchmarks/reward.py compare CiderD to).

    Ids become words "w<id>". pycocoevalcap scores one candidate per image, with df and N from the references of all
    the images it is given; so it is called once per candidate slot (the k-th candidate of each image), each call with
    every image of `references` (an image without a k-th candidate gets an empty one, which changes nothing else:
    df comes from the references alone). Every call thus sees the same df and N as CiderD. Giving each candidate its
    own image key with a copy of its references would not: N and each df would count the copies, so log N − log df
    would survive only where every image has as many candidates, and even then not for an n-gram no reference holds
    (idf log N)."""
    def text(caption: Sequence[int]) -> str:
        return " ".join(f"w{w}" for w in caption if w != pad)

    images = [int(image) for image in images]
    candidates = [[int(w) for w in caption] for caption in candidates]
    references = [[[int(w) for w in ref] for ref in refs] for refs in references]

    gts = {i: [text(ref) for ref in refs] for i, refs in enumerate(references)}
    slot_of, seen = [], [0] * len(gts)
    for image in images:
        slot_of.append(seen[image])
        seen[image] += 1
    scores = np.zeros(len(slot_of))
    for slot in range(max(seen, default=0)):
        chosen = [c for c, s in enumerate(slot_of) if s == slot]
        res = {i: [""] for i in gts} | {images[c]: [text(candidates[c])] for c in chosen}
        _, per_image = Cider().compute_score(gts, res)
        scores[chosen] = per_image[[images[c] for c in chosen]]
    return scores
