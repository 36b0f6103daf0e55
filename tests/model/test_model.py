"""Shapes of every module, padding invariance, and the objectives against hand computation."""

import math

import pytest
import torch
from kit import models

from caption.errors import ConfigError, check_range
from caption.model.attention import AdditiveScorer, HardAttention, SoftAttention
from caption.model.decoder import Decoder
from caption.model.encoder import EncoderSettings, SmallVGG, TorchvisionVGG, build_encoder
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    LeaveOneOutBaseline,
    MovingAverageBaseline,
    caption_log_likelihood,
    credited_rewards,
    doubly_stochastic_penalty,
    hard_attention_loss,
    remaining_share,
    soft_attention_loss,
)
from caption.model.vocabulary import Vocabulary

B, L, D, V = 3, 6, 8, 11


def tiny_decoder(attention: str = "soft", **options) -> Decoder:
    return models.tiny_decoder(attention, vocab_size=V, annotation_dim=D, **options)


def captions_with_padding() -> torch.Tensor:
    """Three captions of different lengths: <start> words <end> <pad>..."""
    return torch.tensor(
        [
            [1, 4, 5, 6, 7, 2],
            [1, 8, 2, 0, 0, 0],
            [1, 9, 10, 2, 0, 0],
        ]
    )


def test_encoder_shapes():
    images = torch.randn(2, 3, 64, 64)
    assert SmallVGG(channels=(4, 8, 16, 32))(images).shape == (2, 8 * 8, 32)  # 3 pools: 64 -> 8
    vgg = TorchvisionVGG(name="vgg16", weights="none")
    assert vgg(torch.randn(1, 3, 64, 64)).shape == (1, 4 * 4, 512)  # /16, before the final pool
    assert vgg.dim == 512 and not any(p.requires_grad for p in vgg.parameters())
    vgg.train()
    assert not vgg.training, "a frozen encoder stays in eval mode"


def test_encoder_rejects_conflicting_settings():
    with pytest.raises(ValueError, match="small_vgg has no ImageNet weights.*another run's checkpoint"):
        build_encoder(EncoderSettings(name="small_vgg", weights="imagenet"))
    with pytest.raises(ValueError, match="model.encoder.name must be one of"):
        build_encoder(EncoderSettings(name="alexnet", weights="none"))  # type: ignore[arg-type]


def test_attention_shapes_and_projection_once():
    scorer = AdditiveScorer(annotation_dim=D, attention_dim=5, layers=2)
    annotations = torch.randn(B, L, D)
    projected = scorer.project(annotations)
    assert projected.shape == (B, L, 5)
    logits = scorer(projected, torch.randn(B, 5))
    assert logits.shape == (B, L)
    soft = SoftAttention()(annotations, logits)
    assert soft.context.shape == (B, D) and soft.alpha.shape == (B, L)
    torch.testing.assert_close(soft.alpha.sum(-1), torch.ones(B))
    torch.testing.assert_close(soft.context, (soft.alpha[..., None] * annotations).sum(1))
    hard = HardAttention(eval_context="expected").train()(annotations, logits)
    assert hard.location.shape == (B,) and hard.log_alpha_location.shape == (B,) and hard.entropy.shape == (B,)
    torch.testing.assert_close(hard.context, annotations[torch.arange(B), hard.location])


def test_hard_attention_semi_sampling_and_eval_modes():
    annotations, logits = torch.randn(B, L, D), torch.randn(B, L)
    expected = SoftAttention()(annotations, logits).context
    semi = torch.tensor([True, False, True])
    out = HardAttention(eval_context="expected").train()(annotations, logits, semi)
    torch.testing.assert_close(out.context[semi], expected[semi])
    torch.testing.assert_close(out.context[1], annotations[1, out.location[1]])
    torch.testing.assert_close(HardAttention(eval_context="expected").eval()(annotations, logits).context, expected)
    argmax = HardAttention(eval_context="argmax").eval()(annotations, logits)
    torch.testing.assert_close(argmax.context, annotations[torch.arange(B), logits.argmax(-1)])


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_decoder_output_shapes(attention):
    decoder = tiny_decoder(attention)
    captions = captions_with_padding()
    out = decoder(torch.randn(B, L, D), captions)
    T = captions.shape[1] - 1
    assert out.logits.shape == (B, T, V)
    assert out.alpha.shape == (B, T, L) and out.beta.shape == (B, T)
    torch.testing.assert_close(out.alpha.sum(-1), torch.ones(B, T))
    assert ((out.beta > 0) & (out.beta < 1)).all()
    if attention == "hard":
        assert out.location.shape == out.log_alpha_location.shape == out.entropy.shape == (B, T)
        assert out.semi_sampled.shape == (B,)
    else:
        assert out.location is None and out.semi_sampled is None


def test_gate_off_gives_beta_one():
    out = tiny_decoder(gate=False)(torch.randn(B, L, D), captions_with_padding())
    assert torch.equal(out.beta, torch.ones_like(out.beta))


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_padded_batch_loss_equals_each_caption_alone(attention):
    """Padding never changes a caption's log-likelihood or regulariser (hard: expected context in eval)."""
    decoder = tiny_decoder(attention).eval()
    annotations, captions = torch.randn(B, L, D), captions_with_padding()
    targets, mask = captions[:, 1:], (captions[:, 1:] != Vocabulary.PAD).float()
    out = decoder(annotations, captions)
    batch_ll = caption_log_likelihood(out.logits, targets, mask)
    batch_penalty = doubly_stochastic_penalty(out.alpha, mask)
    for i in range(B):
        length = int((captions[i] != Vocabulary.PAD).sum())
        alone = captions[i : i + 1, :length]
        out_i = decoder(annotations[i : i + 1], alone)
        ones = torch.ones(1, length - 1)
        torch.testing.assert_close(caption_log_likelihood(out_i.logits, alone[:, 1:], ones)[0], batch_ll[i])
        torch.testing.assert_close(doubly_stochastic_penalty(out_i.alpha, ones)[0], batch_penalty[i])


def test_init_state_depends_on_mean_annotation_only():
    decoder = tiny_decoder(init_layers=2).eval()
    annotations = torch.randn(1, L, D)
    shuffled = annotations[:, torch.randperm(L)]
    torch.testing.assert_close(decoder.init_state(annotations).h, decoder.init_state(shuffled).h)


def test_init_hidden_layers_have_dropout_in_training():
    """capgen.py build_model: `ctx_mean = dropout_layer(relu(...))` after each hidden f_init layer."""
    decoder = tiny_decoder(init_layers=3, dropout=0.5)
    assert [type(m).__name__ for m in decoder.init_hidden_layers] == ["Linear", "ReLU", "Dropout"] * 2
    annotations = torch.randn(4, L, D)
    decoder.train()
    torch.manual_seed(1)
    assert not torch.allclose(decoder.init_state(annotations).h, decoder.init_state(annotations).h)
    decoder.eval()
    torch.testing.assert_close(decoder.init_state(annotations).h, decoder.init_state(annotations).h)


def test_caption_log_likelihood_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))  # (1, 2, 3)
    targets = torch.tensor([[1, 0]])
    mask = torch.tensor([[1.0, 0.0]])  # second step is padding
    torch.testing.assert_close(caption_log_likelihood(logits, targets, mask), torch.tensor([math.log(0.25)]))


def test_doubly_stochastic_penalty_by_hand_excludes_padding():
    alpha = torch.tensor(
        [
            [[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.9, 0.1, 0.0]],  # third step is padding
            [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
        ]
    )
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # caption 0: Σ_t α = (0.7, 0.8, 0.5) -> 0.09 + 0.04 + 0.25 ; caption 1: (2, 0, 1) -> 1 + 1 + 0
    expected = torch.tensor([0.09 + 0.04 + 0.25, 2.0])
    torch.testing.assert_close(doubly_stochastic_penalty(alpha, mask), expected)


def test_soft_loss_is_eq_14():
    decoder = tiny_decoder().eval()
    captions = captions_with_padding()
    targets, mask = captions[:, 1:], (captions[:, 1:] != 0).float()
    out = decoder(torch.randn(B, L, D), captions)
    terms = soft_attention_loss(out, targets, mask, alpha_c=0.7)
    expected = (-caption_log_likelihood(out.logits, targets, mask) + 0.7 * doubly_stochastic_penalty(out.alpha, mask))
    torch.testing.assert_close(terms.loss, expected.mean())
    assert terms.tokens == mask.sum() == 5 + 2 + 3


def test_hard_loss_terms_by_hand():
    decoder = tiny_decoder("hard", semi_sampling=0.0).train()
    captions = captions_with_padding()
    targets, mask = captions[:, 1:], (captions[:, 1:] != 0).float()
    out = decoder(torch.randn(B, L, D), captions)
    terms = hard_attention_loss(
        out, targets, mask, baseline=torch.tensor(-1.5), reinforce_weight=0.1, entropy_weight=0.01,
        reward="mean", credit="caption",
    )
    ll = caption_log_likelihood(out.logits, targets, mask)
    reward = ll.detach() / mask.sum(1)
    log_p_s = (out.log_alpha_location * mask).sum(1)
    entropy = (out.entropy * mask).sum(1)
    expected = -ll - 0.1 * (reward + 1.5) * log_p_s - 0.01 * entropy
    torch.testing.assert_close(terms.loss, expected.mean())
    torch.testing.assert_close(terms.reward, reward.mean())


def test_baseline_moving_average():
    baseline = MovingAverageBaseline(0.9)
    assert baseline.value == 0.0 and "value" in baseline.state_dict()
    b = 0.0
    for r in (-3.0, -2.0, -2.5):
        baseline.update(torch.tensor(r))
        b = 0.9 * b + 0.1 * r
        assert math.isclose(baseline.value.item(), b, rel_tol=1e-6)


def test_credited_rewards_and_shares_by_hand():
    token_ll = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.5, 0.0, 0.0]])  # ℓ_t, zero on padding
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    caption = credited_rewards(token_ll, mask, reward="sum", credit="caption")
    assert caption.tolist() == [[-6.0, -6.0, -6.0, 0.0], [-1.0, -1.0, 0.0, 0.0]]
    step = credited_rewards(token_ll, mask, reward="sum", credit="step")  # the words from t on: y_t .. y_n
    assert step.tolist() == [[-6.0, -5.0, -3.0, 0.0], [-1.0, -0.5, 0.0, 0.0]]
    step_mean = credited_rewards(token_ll, mask, reward="mean", credit="step")
    torch.testing.assert_close(step_mean, torch.tensor([[-2.0, -5 / 3, -1.0, 0.0], [-0.5, -0.25, 0.0, 0.0]]))
    assert remaining_share(mask, "caption").tolist() == mask.tolist()
    torch.testing.assert_close(remaining_share(mask, "step"),
                               torch.tensor([[1.0, 2 / 3, 1 / 3, 0.0], [1.0, 0.5, 0, 0]]))


def test_leave_one_out_baseline_by_hand():
    rewards = torch.tensor([[1.0], [2.0], [6.0], [10.0], [20.0], [30.0]])  # two captions, N = 3 samples each
    baseline = LeaveOneOutBaseline(samples=3)(rewards, hidden=torch.zeros(6, 1, 4), share=torch.ones(6, 1))
    assert baseline.squeeze(1).tolist() == [4.0, 3.5, 1.5, 25.0, 20.0, 15.0]


def test_hard_objective_with_step_credit_and_learned_baseline_by_hand():
    decoder = tiny_decoder("hard", semi_sampling=0.0).train()
    captions = captions_with_padding()
    targets, mask = captions[:, 1:], (captions[:, 1:] != 0).float()
    annotations = torch.randn(B, L, D)
    out = decoder(annotations, captions)
    settings = HardObjectiveSettings(reinforce_weight=0.1, entropy_weight=0.01, credit="step", baseline="learned")
    objective = HardAttentionObjective(settings, hidden_dim=decoder.hidden_dim)
    terms = objective(out, targets, mask)
    token_ll = out.logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1) * mask
    n = mask.sum(1, keepdim=True)
    to_go = torch.stack([token_ll[:, t:].sum(1) for t in range(mask.shape[1])], dim=1) / n * mask  # R_t, "mean"
    b = objective.baseline.layer(out.hidden).squeeze(-1) * mask  # b(h_{t-1})
    reinforce = -((to_go - b).detach() * out.log_alpha_location * mask).sum(1)
    expected = -token_ll.sum(1) + 0.1 * reinforce - 0.01 * (out.entropy * mask).sum(1) + ((to_go - b) ** 2).sum(1)
    torch.testing.assert_close(terms.loss, expected.mean())
    assert objective.baseline.layer.weight.grad is None
    terms.loss.backward()
    assert objective.baseline.layer.weight.grad is not None, "the learned baseline regresses on the rewards"
    torch.testing.assert_close(out.hidden[:, 0], decoder.init_state(annotations).h)  # step 1 attends from h_0


def test_estimator_settings_are_checked_by_name():
    with pytest.raises(ValueError, match="leave_one_out needs model.hard.samples >= 2"):
        HardAttentionObjective(HardObjectiveSettings(baseline="leave_one_out", samples=1))
    with pytest.raises(ValueError, match="model.hard.baseline must be one of"):
        HardAttentionObjective(HardObjectiveSettings(baseline="average"))  # type: ignore[arg-type]


def small_module(kind: str, **groups):
    return models.tiny_module(["<pad>", "<start>", "<end>", "<unk>", "a", "circle"], kind, **groups)


def test_semi_sampling_schedule_moves_linearly_over_the_epochs():
    from types import SimpleNamespace

    module = small_module("hard", hard={"semi_sampling": 1.0, "semi_sampling_final": 0.0})
    module.log = lambda *args, **kwargs: None
    seen = []
    for epoch in range(5):
        module._trainer = SimpleNamespace(current_epoch=epoch, max_epochs=5)
        module.on_train_epoch_start()
        seen.append(module.model.decoder.semi_sampling)
    assert seen == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    constant = small_module("hard", hard={"semi_sampling": 0.5})
    constant._trainer = SimpleNamespace(current_epoch=3, max_epochs=5)
    constant.on_train_epoch_start()
    assert constant.model.decoder.semi_sampling == 0.5, "without semi_sampling_final: the paper's constant p"


def test_semi_sampling_schedule_has_a_length_under_early_stopping():
    from types import SimpleNamespace

    module = small_module("hard", hard={"semi_sampling": 1.0, "semi_sampling_final": 0.0, "semi_sampling_epochs": 3})
    module.log = lambda *args, **kwargs: None
    seen = []
    for epoch in range(5):  # an upper bound of 500 epochs does not stretch a 3-epoch schedule
        module._trainer = SimpleNamespace(current_epoch=epoch, max_epochs=500)
        module.on_train_epoch_start()
        seen.append(module.model.decoder.semi_sampling)
    assert seen == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.0])
    unbounded = small_module("hard", hard={"semi_sampling": 1.0, "semi_sampling_final": 0.0})
    unbounded._trainer = SimpleNamespace(current_epoch=1, max_epochs=-1)
    with pytest.raises(ValueError, match=r"set model.hard.semi_sampling_epochs"):
        unbounded.on_train_epoch_start()


def test_semi_sampling_draws_one_coin_per_image():
    """Sec. 4.1: the expected context "with probability 0.5 for a given image": every caption row of an image (its
    five captions in an image batch, its N samples) shares the image's coin."""
    decoder = tiny_decoder("hard", semi_sampling=0.5).train()
    images = torch.arange(8).repeat_interleave(5)  # 8 images, 5 rows each
    captions = captions_with_padding()[:1].expand(len(images), -1)
    per_image = []
    for seed in range(20):
        torch.manual_seed(seed)
        semi = decoder(torch.randn(len(images), L, D), captions, images).semi_sampled.view(8, 5)
        assert (semi == semi[:, :1]).all(), "rows of one image got different coins"
        per_image.append(semi[:, 0])
    share = torch.stack(per_image).float().mean()
    assert 0.35 < share < 0.65, f"P(expected context) per image {share:.2f}, not 0.5"
    torch.manual_seed(0)  # without image numbers every row is its own image: the coins differ within a block
    rows = decoder(torch.randn(len(images), L, D), captions).semi_sampled.view(8, 5)
    assert not (rows == rows[:, :1]).all()


def attended(decoder: Decoder, annotations: torch.Tensor, captions: torch.Tensor, *, seed: int):
    """A teacher-forced pass under `seed`: its output and each step's attention output (the context before β)."""
    steps = []
    handle = decoder.attention.register_forward_hook(lambda module, args, output: steps.append(output))
    try:
        torch.manual_seed(seed)
        return decoder(annotations, captions), steps
    finally:
        handle.remove()


def seeded_annotations(seed: int = 0) -> torch.Tensor:
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(seed))  # (B, L, D)


def expected_contexts(annotations: torch.Tensor, steps) -> list[torch.Tensor]:
    """Σ_i α_ti a_i of each step (sec. 4.2): the context of a semi-sampled image."""
    return [(step.alpha[..., None] * annotations).sum(1) for step in steps]


def test_hard_attention_in_eval_mode_attends_with_the_expected_context_and_draws_nothing():
    """Evaluation decodes with the expected context Σ_i α_ti a_i (original code; `hard_eval_context` "expected"):
    semi-sampling is a training device, so an eval pass flips no coin and samples no location, and two passes under
    different seeds give the same logits, attention and loss terms (REINFORCE on every caption)."""
    decoder = tiny_decoder("hard", semi_sampling=0.5).eval()
    annotations, captions = seeded_annotations(), captions_with_padding()
    targets, mask = captions[:, 1:], (captions[:, 1:] != Vocabulary.PAD).float()
    objective = HardAttentionObjective(HardObjectiveSettings())
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first, steps = attended(decoder, annotations, captions, seed=0)
    assert torch.equal(torch.get_rng_state(), before), "an eval pass drew random numbers"
    assert first.semi_sampled is None
    for step, expected in zip(steps, expected_contexts(annotations, steps), strict=True):
        torch.testing.assert_close(step.context, expected)
    second, _ = attended(decoder, annotations, captions, seed=1)
    for name in ("logits", "alpha", "beta", "location", "log_alpha_location", "entropy"):
        assert torch.equal(getattr(first, name), getattr(second, name)), name
    terms, again = objective(first, targets, mask), objective(second, targets, mask)
    assert terms.sampled.all()
    for name, value in terms.as_dict().items():
        assert torch.equal(value, again.as_dict()[name]), name


@pytest.mark.parametrize("eval_context", ["argmax", "sample"])
def test_semi_sampling_does_not_apply_in_eval_mode(eval_context):
    """With semi-sampling on every image (1.0) an eval pass still attends as `hard_eval_context` says, to one location
    a_{s_t} (the most likely or a sampled one), never swapped for the expected context."""
    decoder = tiny_decoder("hard", semi_sampling=1.0, eval_context=eval_context).eval()
    annotations, captions = seeded_annotations(), captions_with_padding()
    output, steps = attended(decoder, annotations, captions, seed=0)
    assert output.semi_sampled is None
    for step, expected in zip(steps, expected_contexts(annotations, steps), strict=True):
        torch.testing.assert_close(step.context, annotations[torch.arange(B), step.location])
        assert not torch.allclose(step.context, expected)
        if eval_context == "argmax":
            assert torch.equal(step.location, step.alpha.argmax(-1))


def test_hard_attention_in_training_samples_its_locations_unless_semi_sampled():
    """Training (sec. 4.1): without semi-sampling each step attends to a sampled location a_{s_t}, s_t ~ α_t, which
    changes with the seed; semi-sampling every image (1.0) gives each step the expected context instead."""
    annotations, captions = seeded_annotations(), captions_with_padding()
    sampling = tiny_decoder("hard", semi_sampling=0.0, dropout=0.0).train()
    first, steps = attended(sampling, annotations, captions, seed=0)
    for step in steps:
        torch.testing.assert_close(step.context, annotations[torch.arange(B), step.location])
    second, _ = attended(sampling, annotations, captions, seed=1)
    assert not torch.equal(first.location, second.location), "the same locations under two seeds: not sampled"
    semi = tiny_decoder("hard", semi_sampling=1.0, dropout=0.0).train()
    output, steps = attended(semi, annotations, captions, seed=0)
    assert output.semi_sampled.all()
    for step, expected in zip(steps, expected_contexts(annotations, steps), strict=True):
        torch.testing.assert_close(step.context, expected)


def test_training_step_gives_the_decoder_each_rows_image():
    module = small_module("hard", hard={"samples": 2})
    seen = {}
    forward = module.model.decoder.forward

    def recording(annotations, captions, images=None):
        seen["images"] = images
        return forward(annotations, captions, images)

    module.model.decoder.forward = recording
    module.log_dict = module.log = lambda *args, **kwargs: None
    batch = {"image": torch.rand(3, 3, 32, 32), "image_id": torch.tensor([17, 17, 4]),
             "caption": torch.tensor([[1, 4, 5, 2], [1, 5, 2, 0], [1, 4, 2, 0]])}
    module.training_step(batch, 0)
    assert seen["images"].tolist() == [1, 1, 1, 1, 0, 0], "N = 2 samples of 2 captions of image 17, 2 of image 4"


def test_soft_attention_refuses_hard_attention_settings_by_name():
    with pytest.raises(ValueError, match=r"model.hard only applies to model.attention.kind: hard"):
        small_module("soft", hard={"credit": "step", "baseline": "learned"})
    with pytest.raises(ValueError, match=r"model.hard.semi_sampling_final is a probability"):
        small_module("hard", hard={"semi_sampling_final": 1.5})


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_a_baseline_decay_the_moving_average_cannot_take_is_refused_by_the_settings(decay):
    """b ← decay · b + (1 - decay) · r̄ needs decay in [0, 1): 1 would keep b where it started."""
    with pytest.raises(ConfigError, match=r"^model.hard.baseline_decay must be in \[0, 1\), got "):
        HardObjectiveSettings(baseline_decay=decay)
    assert HardObjectiveSettings(baseline_decay=0.0).baseline_decay == 0.0


def test_a_bounded_setting_that_is_no_probability_is_not_called_one():
    with pytest.raises(ConfigError) as refused:
        check_range("x", 3, low=0, high=2)
    assert str(refused.value) == "model.x must be in [0, 2], got 3"
    with pytest.raises(ConfigError, match=r"^model.decoder.dropout is a probability: it must be in \[0, 1\], got 2"):
        check_range("decoder.dropout", 2, low=0, high=1)
