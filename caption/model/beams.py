"""What the searches share (`caption.model.search`, `caption.model.diverse_search`): one decoder step's log p(y_t),
the k rows of each image a beam search starts from, and the hypotheses it keeps, R = B·k rows reordered after each
step by the row each new beam extends.

Notation: B images, k beams, t words so far, L locations, V words.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from caption.model.captions import Decoded
from caption.model.constraints import WordConstraints
from caption.model.decoder import Decoder, DecoderState, StepOutput
from caption.model.vocabulary import Vocabulary


def next_log_probs(
    decoder: Decoder, words: Tensor, state: DecoderState, annotations: Tensor, projected: Tensor
) -> tuple[Tensor, StepOutput]:
    """Feed `words` (R,) through one decoder step: log p(y_t) (R, V) and the step's output.

    <pad> and <start> are never generated (their log-probabilities are set to -inf).
    """
    embedded, gates = decoder.word_gates(words)
    out = decoder.step(gates, state, annotations, projected)
    logits = decoder.output_logits(embedded, out.state.h, out.context)
    log_probs = F.log_softmax(logits.float(), dim=-1)
    log_probs[:, [Vocabulary.PAD, Vocabulary.START]] = float("-inf")
    return log_probs, out


def beam_log_probs(decoder: Decoder, words: Tensor, state: DecoderState, annotations: Tensor, projected: Tensor, *,
                   kept: "Hypotheses", finished: Tensor, constraints: WordConstraints,
                   last_step: bool) -> tuple[Tensor, StepOutput]:
    """`next_log_probs` of the beams (R, V), without the words `constraints` forbid after each beam's words so far, a
    finished beam (`finished`, (R,)) extended by <pad> at no cost and by nothing else, so that finished and unfinished
    beams compete on equal terms."""
    log_probs, out = next_log_probs(decoder, words, state, annotations, projected)  # (R, V)
    if constraints.active:
        log_probs = constraints.apply(log_probs, kept.tokens, last_step=last_step)
    log_probs[finished] = float("-inf")
    log_probs[finished, Vocabulary.PAD] = 0.0
    return log_probs, out


@dataclass
class Beams:
    """Where a beam search of k beams per image starts: every row of an image (k rows, R = B·k) at <start>, in the
    LSTM state the image's annotations give, with no word and not finished."""

    projected: Tensor  # (B, L, A): the annotations' projection, shared by the image's k rows, never copied
    state: DecoderState  # (R, n) each
    words: Tensor  # (R,): the last word of each row
    finished: Tensor  # (R,) bool
    kept: "Hypotheses"
    row_offset: Tensor  # (B, 1): the first row of each image

    @classmethod
    def start(cls, decoder: Decoder, annotations: Tensor, *, beams: int) -> "Beams":
        """k = `beams` rows per image of annotations (B, L, D)."""
        B, k, device = annotations.shape[0], beams, annotations.device
        state = decoder.init_state(annotations)
        return cls(projected=decoder.project_annotations(annotations),
                   state=DecoderState(state.h.repeat_interleave(k, dim=0), state.c.repeat_interleave(k, dim=0)),
                   words=torch.full((B * k,), Vocabulary.START, dtype=torch.long, device=device),
                   finished=torch.zeros(B * k, dtype=torch.bool, device=device),
                   kept=Hypotheses.empty(B * k, annotations, hard=decoder.is_hard),
                   row_offset=(torch.arange(B, device=device) * k)[:, None])


@dataclass
class Hypotheses:
    """The words of R beams so far and what the model did for each: (R, t) tokens, (R, t, L) α, (R, t) β and, for
    hard attention, (R, t) locations."""

    tokens: Tensor  # (R, t)
    alpha: Tensor  # (R, t, L)
    beta: Tensor  # (R, t)
    location: Tensor | None  # (R, t)

    @classmethod
    def empty(cls, rows: int, annotations: Tensor, *, hard: bool) -> "Hypotheses":
        """R = `rows` hypotheses of no word, over annotations (B, L, D)."""
        device = annotations.device
        return cls(tokens=torch.empty(rows, 0, dtype=torch.long, device=device),
                   alpha=annotations.new_empty(rows, 0, annotations.shape[1]),
                   beta=annotations.new_empty(rows, 0),
                   location=torch.empty(rows, 0, dtype=torch.long, device=device) if hard else None)

    def extended(self, rows: Tensor, words: Tensor, out: StepOutput) -> "Hypotheses":
        """Each new beam i: hypothesis rows[i] (R,) followed by words[i] (R,), with the step's α, β (and location)
        of that row."""
        return Hypotheses(
            tokens=torch.cat([self.tokens[rows], words[:, None]], dim=1),
            alpha=torch.cat([self.alpha[rows], out.alpha[rows, None]], dim=1),
            beta=torch.cat([self.beta[rows], out.beta[rows, None]], dim=1),
            location=None if self.location is None else torch.cat([self.location[rows], out.location[rows, None]],
                                                                    dim=1),
        )

    def best(self, log_prob: Tensor, *, beams: int, length_penalty: float, num_best: int) -> Decoded:
        """The `num_best` best of each image's `beams` hypotheses, best first (B·n rows), ranked by
        log p / length^length_penalty (0: log p); log_prob: each hypothesis' log p (R,)."""
        lengths = (self.tokens != Vocabulary.PAD).sum(dim=1).view(-1, beams)  # (B, k)
        scores = log_prob.view(-1, beams)  # (B, k)
        ranking = scores / lengths.clamp(min=1).float() ** length_penalty if length_penalty else scores
        row_offset = (torch.arange(scores.shape[0], device=scores.device) * beams)[:, None]  # (B, 1)
        best = (row_offset + ranking.topk(num_best, dim=-1).indices).view(-1)  # (B·n,), each image's best first
        return Decoded(
            tokens=self.tokens[best],
            log_prob=log_prob[best],
            alpha=self.alpha[best],
            beta=self.beta[best],
            location=None if self.location is None else self.location[best],
            lengths=lengths.view(-1)[best],
        )
