"""What the next word may be: the blocking rules every search applies (greedy, beam, diverse beam and sampling), and
sampling's truncation of the word distribution (temperature, top-k, top-p).

A rule looks at the words so far, prefix (R, t) for R rows at step t (<start> left out), and says which next words
are forbidden, (R, V) True where forbidden; `WordConstraints.apply` sets their scores to -inf:

    no_repeat_ngram_size n   a word that would complete an n-gram the prefix already holds (transformers'
                             `no_repeat_ngram_size`)
    no_immediate_repeat      the prefix's last word (self-critical.pytorch's `decoding_constraint`)
    block_bad_endings        <end> right after a word of BAD_ENDINGS (self-critical.pytorch's `remove_bad_endings`);
                             at the last step, when the caption is cut after its word, those words themselves
    suppress_unknown         <unk> (self-critical.pytorch's `suppress_UNK`)

A row the rules would leave without any word may end: <end> is allowed again there (a tiny vocabulary under
no_repeat_ngram_size 1 runs out of words). Greedy and beam search mask the model's log p(y_t) without renormalising
(the caption's reported log p stays the model's, as in transformers and self-critical.pytorch); sampling masks the
logits, so that it draws from, and reports the log-probabilities of, the renormalised distribution.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from caption.model.decoding import DecodingSettings
from caption.model.vocabulary import Vocabulary

# self-critical.pytorch (ruotianluo), captioning/utils/misc.py `bad_endings`: words a caption should not end on
BAD_ENDINGS = ("a", "an", "the", "in", "for", "at", "of", "with", "before", "after", "on", "upon", "near", "to",
               "is", "are", "am")
NEVER = float("-inf")


def repeated_ngram_words(prefix: Tensor, *, n: int, vocabulary_size: int) -> Tensor:
    """(R, V) True for each word w such that the prefix's last n-1 words followed by w is an n-gram the prefix
    (R, t) already holds."""
    R, t = prefix.shape
    banned = torch.zeros(R, vocabulary_size, dtype=torch.bool, device=prefix.device)  # (R, V)
    if t < n:
        return banned
    windows = prefix.unfold(1, n, 1)  # every n-gram so far: (R, t-n+1, n)
    tail = prefix[:, t - n + 1:]  # the last n-1 words (R, n-1)
    matches = (windows[:, :, : n - 1] == tail[:, None, :]).all(dim=-1)  # n-gram starts as the tail does (R, t-n+1)
    counts = torch.zeros(R, vocabulary_size, device=prefix.device)  # (R, V)
    counts.scatter_add_(1, windows[:, :, n - 1], matches.float())  # each match's last word
    return counts > 0


def last_words(prefix: Tensor, *, vocabulary_size: int) -> Tensor:
    """(R, V) True for the prefix's last word (no word twice in a row)."""
    R, t = prefix.shape
    banned = torch.zeros(R, vocabulary_size, dtype=torch.bool, device=prefix.device)  # (R, V)
    if t:
        banned[torch.arange(R, device=prefix.device), prefix[:, -1]] = True
    return banned


def bad_ending_words(prefix: Tensor, *, bad: Tensor, vocabulary_size: int, last_step: bool) -> Tensor:
    """(R, V) True for <end> after a word of `bad` (ids, (N,)), and at the last step for the words of `bad`
    themselves (the caption is cut after them)."""
    R, t = prefix.shape
    banned = torch.zeros(R, vocabulary_size, dtype=torch.bool, device=prefix.device)  # (R, V)
    if t:
        banned[:, Vocabulary.END] = torch.isin(prefix[:, -1], bad)
    if last_step:
        banned[:, bad] = True
    return banned


@dataclass(frozen=True)
class WordConstraints:
    """The blocking rules of a decoding (`of`); none set: `apply` is never called and the search is today's.

    Args:
        no_repeat_ngram_size: n > 0: no n-gram twice.
        no_immediate_repeat: no word twice in a row.
        bad_ending_ids: ids of the words <end> may not follow (and a capped caption may not end on).
        suppress_unknown: never <unk>.
    """

    no_repeat_ngram_size: int = 0
    no_immediate_repeat: bool = False
    bad_ending_ids: tuple[int, ...] = ()
    suppress_unknown: bool = False

    @classmethod
    def of(cls, decoding: DecodingSettings, vocabulary: Vocabulary | None) -> "WordConstraints":
        """The rules `decoding` sets; the bad endings are the words of BAD_ENDINGS in `vocabulary` (None: a
        decoder without its words, which then has none)."""
        words = vocabulary.stoi if vocabulary is not None else {}
        bad = tuple(words[word] for word in BAD_ENDINGS if word in words) if decoding.block_bad_endings else ()
        return cls(no_repeat_ngram_size=decoding.no_repeat_ngram_size,
                   no_immediate_repeat=decoding.no_immediate_repeat, bad_ending_ids=bad,
                   suppress_unknown=decoding.suppress_unknown)

    @property
    def active(self) -> bool:
        return bool(self.no_repeat_ngram_size or self.no_immediate_repeat or self.bad_ending_ids
                    or self.suppress_unknown)

    def banned(self, prefix: Tensor, *, vocabulary_size: int, last_step: bool) -> Tensor:
        """(R, V) True for each next word a rule forbids after the words `prefix` (R, t)."""
        V = vocabulary_size
        banned = torch.zeros(prefix.shape[0], V, dtype=torch.bool, device=prefix.device)  # (R, V)
        if self.no_repeat_ngram_size:
            banned |= repeated_ngram_words(prefix, n=self.no_repeat_ngram_size, vocabulary_size=V)
        if self.no_immediate_repeat:
            banned |= last_words(prefix, vocabulary_size=V)
        if self.bad_ending_ids:
            bad = torch.tensor(self.bad_ending_ids, device=prefix.device)  # (N,)
            banned |= bad_ending_words(prefix, bad=bad, vocabulary_size=V, last_step=last_step)
        if self.suppress_unknown:
            banned[:, Vocabulary.UNK] = True
        return banned

    def apply(self, scores: Tensor, prefix: Tensor, *, last_step: bool) -> Tensor:
        """`scores` (R, V), log-probabilities or logits with -inf for the words never generated, with -inf for the
        words the rules forbid after `prefix` (R, t) too; a row left with no word may end (<end> as it was)."""
        banned = self.banned(prefix, vocabulary_size=scores.shape[1], last_step=last_step)  # (R, V)
        stuck = ~(~banned & (scores > NEVER)).any(dim=1)  # (R,)
        banned[:, Vocabulary.END] &= ~stuck
        return scores.masked_fill(banned, NEVER)


def truncated_logits(logits: Tensor, *, temperature: float, top_k: int, top_p: float) -> Tensor:
    """The logits (R, V) sampling draws from (softmax of them): divided by `temperature`, then -inf outside the
    `top_k` likeliest words (0: none cut; words tied with the k-th kept), then outside the fewest likeliest words
    whose probability reaches `top_p` (1.0: none cut; the likeliest word always kept). Each cut is skipped when off."""
    V = logits.shape[1]
    if temperature != 1.0:
        logits = logits / temperature
    if 0 < top_k < V:
        kth = logits.detach().topk(top_k, dim=1).values[:, -1:]  # (R, 1)
        logits = logits.masked_fill(logits.detach() < kth, NEVER)
    if top_p < 1.0:
        ranked, order = logits.detach().softmax(dim=1).sort(dim=1, descending=True)  # (R, V) each
        likelier = ranked.cumsum(dim=1) - ranked  # probability of the words ranked above each (R, V)
        cut_ranked = likelier >= top_p
        cut = torch.zeros_like(cut_ranked).scatter(1, order, cut_ranked)  # back to word order (R, V)
        logits = logits.masked_fill(cut, NEVER)
    return logits
