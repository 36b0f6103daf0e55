"""Attention supervised by object boxes, beyond the paper: Liu et al., AAAI 2017 ("Attention Correctness in Neural
Image Captioning", sec. "Supervised attention model"; their weak supervision takes each word's region from the
object annotations of its category, as the targets here do from the data's boxes: `caption.data.box_targets`).

For each word t that names a label of its image's boxes, the target m_t (L,) is the share of each attention cell
inside the label's boxes, normalised to sum 1; the term is

    box_supervision = mean over the supervised words of −log Σ_l α_tl m_tl,

added to eq. 14 (soft) or eq. 12's surrogate (hard: on α, the distribution s_t is sampled from) as weight ×
box_supervision (`model.soft.box_supervision`, `model.hard.box_supervision`; 0, the default, is the paper's
objective). Σ_l α_tl m_tl is the α mass inside the region divided by the region's area in cells, so the term is
−log of that mass plus a constant per word: it pulls α's mass into the box, the attention correctness Liu et al.
score. (Their own loss, as we read it, is the cross-entropy −Σ_l m_tl log α_tl between the normalised region map and
α, which also asks α to spread evenly over the region; we could not check the text here, so the term is the mass
inside, which any α inside the box satisfies.)
"""

import torch
from torch import Tensor

TINY = 1e-12  # a floor on the α mass inside, so that an α wholly outside the box gives a finite loss


def box_supervision_loss(alpha: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """(mean over supervised words of −log Σ_l α_tl m_tl, number of supervised words): α and the target maps m
    (B, T, L), a word without a target an all-zero row of m. No supervised word: 0 (still on α's graph)."""
    mass = (alpha.float() * target).sum(dim=-1)  # (B, T): Σ_l α_tl m_tl
    supervised = target.sum(dim=-1) > 0  # (B, T)
    words = supervised.sum()
    loss = -(mass.clamp(min=TINY).log() * supervised).sum() / words.clamp(min=1)
    return loss, words


def check_box_target(target: Tensor | None, alpha: Tensor, *, key: str) -> Tensor:
    """The batch's box targets, which a positive weight needs: (B, T, L) as α; a ValueError naming `key` when the
    batch has none (the data module builds them when the module asks it: `CaptionModule.setup`)."""
    if target is None:
        raise ValueError(f"{key} > 0 needs the batch's box targets (batch['box_target'], which the data module adds "
                         "to training batches after `supervise_attention`)")
    if target.shape != alpha.shape:
        raise ValueError(f"box targets of shape {tuple(target.shape)} do not match attention α {tuple(alpha.shape)}")
    return target.to(torch.float32)
