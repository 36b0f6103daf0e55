"""Our objectives against plain torch transcriptions of the original code (kelvinxu/arctic-captions, capgen.py).

Each transcription follows capgen's formula line by line, in its (T, B, L) layout; the comment above it
quotes the line. Where we differ from capgen on purpose, the transcription says so and why.
"""


import pytest
import torch
from kit.cli import printed
from kit.models import tiny_decoder

from caption.model.attention import AdditiveScorer
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    SoftAttentionObjective,
    SoftObjectiveSettings,
)

B, L, D, V, T = 4, 6, 8, 11, 4


def capgen_projection(scorer: AdditiveScorer, annotations: torch.Tensor) -> torch.Tensor:
    """lstm_cond_layer, l. 357-362:
        pctx_ = dot(context, Wc_att) + b_att
        for lidx in xrange(1, n_layers_att):
            pctx_ = dot(pctx_, W_att_lidx) + b_att_lidx
            if lidx < options['n_layers_att']: pctx_ = tanh(pctx_)      # always true here
    """
    first, *extra = scorer.annotation_projection
    pctx = annotations @ first.weight.T + first.bias
    n_layers_att = len(scorer.annotation_projection)
    for lidx, layer in zip(range(1, n_layers_att), extra):
        pctx = pctx @ layer.weight.T + layer.bias
        if lidx < n_layers_att:
            pctx = torch.tanh(pctx)
    return pctx


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_scorer_projection_is_capgens(layers):
    torch.manual_seed(0)
    scorer = AdditiveScorer(annotation_dim=D, attention_dim=5, layers=layers)
    annotations = torch.randn(B, L, D)
    torch.testing.assert_close(scorer.project(annotations), capgen_projection(scorer, annotations))
    if layers > 1:  # with a tanh after the last layer the annotation side is not affine: f(a)+f(b)-f(0) != f(a+b)
        a, b, zero = annotations[:1], annotations[1:2], torch.zeros_like(annotations[:1])
        assert not torch.allclose(scorer.project(a) + scorer.project(b) - scorer.project(zero), scorer.project(a + b))


def tiny_problem(attention: str, **options):
    torch.manual_seed(0)
    decoder = tiny_decoder(attention, vocab_size=V, annotation_dim=D, dropout=0.0, **options).train()
    annotations = torch.randn(B, L, D)
    captions = torch.cat([torch.ones(B, 1, dtype=torch.long), torch.randint(3, V, (B, T - 1)),
                          torch.full((B, 1), 2)], dim=1)  # <start> w w w <end>: capgen's batches hold one length
    return decoder, annotations, captions


def forward(decoder, annotations, captions, seed: int = 1):
    torch.manual_seed(seed)  # the same sampled locations in both computations
    return decoder(annotations, captions)


def gradients(loss_or_outputs, decoder, grad_outputs=None) -> list[torch.Tensor]:
    parameters = [p for p in decoder.parameters()]
    grads = torch.autograd.grad(loss_or_outputs, parameters, grad_outputs=grad_outputs, allow_unused=True,
                                retain_graph=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(parameters, grads)]


def masked_cost(output, captions) -> torch.Tensor:
    """build_model: cost = -log(p[y] + 1e-8) per token, times the mask, laid out (T, B). (All masks are 1 here.)"""
    log_p = output.logits.log_softmax(-1).gather(-1, captions[:, 1:, None]).squeeze(-1)  # (B, T)
    return -log_p.T  # (T, B)


@pytest.mark.parametrize("semi_sampling", [0.0, 1.0])
def test_hard_attention_gradient_is_capgens_update(semi_sampling):
    """train(), RL_sumCost=True, l. 1191-1195, transcribed with every sign:
        cost = cost.mean()                                    # over the minibatch
        grads = tensor.grad(cost, wrt=itemlist(tparams), disconnected_inputs='raise',
            known_grads={alphas:(baseline_time-opt_outs['masked_cost'].mean(0))[None,:,None]/10.*
                         (-alphas_sample/alphas) + alpha_entropy_c*(tensor.log(alphas) + 1)})
    The two minus signs cancel: (cost - b)/10 · s̃/α, the gradient of (cost - b)·log α_s̃, which makes the
    locations of worse captions less likely, as eq. 12 does (`test_hard_estimator.py` checks eq. 12's sign
    against exact enumeration). The known gradient is one per caption, not divided by B: against the mean
    NLL our per-caption weights are λ_r = 0.1·B and λ_e = 0.002·B. It replaces the gradient that the doubly
    stochastic term would send through alphas, so that term trains nothing here.
    semi_sampling 1.0 is capgen's h_sampling_mask = 0 (the expected context): alphas_sample = alphas, the
    REINFORCE part sums to zero over locations, and the NLL's gradient through α inside the step is kept.
    """
    decoder, annotations, captions = tiny_problem("hard", semi_sampling=semi_sampling)
    baseline_time = 2.3  # capgen's baseline tracks the cost per token; ours tracks the reward, -2.3

    objective = HardAttentionObjective(HardObjectiveSettings(reinforce_weight=0.1 * B, entropy_weight=0.002 * B,
                                                             reward="mean"))
    objective.baseline.value.fill_(-baseline_time)
    output = forward(decoder, annotations, captions)
    mask = torch.ones(B, T)
    ours = gradients(objective(output, captions[:, 1:], mask).loss, decoder)

    output = forward(decoder, annotations, captions)
    cost = masked_cost(output, captions)  # (T, B)
    alphas = output.alpha.transpose(0, 1)  # (T, B, L)
    if semi_sampling == 1.0:
        alphas_sample = alphas.detach()
    else:
        alphas_sample = torch.nn.functional.one_hot(output.location.T, L).float()  # (T, B, L)
    alpha_entropy_c = 0.002
    masked_cost_ = cost  # opt_outs['masked_cost']: (T, B)
    known = ((baseline_time - masked_cost_.mean(0))[None, :, None] / 10. * (-alphas_sample / alphas)
             + alpha_entropy_c * (torch.log(alphas) + 1)).detach()
    from_cost = gradients(cost.sum(0).mean(), decoder)
    from_known = gradients(alphas, decoder, grad_outputs=known)
    for mine, theirs_cost, theirs_known in zip(ours, from_cost, from_known):
        torch.testing.assert_close(mine, theirs_cost + theirs_known, rtol=1e-4, atol=1e-6)


def test_hard_attention_does_not_train_the_doubly_stochastic_term():
    decoder, annotations, captions = tiny_problem("hard", semi_sampling=0.0)
    output = forward(decoder, annotations, captions)
    terms = HardAttentionObjective()(output, captions[:, 1:], torch.ones(B, T))
    assert terms.doubly_stochastic > 0 and not terms.doubly_stochastic.requires_grad


def test_soft_penalty_is_capgens_normalisation():
    """train(): alpha_reg = alpha_c * ((1. - alphas.sum(0))**2).sum(0).mean(), added to cost.mean():
    summed over the batch, averaged over the L locations, so per caption λ = alpha_c·B/L."""
    decoder, annotations, captions = tiny_problem("soft")
    alpha_c = 1.0
    output = forward(decoder, annotations, captions)
    terms = SoftAttentionObjective(SoftObjectiveSettings(alpha_c=alpha_c * B / L))(output, captions[:, 1:],
                                                                                   torch.ones(B, T))

    alphas = output.alpha.transpose(0, 1)  # (T, B, L)
    capgen = masked_cost(output, captions).sum(0).mean() + alpha_c * ((1.0 - alphas.sum(0)) ** 2).sum(0).mean()
    torch.testing.assert_close(terms.loss, capgen)
    for mine, theirs in zip(gradients(terms.loss, decoder), gradients(capgen, decoder)):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("dataset", ["coco", "flickr8k", "flickr30k"])
def test_configs_state_the_original_effective_weights(dataset):
    """The COCO/Flickr runs reproduce capgen's objective at their batch size and grid (L = 14·14), but for the
    entropy weight: configs/hard.yaml takes capgen's alpha_entropy_c per caption, not its effective 0.002·B
    (docs/hard-attention.md, "Choosing λ_e")."""
    soft, hard = printed("--config", f"{dataset}_soft"), printed("--config", f"{dataset}_hard")
    batch = soft["data"]["batch_size"]
    assert soft["model"]["soft"]["alpha_c"] == pytest.approx(1.0 * batch / 196, abs=0.005)
    assert hard["model"]["hard"]["reinforce_weight"] == pytest.approx(0.1 * hard["data"]["batch_size"])
    assert hard["model"]["hard"]["entropy_weight"] == pytest.approx(0.002)
    assert hard["model"]["soft"] is None, "the regulariser trains soft attention only"
