"""Attention over the annotation vectors: the scorer of eq. 4 and the two φ functions of sec. 4.

Notation (Xu et al., 2015), with k rows per image (k = 1 in training, the beam size in beam search):
    a      annotations, L vectors a_i ∈ R^D per image                         (B, L, D)
    h      previous LSTM hidden state h_{t-1}                                 (B·k, n)
    e_t    logits e_ti = f_att(a_i, h_{t-1}) = w · tanh(W_a a_i + W_h h_{t-1}) + c  (B·k, L)   eq. 4
    α_t    attention weights softmax(e_t)                                      (B·k, L)   eq. 5
    ẑ_t    context φ: soft Σ_i α_ti a_i (sec. 4.2), hard a_{s_t} (sec. 4.1)    (B·k, D)
    s_t    hard attention: the sampled location, s_t ~ Multinoulli_L(α_t)     (B·k,)     eq. 8
W_a a_i depends only on the image: `project` runs once per image, broadcast to its k rows, never copied. Hard
attention uses the expected context for semi-sampled images and, by default, at evaluation (original code).
More: docs/paper.md#where-each-equation-lives.
"""

from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from caption.errors import check_range
from caption.model.decoding import HardEvalContext
from caption.model.precision import at_least_float32
from caption.model.weight_settings import defines_weights

@dataclass(frozen=True)
class AttentionSettings:
    """f_att (eq. 4) and φ (sec. 4) (`model.attention:` in a config).

    Args:
        kind: "soft" (sec. 4.2, trained on eq. 14) or "hard" (sec. 4.1, trained on eq. 12; `model.hard`): a name of
            `caption.model.kinds.KINDS`.
        dim: size of the hidden layer of f_att (eq. 4).
        layers: linear layers on the annotation side of f_att (original code: n_layers_att).
        gate: use the gate β of sec. 4.2.1 on the context.
        inverse_temperature: multiplies the attention logits before the softmax (0: uniform α).
    """

    kind: str = defines_weights("soft")             # paper: both; soft is the one trained by backpropagation alone
    dim: int = defines_weights(512)                 # original code: f_att's hidden layer is ctx_dim (512) wide
    layers: int = defines_weights(2)                # original code (COCO): n_layers_att=2
    gate: bool = defines_weights(True)              # paper sec. 4.2.1; original code: selector=True
    inverse_temperature: float = 1.0                # original code: temperature=1

    def __post_init__(self) -> None:
        check_range("attention.dim", self.dim, low=1)
        check_range("attention.layers", self.layers, low=1)
        check_range("attention.inverse_temperature", self.inverse_temperature, low=0)  # 0: uniform α


class AdditiveScorer(nn.Module):
    """f_att of eq. 4: e_ti = w · tanh(W_a a_i + W_h h_{t-1}) + c.

    `layers > 1` stacks extra linear maps on the annotation side, as the original code's
    `n_layers_att`, each followed by a tanh (capgen.py, `lstm_cond_layer`: `if lidx < n_layers_att` is
    always true inside `for lidx in xrange(1, n_layers_att)`; its comment describes an older version):
        p_1 = W_a a_i + b_a,  p_k = tanh(W_k p_{k-1} + b_k) for k = 2..layers.
    """

    def __init__(self, *, annotation_dim: int, attention_dim: int, layers: int):
        super().__init__()
        self.annotation_projection = nn.ModuleList(
            [nn.Linear(annotation_dim, attention_dim)]
            + [nn.Linear(attention_dim, attention_dim) for _ in range(layers - 1)]
        )
        self.score = nn.Linear(attention_dim, 1)  # w and c

    def project(self, annotations: Tensor) -> Tensor:
        """W_a a_i for every location, once per image: (B, L, D) -> (B, L, A)."""
        first, *extra = self.annotation_projection
        projected = first(annotations)  # (B, L, A)
        for layer in extra:
            projected = torch.tanh(layer(projected))  # (B, L, A)
        return projected

    def forward(self, projected: Tensor, query: Tensor) -> Tensor:
        """Logits e_t from the projected annotations (B, L, A) and W_h h_{t-1} of R = B·k rows (R, A): (R, L)."""
        B, L, A = projected.shape
        hidden = projected[:, None] + query.view(B, -1, 1, A)  # W_a a_i + W_h h_{t-1}: (B, k, L, A)
        return self.score(torch.tanh_(hidden)).view(-1, L)  # tanh in place: one (B, k, L, A) buffer, not two


@dataclass
class AttentionOutput:
    """What one attention step returns, for B·k rows (k per image)."""

    context: Tensor  # φ(a, α_t) before the β gate                          (B·k, D)
    alpha: Tensor  # attention weights α_t                                  (B·k, L)
    location: Tensor | None = None  # hard: sampled or chosen location s_t  (B·k,)
    log_alpha_location: Tensor | None = None  # hard: log α_{t, s_t}          (B·k,)
    entropy: Tensor | None = None  # hard: H(α_t) = -Σ_i α_ti log α_ti       (B·k,)


def expected_context(annotations: Tensor, alpha: Tensor) -> Tensor:
    """Σ_i α_ti a_i for R = B·k rows of weights (R, L) over B images' annotations (B, L, D): (R, D)."""
    B, L, D = annotations.shape
    return torch.bmm(alpha.view(B, -1, L), annotations).view(-1, D)  # (B, k, L) @ (B, L, D)


class SoftAttention(nn.Module):
    """Deterministic soft attention: the expected context Σ_i α_ti a_i.

    annotations (B, L, D) and logits e_t (R, L) for R = B·k rows, k consecutive rows per image.
    """

    locates = False  # the context is an expectation over every location

    def forward(self, annotations: Tensor, logits: Tensor, semi_sampled: Tensor | None = None) -> AttentionOutput:
        alpha = at_least_float32(logits).softmax(dim=-1)  # (R, L), fp32 under bf16 autocast: each row sums to 1
        return AttentionOutput(context=expected_context(annotations, alpha), alpha=alpha)


class HardAttention(nn.Module):
    """Stochastic hard attention: one location s_t ~ Multinoulli_L(α_t) per word.

    Training: sample s_t (no gradient flows through the sample; the REINFORCE term in
    `caption.model.objectives` trains f_att through log α_{t,s_t}). `semi_sampled` marks the images that
    use the expected context this sequence. Evaluation: `eval_context` picks the expected context
    (the original code's choice), the argmax location, or a sample.
    """

    locates = True  # one location per word: s_t

    def __init__(self, *, eval_context: HardEvalContext):
        super().__init__()
        self.eval_context = eval_context

    def sample(self, alpha: Tensor) -> Tensor:
        """s_t ~ Multinoulli_L(α_t): (R, L) -> (R,).

        A NaN row (a diverged model) samples uniformly instead of crashing here, so that the loss turns
        NaN and `model.optimization.on_nonfinite_loss` decides what happens.
        """
        return torch.multinomial(alpha.nan_to_num(nan=1.0), 1).squeeze(1)

    def forward(self, annotations: Tensor, logits: Tensor, semi_sampled: Tensor | None = None) -> AttentionOutput:
        """annotations (B, L, D), logits e_t (R, L) for R = B·k rows, k consecutive rows per image."""
        log_alpha = F.log_softmax(at_least_float32(logits), dim=-1)  # (R, L), fp32 under bf16 autocast (eq. 12)
        alpha = log_alpha.exp()
        entropy = -(alpha * log_alpha).sum(-1)  # (R,)
        expected = expected_context(annotations, alpha)  # (R, D)
        mode = "sample" if self.training else self.eval_context
        if mode == "expected":
            location = alpha.argmax(-1)  # shown in overlays; the context is the expectation
            return AttentionOutput(expected, alpha, location, log_alpha.gather(1, location[:, None]).squeeze(1),
                                   entropy)
        if mode == "sample":
            location = self.sample(alpha.detach())  # (R,)
        else:
            location = alpha.argmax(-1)
        rows = torch.arange(logits.shape[0], device=logits.device)
        image = rows // (logits.shape[0] // annotations.shape[0])  # the image of each row
        context = annotations[image, location]  # a_{s_t}: (R, D)
        if semi_sampled is not None:
            context = torch.where(semi_sampled[:, None], expected, context)
        log_alpha_location = log_alpha[rows, location]  # (R,)
        return AttentionOutput(context, alpha, location, log_alpha_location, entropy)
