"""A tiny decoder whose search can be checked against every caption it could return: the hypotheses enumerated,
each scored by teacher forcing."""

import itertools

import torch
import torch.nn.functional as F

from caption.model.decoder import Decoder
from caption.model.vocabulary import Vocabulary
from kit.models import tiny_decoder

L, D, V = 4, 6, 6  # words the model may emit: <end>, <unk>, 4, 5 (never <pad> or <start>)
EMITTABLE = [Vocabulary.END, Vocabulary.UNK, 4, 5]


def make_decoder(attention: str = "soft", seed: int = 0) -> Decoder:
    decoder = tiny_decoder(attention, vocab_size=V, annotation_dim=D, seed=seed, embed_dim=5, hidden_dim=7)
    with torch.no_grad():  # spread the output distribution so that greedy and exhaustive search disagree
        decoder.output_words.weight.mul_(3.0)
    return decoder.eval()


def sequence_log_prob(decoder: Decoder, annotations: torch.Tensor, words: tuple[int, ...]) -> float:
    """log p(words | a) by teacher forcing, the way generation scores it."""
    captions = torch.tensor([[Vocabulary.START, *words]])
    with torch.no_grad():
        log_probs = F.log_softmax(decoder(annotations, captions).logits, dim=-1)[0]  # (T, V)
    return sum(log_probs[t, w].item() for t, w in enumerate(words))


def all_hypotheses(max_length: int):
    """Every caption search can return: ends at its first <end>, or runs to the length cap."""
    for length in range(1, max_length + 1):
        for words in itertools.product(EMITTABLE, repeat=length):
            if Vocabulary.END in words[:-1]:
                continue
            if length < max_length and words[-1] != Vocabulary.END:
                continue
            yield words


def strip(tokens: torch.Tensor) -> tuple[int, ...]:
    return tuple(t for t in tokens.tolist() if t != Vocabulary.PAD)
