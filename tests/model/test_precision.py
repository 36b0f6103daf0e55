"""bf16 mixed precision (`caption.model.precision`): under bf16 autocast the matrix products run in bf16 while α, the
LSTM state, every log-probability, reward, baseline and loss stay float32 — and come out close to fp32's."""

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from kit.models import tiny_decoder, tiny_module

from caption.model.decoding import DecodingSettings
from caption.model.objectives import (
    HardAttentionObjective,
    HardObjectiveSettings,
    SoftAttentionObjective,
    token_log_likelihood,
)
from caption.model.precision import autocast, checked_precision
from caption.model.search import beam_search, generate, greedy, sample
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


@contextlib.contextmanager
def log_softmax_dtypes() -> Iterator[list[torch.dtype]]:
    """The dtype of every log-softmax computed in the block, whichever spelling computed it: F.log_softmax (which calls
    Tensor.log_softmax), Tensor.log_softmax and torch.log_softmax are wrapped to record it."""
    dtypes: list[torch.dtype] = []
    method, function = torch.Tensor.log_softmax, torch.log_softmax

    def recorded(compute):
        def log_softmax(tensor, *args, **kwargs):
            dtypes.append(kwargs.get("dtype") or tensor.dtype)
            return compute(tensor, *args, **kwargs)
        return log_softmax

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "log_softmax", recorded(method))
        patch.setattr(torch, "log_softmax", recorded(function))
        yield dtypes


def assert_all_float32(dtypes: list[torch.dtype]) -> None:
    assert dtypes, "no log-softmax was computed"
    assert set(dtypes) <= {torch.float32, torch.float64}, f"log-softmax computed in {sorted(map(str, set(dtypes)))}"


@contextlib.contextmanager
def output_logits(decoder) -> Iterator[list[torch.Tensor]]:
    """The logits of every call of the deep output's last layer L_o in the block, as the search got them (bf16 under
    autocast)."""
    logits: list[torch.Tensor] = []
    handle = decoder.output_words.register_forward_hook(lambda module, args, output: logits.append(output.detach()))
    try:
        yield logits
    finally:
        handle.remove()


def exact_log_softmax(logits: torch.Tensor, *, never: tuple[int, ...] = ()) -> torch.Tensor:
    """log p in float64 from the logits as given (bf16 ones upcast, not rounded again), `never` words at -inf."""
    logits = logits.double()
    logits[..., list(never)] = float("-inf")
    return F.log_softmax(logits, dim=-1)


def bf16_error(logits: torch.Tensor, index: torch.Tensor, *, never: tuple[int, ...] = ()) -> float:
    """How far the bf16 log-softmax of `logits` lies from the exact one at `index` (along the last axis): what a
    log-softmax computed in bf16 would get wrong on this case."""
    rounded = logits.bfloat16().masked_fill(torch.isin(torch.arange(logits.shape[-1]), torch.tensor(never)),
                                            float("-inf"))
    exact = exact_log_softmax(logits, never=never).gather(-1, index)
    return float((F.log_softmax(rounded, dim=-1).double().gather(-1, index) - exact).abs().max())


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


def test_under_bf16_the_loss_log_softmaxes_the_bf16_logits_in_float32() -> None:
    """The loss's log p(y_t) (`token_log_likelihood`) log-softmaxes the bf16 logits autocast gives it in float32: with
    words tens of nats apart a bf16 log-softmax keeps 3 significant digits (here off by up to 0.125), fp32's 7."""
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(B, T, V, generator=generator) * 15).bfloat16()  # (B, T, V) as the deep output gives them
    targets = torch.randint(len(Vocabulary.SPECIALS), V, (B, T), generator=generator)
    mask = torch.ones(B, T)
    mask[0, -2:] = 0.0
    exact = exact_log_softmax(logits).gather(-1, targets[..., None]).squeeze(-1) * mask  # (B, T) float64
    assert bf16_error(logits, targets[..., None]) > 0.01  # a bf16 log-softmax would show
    with log_softmax_dtypes() as dtypes, bf16():
        ours = token_log_likelihood(logits, targets, mask)
    assert_all_float32(dtypes)
    torch.testing.assert_close(ours.double(), exact, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["soft", "hard"])
def test_every_log_softmax_of_a_training_step_under_bf16_is_computed_in_float32(kind: str) -> None:
    """A teacher-forced step and its loss (eq. 14 or eq. 12) under bf16 autocast: the words' log-softmax and hard
    attention's log α are computed from float32 inputs, never from bf16 ones."""
    decoder = tiny_decoder(kind, vocab_size=V, annotation_dim=D, semi_sampling=0.0).train()
    annotations, captions = batch()
    targets = captions[:, 1:]
    mask = (targets != Vocabulary.PAD).float()
    objective = SoftAttentionObjective() if kind == "soft" else HardAttentionObjective(HardObjectiveSettings())
    with log_softmax_dtypes() as dtypes, bf16():
        objective(decoder(annotations, captions), targets, mask).loss.backward()
    assert_all_float32(dtypes)


def test_greedy_search_under_bf16_scores_its_words_with_the_float32_log_softmax_of_the_bf16_logits() -> None:
    """Greedy search's log p(caption) under bf16 autocast sums, for each word it chose, the log-softmax in float32 of
    the bf16 logits of that step, to float32 rounding; a bf16 log-softmax rounds each."""
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D).eval()
    annotations, _ = batch()
    with log_softmax_dtypes() as dtypes, output_logits(decoder) as logits, bf16():
        found = greedy(decoder, annotations, max_length=6)
    assert_all_float32(dtypes)
    assert found.log_prob.dtype == torch.float32 and len(logits) == found.tokens.shape[1]
    words = found.tokens.T[..., None]  # (T, B, 1): each step's chosen word
    exact = torch.stack([exact_log_softmax(step) for step in logits]).gather(-1, words).squeeze(-1)  # (T, B)
    exact = torch.where(words.squeeze(-1) != Vocabulary.PAD, exact, 0.0).sum(0)  # (B,): words and <end>, not <pad>
    assert max(bf16_error(step, words[t]) for t, step in enumerate(logits)) > 1e-3
    torch.testing.assert_close(found.log_prob.double(), exact, rtol=1e-6, atol=1e-5)


def test_beam_search_under_bf16_scores_its_beams_with_the_float32_log_softmax_of_the_bf16_logits() -> None:
    """Beam search under bf16 autocast, two words deep, every beam returned: each beam's score is log p(w_1) +
    log p(w_2 | w_1) (log p(<end>) alone for a beam that ended at once), each the float32 log-softmax of the bf16 logits
    of the row that held its prefix, to float32 rounding; a bf16 log-softmax rounds them."""
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D).eval()
    annotations, _ = batch()
    k = 3
    fed: list[torch.Tensor] = []  # each step's previous words (B·k,)
    handle = decoder.embedding.register_forward_hook(lambda module, args, output: fed.append(args[0].clone()))
    with log_softmax_dtypes() as dtypes, output_logits(decoder) as logits, bf16():
        found = beam_search(decoder, annotations, beam_size=k, max_length=2, num_best=k)
    handle.remove()
    assert_all_float32(dtypes)
    assert found.log_prob.dtype == torch.float32 and len(logits) == 2 and found.tokens.shape == (B * k, 2)
    first, second = (exact_log_softmax(step) for step in logits)  # (B·k, V) each
    exact, errors = [], []
    for row, (w1, w2) in enumerate(found.tokens.tolist()):
        image = row // k  # the image's k rows start at image·k; at the first step they are all alike
        score = first[image * k, w1]
        errors.append(bf16_error(logits[0][image * k], torch.tensor([w1])))
        if w1 != Vocabulary.END:  # the row that was fed w_1 (the first step's beams are distinct words)
            parent = image * k + fed[1][image * k:(image + 1) * k].tolist().index(w1)
            score = score + second[parent, w2]
            errors.append(bf16_error(logits[1][parent], torch.tensor([w2])))
        exact.append(score)
    assert max(errors) > 1e-3
    torch.testing.assert_close(found.log_prob.double(), torch.stack(exact), rtol=1e-6, atol=1e-5)


def test_sampling_under_bf16_reports_the_float32_log_softmax_of_the_bf16_logits() -> None:
    """`sample` (self-critical training) under bf16 autocast: each drawn word's log p, the one the REINFORCE gradient
    flows through, is the float32 log-softmax of that step's bf16 logits (<pad> and <start> excluded), to float32
    rounding; hard attention's log α too is computed in float32."""
    decoder = tiny_decoder("hard", vocab_size=V, annotation_dim=D, dropout=0.0).train()
    annotations, _ = batch()
    torch.manual_seed(0)
    with log_softmax_dtypes() as dtypes, output_logits(decoder) as logits, bf16():
        sampled = sample(decoder, annotations, samples=2, max_length=5)
    assert_all_float32(dtypes)
    words = sampled.tokens.T[..., None]  # (T, B·k, 1)
    never = (Vocabulary.PAD, Vocabulary.START)  # never drawn: the distribution is renormalised without them
    exact = torch.stack([exact_log_softmax(step, never=never) for step in logits]).gather(-1, words).squeeze(-1)
    exact = torch.where(sampled.mask.T > 0, exact, 0.0).T  # (B·k, T): the words and <end>, zero after
    assert max(bf16_error(step, words[t], never=never) for t, step in enumerate(logits)) > 1e-3
    assert sampled.word_log_prob.dtype == torch.float32
    torch.testing.assert_close(sampled.word_log_prob.detach().double(), exact, rtol=1e-6, atol=1e-6)


def test_under_bf16_the_lstm_state_is_updated_in_float32() -> None:
    """Eq. 2-3 under bf16 autocast, c_t = f⊙c_{t-1} + i⊙g and h_t = o⊙tanh(c_t), take c_{t-1} and give c_t and h_t
    in float32, equal to an fp32 step's from the same state to float32 rounding over 8 steps. The gates are made exact
    in both (saturated at ±30, or 0: σ and tanh give 0, 1/2, 1, ±1), so only the state's arithmetic can round: a bf16
    state would keep 3 significant digits of c, its error carried on from step to step."""
    decoder = tiny_decoder("soft", vocab_size=V, annotation_dim=D, dropout=0.0).eval()
    n = decoder.hidden_dim
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # every gate the bias of the word side: the same at every step, exact in bf16
        decoder.word_to_gates.weight.zero_()
        decoder.word_to_gates.bias.copy_(torch.tensor([-30.0, 0.0, 30.0])[torch.randint(3, (4 * n,),
                                                                                        generator=generator)])
        decoder.hidden_to_all.weight[:4 * n].zero_()
        decoder.hidden_to_all.bias[:4 * n].zero_()
        decoder.context_to_gates.weight.zero_()
    annotations, captions = batch()
    with torch.no_grad(), bf16():
        start = decoder.init_state(annotations)  # float32, from bf16 matrix products: the same for both runs
    states = {}
    for name in ("32-true", "bf16-mixed"):
        state = start
        with torch.no_grad(), autocast("cpu", name):
            projected = decoder.project_annotations(annotations)
            for t in range(8):
                _, word_gates = decoder.word_gates(captions[:, t % T])
                state = decoder.step(word_gates, state, annotations, projected).state
        states[name] = state
    fp32, mixed = states["32-true"], states["bf16-mixed"]
    assert (fp32.c.bfloat16().float() - fp32.c).abs().max() > 1e-3  # a bf16 state would show
    assert mixed.h.dtype == mixed.c.dtype == torch.float32
    torch.testing.assert_close(mixed.c, fp32.c, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(mixed.h, fp32.h, rtol=1e-6, atol=1e-6)


def test_a_self_critical_step_under_bf16_keeps_its_reward_and_loss_in_float32() -> None:
    from caption.evaluation.cider_reward import CiderD

    module = tiny_module(WORDS, self_critical={"samples": 2}).train()
    references = [[[4, 5, 6, Vocabulary.END], [5, 6, Vocabulary.END]] for _ in range(B)]
    module.self_critical.image_ids = torch.arange(B)
    module.self_critical.reward = CiderD(references)
    inputs = {"image": torch.rand(B, 3, 32, 32), "image_id": torch.arange(B)}
    with bf16():
        annotations = module.model.annotations(inputs)
        terms = module.self_critical.step(module.model.decoder, annotations, inputs["image_id"])
    for name, value in terms.as_dict().items():
        assert value.dtype == torch.float32, name
    terms.loss.backward()  # and the step trains


def test_a_precision_is_one_of_two_spellings_and_anything_else_is_refused_by_name() -> None:
    assert checked_precision("bf16") == "bf16-mixed" and checked_precision("32") == "32-true"
    with pytest.raises(ValueError, match="trainer.precision must be one of auto, 32-true, bf16-mixed.*'16-mixed'"):
        checked_precision("16-mixed", key="trainer.precision")

