"""Attention supervised by boxes: the term by hand and its gradient on α, the weight in both objectives (0: the paper's
loss, bit for bit, without targets), and a few steps of it pulling α's mass into the boxes, soft and hard."""

import math

import pytest
import torch
from kit.models import tiny_decoder

from caption.errors import ConfigError
from caption.model.box_supervision import box_supervision_loss
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    SoftAttentionObjective,
    SoftObjectiveSettings,
    hard_attention_loss,
    soft_attention_loss,
)

OBJECTIVES = {"soft": (SoftAttentionObjective, SoftObjectiveSettings),
              "hard": (HardAttentionObjective, HardObjectiveSettings)}


def test_the_term_by_hand_over_the_supervised_words_only():
    alpha = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]],
                         requires_grad=True)  # (1, 3, 4)
    target = torch.tensor([[[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])  # word 1: none
    loss, words = box_supervision_loss(alpha, target)
    assert words.item() == 2
    assert loss.item() == pytest.approx(-(math.log(0.15) + math.log(0.7)) / 2)  # masses 0.5·0.1 + 0.5·0.2, 0.7
    loss.backward()  # ∂/∂α_tl = -m_tl / (Σ_l α_tl m_tl) / words; nothing on the unsupervised word
    expected = torch.tensor([[[-0.5 / 0.15 / 2, -0.5 / 0.15 / 2, 0.0, 0.0], [0.0] * 4, [-1 / 0.7 / 2, 0.0, 0.0, 0.0]]])
    torch.testing.assert_close(alpha.grad, expected)
    none, count = box_supervision_loss(alpha, torch.zeros_like(target))
    assert none.item() == 0.0 and count.item() == 0


def batch(kind: str, *, seed: int = 0):
    """A tiny decoder, 4 images of L = 4 locations and their captions, and a target per caption: word 1 looks at
    location b in image b (the one whose annotation's first feature is 2 there), the other words have none."""
    decoder = tiny_decoder(kind, vocab_size=6, annotation_dim=4, seed=seed, dropout=0.0)
    torch.manual_seed(seed)
    annotations = torch.randn(4, 4, 4)  # (B, L, D)
    annotations[:, :, 0] = 2.0 * torch.eye(4)  # the object of image b is at location b
    captions = torch.tensor([[1, 4, 5, 3, 2]] * 4)  # <start> w w w <end>: T = 4
    target = torch.zeros(4, 4, 4)  # (B, T, L)
    target[torch.arange(4), 1, torch.arange(4)] = 1.0
    return decoder, annotations, captions, target


def loss_terms(kind: str, weight: float, decoder, annotations, captions, target):
    objective_class, settings_class = OBJECTIVES[kind]
    objective = objective_class(settings_class(box_supervision=weight), hidden_dim=decoder.hidden_dim)
    torch.manual_seed(1)  # the hard samples
    output = decoder(annotations, captions)
    mask = (captions[:, 1:] != 0).float()
    return objective(output, captions[:, 1:], mask, target), output


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_weight_zero_is_the_papers_loss_bit_for_bit_with_or_without_targets(kind):
    decoder, annotations, captions, target = batch(kind)
    with_targets, output = loss_terms(kind, 0.0, decoder, annotations, captions, target)
    without, _ = loss_terms(kind, 0.0, decoder, annotations, captions, None)
    mask = (captions[:, 1:] != 0).float()
    paper = soft_attention_loss(output, captions[:, 1:], mask, alpha_c=1.0) if kind == "soft" else \
        hard_attention_loss(output, captions[:, 1:], mask, baseline=torch.zeros(()), reinforce_weight=6.4,
                            entropy_weight=0.128, reward="mean", credit="caption")
    assert torch.equal(with_targets.loss, without.loss) and torch.equal(with_targets.loss, paper.loss)
    assert with_targets.box_supervision is None and "box_supervision" not in with_targets.as_dict()


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_a_positive_weight_adds_the_term_and_sends_its_gradient_into_the_attention(kind):
    decoder, annotations, captions, target = batch(kind)
    paper, _ = loss_terms(kind, 0.0, decoder, annotations, captions, target)
    supervised, output = loss_terms(kind, 2.5, decoder, annotations, captions, target)
    term, _ = box_supervision_loss(output.alpha, target)
    torch.testing.assert_close(supervised.loss, paper.loss + 2.5 * term)
    assert supervised.as_dict()["box_supervision"] is supervised.box_supervision
    decoder.zero_grad()
    supervised.box_supervision.backward()  # the term alone reaches f_att, through α
    assert decoder.scorer.score.weight.grad.abs().sum() > 0
    objective_class, settings_class = OBJECTIVES[kind]
    objective = objective_class(settings_class(box_supervision=1.0), hidden_dim=decoder.hidden_dim)
    with pytest.raises(ValueError, match=f"model.{kind}.box_supervision > 0 needs the batch's box targets"):
        objective(output, captions[:, 1:], (captions[:, 1:] != 0).float(), None)


@pytest.mark.parametrize("settings", [SoftObjectiveSettings, HardObjectiveSettings])
def test_a_negative_weight_is_refused_naming_it(settings):
    group = "soft" if settings is SoftObjectiveSettings else "hard"
    with pytest.raises(ConfigError, match=rf"{group}\.box_supervision"):
        settings(box_supervision=-0.1)


@pytest.mark.parametrize("kind", ["soft", "hard"])
@pytest.mark.parametrize("weight", [1.0, 0.0])
def test_a_few_steps_with_the_weight_pull_alphas_mass_into_the_boxes(kind, weight):
    """40 Adam steps: with the weight α's mass on the object goes from about 1/L to nearly all of it; without it (the
    captions say nothing of where the object is) it stays near 1/L."""
    decoder, annotations, captions, target = batch(kind, seed=2)
    supervised = target.sum(-1) > 0  # (B, T)

    def mass_inside() -> float:
        with torch.no_grad():
            _, output = loss_terms(kind, weight, decoder, annotations, captions, target)
        return float((output.alpha * target).sum(-1)[supervised].mean())

    before = mass_inside()
    optimizer = torch.optim.Adam(decoder.parameters(), lr=0.05)
    for _ in range(40):
        terms, _ = loss_terms(kind, weight, decoder, annotations, captions, target)
        optimizer.zero_grad()
        terms.loss.backward()
        optimizer.step()
    after = mass_inside()
    assert before < 0.3, before
    assert (after > 0.9) if weight else (after < 0.3), (before, after)
