"""bf16 mixed precision (`caption.model.precision`): under bf16 autocast the matrix products run in bf16 while α, the
LSTM state, every log-probability, reward, baseline and loss stay float32 — and come out close to fp32's."""

import pytest
import torch
from kit.models import tiny_decoder, tiny_module

from caption.model import precision as precisions
from caption.model.decoding import DecodingSettings
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    SoftAttentionObjective,
)
from caption.model.precision import autocast, bf16_support, checked_precision, default_precision
from caption.model.search import generate, sample
from caption.model.vocabulary import Vocabulary

V, L, D, B, T = 12, 6, 10, 4, 5
WORDS = list(Vocabulary.SPECIALS) + [f"w{index}" for index in range(V - len(Vocabulary.SPECIALS))]


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    annotations = torch.randn(B, L, D, generator=generator)  # (B, L, D)
    captions = torch.randint(len(Vocabulary.SPECIALS), V, (B, T + 1), generator=generator)
    captions[:, 0] = Vocabulary.START
    captions[0, -2:] = Vocabulary.PAD  # one shorter caption
    return annotations, captions


def bf16() -> torch.autocast:
    return autocast("cpu", "bf16-mixed")


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_under_bf16_autocast_alpha_the_state_and_every_term_are_float32_and_alpha_sums_to_one(kind: str) -> None:
    decoder = tiny_decoder(kind, vocab_size=V, annotation_dim=D, semi_sampling=0.0).train()
    annotations, captions = batch()
    targets = captions[:, 1:]
    mask = (targets != Vocabulary.PAD).float()
    objective = SoftAttentionObjective() if kind == "soft" else HardAttentionObjective(HardObjectiveSettings())
    with bf16():
        output = decoder(annotations, captions)
        terms = objective(output, targets, mask)
        state = decoder.init_state(annotations)
    assert output.logits.dtype == torch.bfloat16  # the deep output's matrix product did run in bf16
    assert output.alpha.dtype == torch.float32 and state.h.dtype == state.c.dtype == torch.float32
    assert torch.allclose(output.alpha.sum(-1), torch.ones(B, T), atol=1e-6)  # fp32's sum, not bf16's (± 4e-3)
    for name, value in terms.as_dict().items():
        assert value.dtype == torch.float32, name
    if kind == "hard":
        assert output.log_alpha_location.dtype == output.entropy.dtype == torch.float32


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_bf16_loss_terms_and_gradients_are_within_bf16_rounding_of_fp32s(kind: str) -> None:
    """The same weights, batch and sampled locations (the same seed): every term within 3% of fp32's (bf16 keeps 8
    bits of mantissa: 0.4% per rounding), and the gradient points the same way (cosine > 0.99)."""
    annotations, captions = batch()
    targets = captions[:, 1:]
    mask = (targets != Vocabulary.PAD).float()
    results = {}
    for name in ("32-true", "bf16-mixed"):
        decoder = tiny_decoder(kind, vocab_size=V, annotation_dim=D, semi_sampling=0.0, dropout=0.0).train()
        objective = SoftAttentionObjective() if kind == "soft" else HardAttentionObjective(HardObjectiveSettings())
        torch.manual_seed(1)  # hard attention: the same sampled locations in both
        with autocast("cpu", name):
            terms = objective(decoder(annotations, captions), targets, mask)
        terms.loss.backward()
        gradient = torch.cat([p.grad.flatten() for p in decoder.parameters() if p.grad is not None])
        results[name] = (terms.as_dict(), gradient)
    (fp32, fp32_gradient), (mixed, mixed_gradient) = results["32-true"], results["bf16-mixed"]
    for name, value in fp32.items():
        assert torch.allclose(mixed[name], value, rtol=0.03, atol=0.03), (name, mixed[name], value)
    assert torch.cosine_similarity(mixed_gradient, fp32_gradient, dim=0) > 0.99


def test_a_learned_baseline_is_float32_under_bf16() -> None:
    decoder = tiny_decoder("hard", vocab_size=V, annotation_dim=D, semi_sampling=0.0).train()
    objective = HardAttentionObjective(HardObjectiveSettings(baseline="learned"), hidden_dim=decoder.hidden_dim)
    annotations, captions = batch()
    mask = (captions[:, 1:] != Vocabulary.PAD).float()
    with bf16():
        terms = objective(decoder(annotations, captions), captions[:, 1:], mask)
    assert terms.baseline.dtype == terms.loss.dtype == torch.float32


@pytest.mark.parametrize("beam_size", [1, 3])
def test_search_under_bf16_scores_in_float32_and_finds_fp32s_captions_on_a_confident_model(beam_size: int) -> None:
    """A model whose words are far apart (logits scaled up): bf16's rounding cannot reorder them, so the search finds
    the same captions as in fp32, with log-probabilities in float32 within rounding of fp32's."""
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D).eval()
    with torch.no_grad():
        decoder.output_words.weight.mul_(20)
    annotations, _ = batch()
    with torch.no_grad():
        fp32 = generate(decoder, annotations, decoding=DecodingSettings(), beam_size=beam_size,
                            max_length=6)
        with bf16():
            mixed = generate(decoder, annotations, decoding=DecodingSettings(), beam_size=beam_size,
                            max_length=6)
    assert torch.equal(mixed.tokens, fp32.tokens)
    assert mixed.log_prob.dtype == mixed.alpha.dtype == mixed.beta.dtype == torch.float32
    assert torch.allclose(mixed.log_prob, fp32.log_prob, rtol=0.05, atol=0.05)


def test_sampling_under_bf16_gives_float32_log_probabilities() -> None:
    decoder = tiny_decoder("hard", vocab_size=V, annotation_dim=D).train()
    annotations, _ = batch()
    with bf16():
        sampled = sample(decoder, annotations, samples=2, max_length=5)
    assert sampled.word_log_prob.dtype == sampled.location_log_prob.dtype == torch.float32


def test_a_self_critical_step_under_bf16_keeps_its_reward_and_loss_in_float32() -> None:
    from caption.evaluation.cider_reward import CiderD

    module = tiny_module(WORDS, self_critical={"samples": 2}).train()
    references = [[[4, 5, 6, Vocabulary.END], [5, 6, Vocabulary.END]] for _ in range(B)]
    module.self_critical.image_ids = torch.arange(B)
    module.self_critical.reward = CiderD(references)
    inputs = {"image": torch.rand(B, 3, 32, 32), "image_id": torch.arange(B)}
    with bf16():
        annotations = module.annotations(inputs)
        terms = module.self_critical.step(module.decoder, annotations, inputs["image_id"])
    for name, value in terms.as_dict().items():
        assert value.dtype == torch.float32, name
    terms.loss.backward()  # and the step trains


def test_a_precision_is_one_of_two_spellings_and_anything_else_is_refused_by_name() -> None:
    assert checked_precision("bf16") == "bf16-mixed" and checked_precision("32") == "32-true"
    with pytest.raises(ValueError, match="trainer.precision must be one of auto, 32-true, bf16-mixed.*'16-mixed'"):
        checked_precision("16-mixed", key="trainer.precision")


@pytest.mark.parametrize(("flags", "support"), [({"avx2"}, "none"), ({"avx512f", "avx512_bf16"}, "AVX-512 BF16"),
                                                ({"avx512_bf16", "amx_bf16", "amx_tile"}, "AMX")])
def test_the_cpus_bf16_support_is_read_from_its_flags_and_bf16_is_the_default_only_with_it(
        monkeypatch: pytest.MonkeyPatch, flags: set[str], support: str) -> None:
    monkeypatch.setattr(precisions, "cpu_flags", lambda: flags)
    assert bf16_support("cpu") == support
    assert default_precision("cpu") == ("32-true" if support == "none" else "bf16-mixed")
