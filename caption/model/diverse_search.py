"""Diverse beam search (Vijayakumar et al., AAAI 2018, "Diverse Beam Search"), with Hamming diversity, batched as
`caption.model.search.beam_search` is: transformers' `num_beam_groups` and `diversity_penalty`, self-critical.pytorch's
`group_size` and `diversity_lambda`.

The k beams of an image form G groups of k' = k/G beams, each a beam search of its own. At step t the groups choose
in turn; group g ranks its candidates (a beam's prefix y_<t followed by a word w) by

    s_g(y_<t, w) = S_g(y_<t) + log p(w | y_<t, a) - λ · #{beams of groups 1..g-1 whose word at step t is w}

and keeps its k' best; S_g, a beam's running score, is the sum of these (its penalties included, as transformers and
self-critical.pytorch keep it). A beam's <pad> after its <end> counts for no group. The captions returned are ranked
by the model's log p / length^length_penalty over all k beams, as `beam_search` ranks them; with one group, the search
is `beam_search`, step for step.

Notation: B images, k beams, G groups of k' beams, V words.
"""

import torch
from torch import Tensor

from caption.model.beams import Beams, beam_log_probs
from caption.model.captions import Decoded
from caption.model.constraints import WordConstraints
from caption.model.decoder import Decoder, DecoderState
from caption.model.decoding import check_decoding
from caption.model.vocabulary import Vocabulary


def grouped_choice(scores: Tensor, log_probs: Tensor, *, diversity_strength: float) -> tuple[Tensor, Tensor, Tensor]:
    """One step's choice of every group, in turn: scores (B, G, k') the beams' running scores, log_probs
    (B, G, k', V) the next words' -> the new beams' running scores (B, G, k'), their parent beam within the image
    (B, G·k', group after group) and their word (B, G·k')."""
    B, G, width, V = log_probs.shape
    chosen = torch.zeros(B, V, device=log_probs.device)  # beams of the groups so far choosing each word (B, V)
    new_scores, parents, words = [], [], []
    for group in range(G):
        candidates = scores[:, group, :, None] + log_probs[:, group] - diversity_strength * chosen[:, None, :]
        best, flat = candidates.view(B, width * V).topk(width, dim=-1)  # (B, k') each
        word = flat % V  # (B, k')
        counted = (word != Vocabulary.PAD) & (best > float("-inf"))  # a finished beam's <pad>, an empty beam: no
        chosen.scatter_add_(1, word, counted.float())
        new_scores.append(best)
        parents.append(group * width + flat.div(V, rounding_mode="floor"))
        words.append(word)
    return torch.stack(new_scores, dim=1), torch.cat(parents, dim=1), torch.cat(words, dim=1)


@torch.inference_mode()
def diverse_beam_search(
    decoder: Decoder,
    annotations: Tensor,
    *,
    beam_size: int,
    beam_groups: int,
    diversity_strength: float,
    max_length: int,
    length_penalty: float = 0.0,
    num_best: int = 1,
    constraints: WordConstraints = WordConstraints(),
) -> Decoded:
    """`beam_size` beams per image in `beam_groups` groups (above); annotations (B, L, D). Returns the `num_best`
    best of each image's final beams by log p / length^length_penalty, best first (B·n rows), each with its log p
    (the model's, no penalty in it)."""
    check_decoding(beam_size=beam_size, max_caption_length=max_length, num_captions=num_best, beam_groups=beam_groups)
    B, k, G, device = annotations.shape[0], beam_size, beam_groups, annotations.device
    width = k // G
    beams = Beams.start(decoder, annotations, beams=k)
    state, words, finished, kept, row_offset = beams.state, beams.words, beams.finished, beams.kept, beams.row_offset
    scores = torch.full((B, G, width), float("-inf"), device=device)
    scores[:, :, 0] = 0.0  # a group's beams start identical: expand only its first
    log_prob = torch.zeros(B * k, device=device)  # the model's log p of each beam (B·k,)

    for step in range(max_length):
        log_probs, out = beam_log_probs(decoder, words, state, annotations, beams.projected, kept=kept,
                                        finished=finished, constraints=constraints, last_step=step == max_length - 1)
        V = log_probs.shape[1]
        scores, parents, chosen = grouped_choice(scores, log_probs.view(B, G, width, V),
                                                 diversity_strength=diversity_strength)
        rows = (row_offset + parents).view(-1)  # parent row of each new beam (B·k,)
        words = chosen.view(-1)  # (B·k,)
        log_prob = log_prob[rows] + log_probs[rows, words]
        state = DecoderState(out.state.h[rows], out.state.c[rows])
        kept = kept.extended(rows, words, out)
        finished = finished[rows] | (words == Vocabulary.END)
        if finished.all():
            break
    return kept.best(log_prob, beams=k, length_penalty=length_penalty, num_best=num_best)
