"""Self-critical training as a stage of `caption fit` (`model.self_critical:`; the loss: `caption.model.self_critical`).

The reward, CIDEr-D against each image's references with document frequencies from the training references
(`caption.evaluation.cider_reward.CiderD`), is built once when fitting starts; each step then samples k captions per
distinct image of the batch (and, for hard attention, their locations), scores all B·k at once, and subtracts the
baseline: the mean reward of the image's other samples, or the reward of its greedy caption. Both are logged as
`train/cider` and `train/cider_baseline` (hard attention's `train/reward` is eq. 12's log-likelihood).

    caption fit --config shapes_soft_scst      # from runs/shapes_soft's checkpoint (model.optimization.init_from)
"""

from __future__ import annotations

import torch
from torch import Tensor

from caption.data.sources.records import ImageRecord
from caption.errors import ConfigError
from caption.evaluation.cider_reward import CiderD
from caption.model.constraints import WordConstraints
from caption.model.decoder import Decoder
from caption.model.decoding import DecodingSettings
from caption.model.search import greedy, sample
from caption.model.self_critical import SelfCriticalSettings, SelfCriticalTerms, mean_of_others, self_critical_loss
from caption.model.vocabulary import Vocabulary, tokenize


def reference_ids(records: list[ImageRecord], vocabulary: Vocabulary) -> tuple[Tensor, list[list[list[int]]]]:
    """The training images' ids, sorted (N,), and each one's references as the reward compares them: word ids, out
    of vocabulary as <unk>, and <end> (counted as a word, as self-critical.pytorch does)."""
    records = sorted(records, key=lambda record: record.image_id)
    references = [[vocabulary.encode(tokenize(text))[1:] for text in record.references] for record in records]
    return torch.tensor([record.image_id for record in records]), references


class SelfCritical:
    """What a self-critical `fit` adds to the module: the reward and the step.

    Args:
        settings: samples per image, the baseline, the longest sample.
        decoding: the model's decoding settings: the samples are drawn at its temperature, top_k and top_p, and
            samples and greedy baseline alike follow its blocking rules (`caption.model.constraints`).
        vocabulary: the model's words (the bad endings among them).
    """

    def __init__(self, settings: SelfCriticalSettings, *, decoding: DecodingSettings, vocabulary: Vocabulary):
        self.settings = settings
        self.decoding = decoding
        self.constraints = WordConstraints.of(decoding, vocabulary)
        self.reward: CiderD | None = None
        self.image_ids: Tensor | None = None  # the training images' ids, sorted: row i of the reward's references

    def build_reward(self, records: list[ImageRecord], vocabulary: Vocabulary) -> None:
        """CIDEr-D against the training references, document frequencies from them (once per fit)."""
        self.image_ids, references = reference_ids(records, vocabulary)
        self.reward = CiderD(references, pad=Vocabulary.PAD)

    def reference_rows(self, image_ids: Tensor) -> Tensor:
        """Row of each image id (U,) in the reward's references (U,)."""
        assert self.reward is not None and self.image_ids is not None, "build_reward first (on_fit_start)"
        if self.image_ids.device != image_ids.device:  # once: onto the batches' device
            self.image_ids = self.image_ids.to(image_ids.device)
        known = self.image_ids
        rows = torch.searchsorted(known, image_ids).clamp(max=len(known) - 1)
        if not torch.equal(known[rows], image_ids):
            missing = image_ids[known[rows] != image_ids].tolist()[:5]
            raise ConfigError(f"model.self_critical: training images {missing} have no references in the training "
                              "split the reward was built from")
        return rows

    def step(self, decoder: Decoder, annotations: Tensor, image_ids: Tensor) -> SelfCriticalTerms:
        """The loss of one batch of distinct images, their annotations (U, L, D) and ids (U,): k samples of each,
        their rewards, the baseline."""
        assert self.reward is not None
        k, max_length = self.settings.samples, self.settings.max_length
        rows = self.reference_rows(image_ids)  # (U,)
        sampled = sample(decoder, annotations, samples=k, max_length=max_length, decoding=self.decoding,
                         constraints=self.constraints)  # U·k rows
        rewards = self.reward(sampled.tokens, rows.repeat_interleave(k)).float()  # r: (U·k,)
        if self.settings.baseline == "mean_of_others":
            baseline = mean_of_others(rewards, k)  # (U·k,)
        else:  # the greedy caption's reward, decoded as validation decodes (dropout off, hard: its eval context)
            decoder.eval()
            try:
                greedy_tokens = greedy(decoder, annotations.detach(), max_length=max_length,
                                       constraints=self.constraints).tokens  # (U, T)
            finally:
                decoder.train()
            baseline = self.reward(greedy_tokens, rows).float().repeat_interleave(k)  # (U·k,)
        return self_critical_loss(sampled, rewards, baseline)

