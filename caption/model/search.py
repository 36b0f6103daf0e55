"""Caption generation: greedy search, batched beam search, and sampling for self-critical training.

All three run every image of a batch at once (beam search keeps B×k rows, reordered with index
arithmetic on tensors; no Python loop over images or beams; the k rows of an image share its
annotations and their projection, see `caption.model.attention`), stop at `max_length` words even when
a hypothesis never emits <end>, and return the per-word attention α (T×L) and gate β of the
chosen caption so that it can be drawn (sec. 5.4). `generate` decodes as a trained model does, with its decoding
settings: a call's beam size, length and number of captions are defaulted and checked there, once; diverse beam search
(`caption.model.diverse_search`) when the settings split the beam into groups. Every search takes the blocking rules
of `caption.model.constraints` (none by default), and sampling the decoding's temperature, top-k and top-p.

Notation: B images, k beams, T ≤ max_length generated words, L locations, V words.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from caption.errors import ConfigError, size_text
from caption.model.beams import Beams, beam_log_probs, next_log_probs
from caption.model.captions import Decoded
from caption.model.constraints import WordConstraints, truncated_logits
from caption.model.decoder import Decoder, DecoderState
from caption.model.decoding import DecodingSettings, check_decoding
from caption.model.diverse_search import diverse_beam_search
from caption.model.vocabulary import Vocabulary

BYTES_PER_VALUE = 4  # the search's scores and weights are float32
# the bytes new tensors on a device can take, None where it cannot be asked: what a beam search is checked against
# (the callers pass `caption.io.device.free_memory`)
FreeMemory = Callable[[torch.device], int | None]


def search_bytes(*, images: int, beam_size: int, locations: int, attention_dim: int, vocabulary_size: int,
                 max_length: int) -> int:
    """About the memory a beam search of B `images` takes at its peak, for R = B·k rows, from its largest tensors:
    each step's attention, W_a a + W_h h at every location (R, L, A), and its scores and weights (R, L) three
    times; the word scores (R, V) ten times (the logits, their log-softmax, the candidates, what top-k and the
    allocator take beside them); the weights of every word so far (R, T, L) three times (copied as a step appends
    to them). Measured on the CPU (peak resident memory of a search), the peak was 0.6 to 1.0 times this."""
    rows = images * beam_size
    per_row = locations * attention_dim + 3 * locations + 10 * vocabulary_size + 3 * max_length * locations
    return BYTES_PER_VALUE * rows * per_row


def check_search_memory(*, images: int, beam_size: int, locations: int, attention_dim: int, vocabulary_size: int,
                        max_length: int, device: torch.device, free_memory: FreeMemory) -> None:
    """ConfigError, before any of it is allocated, for a beam search that needs more memory (`search_bytes`) than
    `device` has free (`free_memory(device)`), naming both and the widest beam that fits."""
    free = free_memory(device)
    sizes = {"locations": locations, "attention_dim": attention_dim, "vocabulary_size": vocabulary_size,
             "max_length": max_length}
    needed = search_bytes(images=images, beam_size=beam_size, **sizes)
    if free is None or needed <= free:
        return
    fits = free // search_bytes(images=images, beam_size=1, **sizes)
    raise ConfigError(
        f"a beam of {beam_size} over {images} images needs about {size_text(needed)} for the search (each of the "
        f"{images}x{beam_size} rows keeps {locations} locations x {attention_dim} attention units, {vocabulary_size} "
        f"word scores and {max_length} words x {locations} weights), more than the {size_text(free)} free on "
        f"{device}: use a beam of at most {fits} (decoding.beam_size, num_captions) or fewer images at once")


@torch.inference_mode()
def greedy(decoder: Decoder, annotations: Tensor, *, max_length: int,
           constraints: WordConstraints = WordConstraints()) -> Decoded:
    """Pick the most probable word at every step, of those `constraints` allow. annotations: (B, L, D)."""
    B = annotations.shape[0]
    projected = decoder.project_annotations(annotations)  # (B, L, A), once per image
    state = decoder.init_state(annotations)
    words = torch.full((B,), Vocabulary.START, dtype=torch.long, device=annotations.device)
    finished = torch.zeros(B, dtype=torch.bool, device=annotations.device)
    log_prob = torch.zeros(B, device=annotations.device)
    tokens, alphas, betas, locations = [], [], [], []
    for step in range(max_length):
        log_probs, out = next_log_probs(decoder, words, state, annotations, projected)  # (B, V)
        if constraints.active:
            prefix = torch.stack(tokens, dim=1) if tokens else words.new_empty(B, 0)  # (B, t)
            log_probs = constraints.apply(log_probs, prefix, last_step=step == max_length - 1)
        words = log_probs.argmax(dim=-1).masked_fill(finished, Vocabulary.PAD)  # (B,)
        log_prob += log_probs.gather(1, words[:, None]).squeeze(1).masked_fill(finished, 0.0)
        tokens.append(words)
        alphas.append(out.alpha)
        betas.append(out.beta)
        locations.append(out.location)
        state = out.state
        finished = finished | (words == Vocabulary.END)
        if finished.all():
            break
    tokens_ = torch.stack(tokens, dim=1)  # (B, T)
    return Decoded(
        tokens=tokens_,
        log_prob=log_prob,
        alpha=torch.stack(alphas, dim=1),
        beta=torch.stack(betas, dim=1),
        location=None if locations[0] is None else torch.stack(locations, dim=1),
        lengths=(tokens_ != Vocabulary.PAD).sum(dim=1),
    )


@torch.inference_mode()
def beam_search(
    decoder: Decoder,
    annotations: Tensor,
    *,
    beam_size: int,
    max_length: int,
    length_penalty: float = 0.0,
    num_best: int = 1,
    constraints: WordConstraints = WordConstraints(),
    free_memory: FreeMemory | None = None,
) -> Decoded:
    """Keep the k most probable prefixes per image; return the best finished-or-capped hypothesis.

    A hypothesis that emitted <end> stays in the beam with its score frozen (it may only be
    extended by <pad> at no cost), so finished and unfinished hypotheses compete on equal terms.
    At the end, hypotheses are ranked by log p / length^length_penalty (0 = raw log-probability).
    `num_best` = n <= k returns the n best of the final beams instead, best first: B·n rows, image by image.
    No hypothesis takes a word `constraints` forbid. With `free_memory`, a search that needs more memory than it
    says the device has free is refused before it starts (`check_search_memory`).
    """
    check_decoding(beam_size=beam_size, max_caption_length=max_length, num_captions=num_best)
    if free_memory is not None:
        check_search_memory(images=annotations.shape[0], beam_size=beam_size, locations=annotations.shape[1],
                            attention_dim=decoder.attention_dim, vocabulary_size=decoder.output_words.out_features,
                            max_length=max_length, device=annotations.device, free_memory=free_memory)
    B, k, device = annotations.shape[0], beam_size, annotations.device
    beams = Beams.start(decoder, annotations, beams=k)
    state, words, finished, kept, row_offset = beams.state, beams.words, beams.finished, beams.kept, beams.row_offset
    scores = torch.full((B, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first

    for step in range(max_length):
        log_probs, out = beam_log_probs(decoder, words, state, annotations, beams.projected, kept=kept,
                                        finished=finished, constraints=constraints, last_step=step == max_length - 1)
        V = log_probs.shape[1]
        candidates = (scores.reshape(-1, 1) + log_probs).view(B, k * V)  # (B, k·V)
        scores, flat = candidates.topk(k, dim=-1)  # (B, k)
        rows = (row_offset + flat.div(V, rounding_mode="floor")).view(-1)  # parent row of each new beam (B·k,)
        words = (flat % V).view(-1)  # (B·k,)
        state = DecoderState(out.state.h[rows], out.state.c[rows])
        kept = kept.extended(rows, words, out)
        finished = finished[rows] | (words == Vocabulary.END)
        if finished.all():
            break
    return kept.best(scores.view(-1), beams=k, length_penalty=length_penalty, num_best=num_best)


def beam_width(decoding: DecodingSettings, *, beam_size: int | None = None, num_captions: int = 1) -> int:
    """The beam a search for `num_captions` captions per image runs with: `beam_size` when given, else the model's
    decoding.beam_size, widened to num_captions (the n best need a beam at least n wide)."""
    return max(decoding.beam_size, num_captions) if beam_size is None else beam_size


def generate(
    decoder: Decoder, annotations: Tensor, *, decoding: DecodingSettings, vocabulary: Vocabulary | None = None,
    beam_size: int | None = None, max_length: int | None = None, num_captions: int = 1,
    free_memory: FreeMemory | None = None,
) -> Decoded:
    """Captions for a batch of annotations (B, L, D): greedy when the beam is 1, else beam search, diverse beam
    search with decoding.beam_groups > 1; every one under the blocking rules decoding sets (`WordConstraints`; the
    bad endings are words of `vocabulary`). The one place a call's decoding knobs are defaulted and checked:
    `beam_size` and `max_length` default to the model's decoding.beam_size and decoding.max_caption_length
    (`beam_width`); `num_captions` = n > 1: the n best beams of each image, best first (B·n rows). A beam asked for
    that is wider than the captions the search can hold is a ConfigError (`check_decoding`), as are n more than the
    beam, a beam the groups do not divide and, with `free_memory`, a search larger than the memory free
    (`check_search_memory`)."""
    max_length = decoding.max_caption_length if max_length is None else max_length
    check_decoding(beam_size=beam_width(decoding, beam_size=beam_size), max_caption_length=max_length,
                   vocabulary_size=decoder.output_words.out_features)
    width = beam_width(decoding, beam_size=beam_size, num_captions=num_captions)
    constraints = WordConstraints.of(decoding, vocabulary)
    if width == 1 and num_captions == 1:
        return greedy(decoder, annotations, max_length=max_length, constraints=constraints)
    if decoding.beam_groups == 1:
        return beam_search(decoder, annotations, beam_size=width, max_length=max_length,
                           length_penalty=decoding.length_penalty, num_best=num_captions, constraints=constraints,
                           free_memory=free_memory)
    check_decoding(beam_size=width, max_caption_length=max_length, num_captions=num_captions,
                   beam_groups=decoding.beam_groups)
    if free_memory is not None:
        check_search_memory(images=annotations.shape[0], beam_size=width, locations=annotations.shape[1],
                            attention_dim=decoder.attention_dim, vocabulary_size=decoder.output_words.out_features,
                            max_length=max_length, device=annotations.device, free_memory=free_memory)
    return diverse_beam_search(decoder, annotations, beam_size=width, beam_groups=decoding.beam_groups,
                               diversity_strength=decoding.diversity_strength, max_length=max_length,
                               length_penalty=decoding.length_penalty, num_best=num_captions,
                               constraints=constraints)


@dataclass
class Sampled:
    """k captions per image sampled from the model's word distribution (and, for hard attention, its locations),
    with the log-probabilities that self-critical training differentiates: B·k rows, k consecutive per image.
    Token rows hold words, then <end> if emitted, then <pad>; `mask` marks the words and the <end>."""

    tokens: Tensor  # sampled word ids                                    (B·k, T)
    mask: Tensor  # 1.0 on the caption's words and its <end>              (B·k, T)
    word_log_prob: Tensor  # log p(w_t | a, w_<t, s_<t), with gradient    (B·k, T)
    location_log_prob: Tensor | None  # hard: log α_{t,s_t}, with gradient (B·k, T)
    entropy: Tensor | None  # hard: H(α_t)                                 (B·k, T)
    alpha: Tensor  # attention weights                                    (B·k, T, L)


def sample(decoder: Decoder, annotations: Tensor, *, samples: int, max_length: int,
           decoding: DecodingSettings = DecodingSettings(),
           constraints: WordConstraints = WordConstraints()) -> Sampled:
    """Draw `samples` captions per image, w_t ~ q(w_t | ...) and (hard attention, the decoder in training mode)
    s_t ~ Multinoulli(α_t), keeping the graph: the REINFORCE gradient of self-critical training flows through
    `word_log_prob` and `location_log_prob`. q is the model's p(w_t | ...) without <pad> and <start> and the words
    `constraints` forbid, at decoding.temperature, cut to decoding.top_k and decoding.top_p (`truncated_logits`),
    renormalised: what is drawn from is what `word_log_prob` reports (by default q = p without <pad>, <start>).
    annotations: (B, L, D); the k rows of an image share its annotations and their projection."""
    B, k, device = annotations.shape[0], samples, annotations.device
    projected = decoder.project_annotations(annotations)  # (B, L, A)
    state = decoder.init_state(annotations)
    state = DecoderState(state.h.repeat_interleave(k, dim=0), state.c.repeat_interleave(k, dim=0))  # (B·k, n)
    words = torch.full((B * k,), Vocabulary.START, dtype=torch.long, device=device)
    alive = torch.ones(B * k, dtype=torch.bool, device=device)  # no <end> drawn yet
    never = torch.zeros(decoder.output_words.out_features, dtype=torch.bool, device=device)  # (V,)
    never[[Vocabulary.PAD, Vocabulary.START]] = True
    tokens, masks, word_log_probs, location_log_probs, entropies, alphas = [], [], [], [], [], []
    for step in range(max_length):
        embedded, gates = decoder.word_gates(words)
        out = decoder.step(gates, state, annotations, projected)
        logits = decoder.output_logits(embedded, out.state.h, out.context)  # (B·k, V)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float32 at least (bf16 autocast)
        logits = logits.masked_fill(never, float("-inf"))  # (B·k, V)
        if constraints.active:
            prefix = torch.stack(tokens, dim=1) if tokens else words.new_empty(B * k, 0)  # (B·k, t)
            logits = constraints.apply(logits, prefix, last_step=step == max_length - 1)
        logits = truncated_logits(logits, temperature=decoding.temperature, top_k=decoding.top_k,
                                  top_p=decoding.top_p)
        log_probs = F.log_softmax(logits, dim=-1)  # (B·k, V)
        drawn = torch.multinomial(log_probs.detach().exp(), 1).squeeze(1)  # (B·k,)
        words = drawn.masked_fill(~alive, Vocabulary.PAD)
        step_mask = alive.float()
        tokens.append(words)
        masks.append(step_mask)
        word_log_probs.append(log_probs.gather(1, drawn[:, None]).squeeze(1) * step_mask)
        if out.log_alpha_location is not None:
            location_log_probs.append(out.log_alpha_location * step_mask)
            entropies.append(out.entropy * step_mask)
        alphas.append(out.alpha)
        state = out.state
        alive = alive & (words != Vocabulary.END)
        if not alive.any():
            break
    return Sampled(
        tokens=torch.stack(tokens, dim=1),
        mask=torch.stack(masks, dim=1),
        word_log_prob=torch.stack(word_log_probs, dim=1),
        location_log_prob=torch.stack(location_log_probs, dim=1) if location_log_probs else None,
        entropy=torch.stack(entropies, dim=1) if entropies else None,
        alpha=torch.stack(alphas, dim=1),
    )
