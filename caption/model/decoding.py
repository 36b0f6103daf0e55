"""How a trained model decodes (`model.decoding:` in a config): the settings every command and the Python API take,
and the one check of a beam size and a length. Plain Python, no torch: the inference commands build their decoding
options from `DecodingSettings`' fields while answering `--help` at once (`caption.cli.options.add_decoding`).
The searches themselves are `caption.model.search`.
"""

from dataclasses import dataclass
from typing import Literal

from caption.errors import ConfigError, check_range

# the fields beyond the beam, off by default: diverse groups, blocking rules, sampling's cuts (the short help of
# `caption fit` leaves them to --help-all; docs/attention.md#decoding-options)
DECODING_EXTRAS = ("beam_groups", "diversity_strength", "no_repeat_ngram_size", "no_immediate_repeat",
                   "block_bad_endings", "suppress_unknown", "top_k", "top_p", "temperature")
# hard attention's context at evaluation: the expected one (original code), the most likely location, or a sample
HardEvalContext = Literal["expected", "argmax", "sample"]


@dataclass(frozen=True)
class DecodingSettings:
    """How captions are generated at test time and in inference (`model.decoding:` in a config). These settings
    change no weight: `caption test --model.decoding.beam_size 5 --ckpt_path ...` overrides a checkpoint's.

    Args:
        max_caption_length: words generated at most.
        beam_size: beam width (1: greedy); validation always decodes greedily.
        length_penalty: rank final beams by log p / length^length_penalty (0: raw log-probability).
        hard_eval_context: hard attention: the context at evaluation, "expected" (original code), "argmax" or
            "sample".
        beam_groups: diverse beam search (Vijayakumar et al. 2018): the beam split into this many groups of
            beam_size / beam_groups beams (1: plain beam search; beam_size must be a multiple).
        diversity_strength: diverse beam search: a word's score in a group is lowered by this times the number of
            earlier groups that chose it at the same step (Hamming diversity; 0: independent groups).
        no_repeat_ngram_size: no caption holds an n-gram of this many words twice (0: off; 3: no repeated trigram).
        no_immediate_repeat: no word twice in a row.
        block_bad_endings: <end> is never chosen right after a word of BAD_ENDINGS ("a", "the", "of" ...), and a
            capped caption's last word is none of them.
        suppress_unknown: <unk> is never generated.
        top_k: sampling: draw among the k likeliest words only (0: all).
        top_p: sampling: draw among the fewest likeliest words whose probability reaches p (1.0: all).
        temperature: sampling: draw from softmax(logits / temperature) (1.0: the model's distribution).
    """

    max_caption_length: int = 30                      # ours (original code: maxlen=200, never reached)
    beam_size: int = 5                                # original code: generate_caps.py k=5
    length_penalty: float = 0.0                       # original code: generate_caps.py normalize=False
    hard_eval_context: HardEvalContext = "expected"   # original code: decodes with the expected context
    beam_groups: int = 1                              # ours: plain beam search, as the original code
    diversity_strength: float = 0.5                   # ours: self-critical.pytorch's diversity_lambda 0.5
    no_repeat_ngram_size: int = 0                     # ours: off, as the original code
    no_immediate_repeat: bool = False                 # original code: no rule (self-critical.pytorch: off too)
    block_bad_endings: bool = False                   # original code: no rule (self-critical.pytorch: off too)
    suppress_unknown: bool = False                    # original code: <unk> may be generated
    top_k: int = 0                                    # ours: the whole distribution, as self-critical.pytorch
    top_p: float = 1.0                                # ours: the whole distribution, as self-critical.pytorch
    temperature: float = 1.0                          # ours: the model's distribution, as self-critical.pytorch

    def __post_init__(self) -> None:
        check_decoding(beam_size=self.beam_size, max_caption_length=self.max_caption_length,
                       beam_groups=self.beam_groups)
        check_range("decoding.length_penalty", self.length_penalty, low=0)
        check_range("decoding.diversity_strength", self.diversity_strength, low=0)
        check_whole("decoding.no_repeat_ngram_size", self.no_repeat_ngram_size)
        check_whole("decoding.top_k", self.top_k)
        if not 0 < self.top_p <= 1:  # NaN too
            raise ConfigError(f"model.decoding.top_p must be in (0, 1] (1.0: off), got {self.top_p}")
        check_range("decoding.temperature", self.temperature, low=0, strict=True)
        for key in ("no_immediate_repeat", "block_bad_endings", "suppress_unknown"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"model.decoding.{key} must be true or false, got {getattr(self, key)!r}")


def check_decoding(*, beam_size: int, max_caption_length: int, num_captions: int = 1,
                   vocabulary_size: int | None = None, beam_groups: int = 1) -> None:
    """ConfigError naming the decoding setting that cannot work: the one check of beam sizes and lengths, for
    configs, `Captioner` calls and the commands' flags alike. With `vocabulary_size` (V, special tokens included),
    also a beam wider than the captions the search can hold (`distinct_captions`). A beam wider than 1 (greedy
    search is one group) splits into `beam_groups` groups of equal width."""
    check_range("decoding.beam_size", beam_size, low=1)
    check_range("decoding.max_caption_length", max_caption_length, low=1)
    check_range("decoding.beam_groups", beam_groups, low=1)
    if beam_size > 1 and beam_size % beam_groups:
        raise ConfigError(f"model.decoding.beam_groups must divide the beam size ({beam_size}) into groups of equal "
                          f"width, got {beam_groups}")
    if not 1 <= num_captions <= beam_size:
        raise ConfigError(f"num_captions must be between 1 and the beam size ({beam_size}), got {num_captions}")
    if vocabulary_size is not None and beam_size > (most := distinct_captions(vocabulary_size, max_caption_length)):
        raise ConfigError(
            f"decoding.beam_size is {beam_size}, but this model's search holds at most {most} distinct captions "
            f"({vocabulary_size - 2} words to choose from, <end> among them, and at most {max_caption_length} words "
            f"a caption): a wider beam only adds impossible ones; give at most {most}")


def check_whole(key: str, value: int) -> None:
    """ConfigError naming `model.<key>` for a count that is not a whole number >= 0 (0: off)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"model.{key} must be a whole number >= 0 (0: off), got {value!r}")


def distinct_captions(vocabulary_size: int, max_length: int) -> int:
    """How many captions of at most `max_length` words the search can tell apart, over a vocabulary of V tokens of
    which W = V - 2 can be generated (<pad> and <start> never are; <end> ends a caption): t words then <end> for
    t < max_length, or max_length words: the sum over t = 0..max_length of (W - 1)^t, counted up to COUNTED_UP_TO."""
    others = max(vocabulary_size - 3, 0)  # W - 1: the words other than <end>
    if others <= 1:
        return min(max_length + 1 if others else 1, COUNTED_UP_TO)
    total, power = 0, 1
    for _ in range(max_length + 1):
        total += power
        if total >= COUNTED_UP_TO:
            return COUNTED_UP_TO
        power *= others
    return total


COUNTED_UP_TO = 10**18  # distinct captions are counted up to this (any beam that fits in memory is narrower)
