"""What decoding gives: the captions of a batch as tensors (`Decoded`, from greedy and beam search,
`caption.model.search`) and each image's caption with where the model looked for each of its words (`Caption`, drawn
as in sec. 5.4), as `Captioner`, the commands and the evaluation path take them.

Notation: B images, n captions per image, T generated words, L locations.
"""

from dataclasses import dataclass

from torch import Tensor

from caption.model.vocabulary import Vocabulary


@dataclass
class Caption:
    """One image's caption and where the model looked for each of its T words (<end> not included)."""

    text: str  # the words joined by spaces
    words: list[str]
    alpha: Tensor  # attention weights over the L locations, one row per word   (T, L)
    beta: Tensor  # gate β of each word                                          (T,)
    locations: Tensor | None  # hard attention: the sampled location s_t        (T,)
    log_prob: float  # log p(caption | image), <end> included


@dataclass
class Decoded:
    """Generated captions, one per image (n per image, best first, from `beam_search(num_best=n)`): B·n rows.
    Token rows hold words, then <end> if emitted, then <pad>."""

    tokens: Tensor  # word ids after <start>                         (B·n, T)
    log_prob: Tensor  # log p(caption | a), <end> included             (B·n,)
    alpha: Tensor  # attention weights for every generated word       (B·n, T, L)
    beta: Tensor  # gate β for every generated word                   (B·n, T)
    location: Tensor | None  # hard attention: chosen location s_t    (B·n, T)
    lengths: Tensor  # generated words, <end> included                (B·n,)

    def captions(self, vocabulary: Vocabulary) -> list[Caption]:
        """One `Caption` per image, on the CPU, α and β cut to the caption's words."""
        captions = []
        for row in range(self.tokens.shape[0]):
            words = vocabulary.decode(self.tokens[row])
            T = len(words)
            alpha, beta = self.alpha[row, :T].float().cpu(), self.beta[row, :T].float().cpu()  # (T, L), (T,)
            locations = None if self.location is None else self.location[row, :T].cpu()  # (T,)
            captions.append(Caption(" ".join(words), words, alpha, beta, locations, float(self.log_prob[row])))
        return captions
