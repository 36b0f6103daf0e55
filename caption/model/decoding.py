"""How a trained model decodes (`model.decoding:` in a config): the settings every command and the Python API take,
and the one check of a beam size and a length. Plain Python, no torch: the inference commands build their decoding
options from `DecodingSettings`' fields while answering `--help` at once (`caption.cli.options.add_decoding`).
The searches themselves are `caption.model.search`.
"""

from dataclasses import dataclass
from typing import Literal

from caption.errors import ConfigError, check_range

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
    """

    max_caption_length: int = 30                      # ours (original code: maxlen=200, never reached)
    beam_size: int = 5                                # original code: generate_caps.py k=5
    length_penalty: float = 0.0                       # original code: generate_caps.py normalize=False
    hard_eval_context: HardEvalContext = "expected"   # original code: decodes with the expected context

    def __post_init__(self) -> None:
        check_decoding(beam_size=self.beam_size, max_caption_length=self.max_caption_length)
        check_range("decoding.length_penalty", self.length_penalty, low=0)


def check_decoding(*, beam_size: int, max_caption_length: int, num_captions: int = 1,
                   vocabulary_size: int | None = None) -> None:
    """ConfigError naming the decoding setting that cannot work: the one check of beam sizes and lengths, for
    configs, `Captioner` calls and the commands' flags alike. With `vocabulary_size` (V, special tokens included),
    also a beam wider than the captions the search can hold (`distinct_captions`)."""
    check_range("decoding.beam_size", beam_size, low=1)
    check_range("decoding.max_caption_length", max_caption_length, low=1)
    if not 1 <= num_captions <= beam_size:
        raise ConfigError(f"num_captions must be between 1 and the beam size ({beam_size}), got {num_captions}")
    if vocabulary_size is not None and beam_size > (most := distinct_captions(vocabulary_size, max_caption_length)):
        raise ConfigError(
            f"decoding.beam_size is {beam_size}, but this model's search holds at most {most} distinct captions "
            f"({vocabulary_size - 2} words to choose from, <end> among them, and at most {max_caption_length} words "
            f"a caption): a wider beam only adds impossible ones; give at most {most}")


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
