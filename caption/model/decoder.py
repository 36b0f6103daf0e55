"""The attention LSTM decoder of sec. 3.1.2, with the deep output layer of eq. 7.

One step t = 1..T, on B·k rows (k rows per image: k = 1 in training, the beam size in beam search):
    ẑ_t         gated context β_t · φ(a, α_t), β_t = σ(f_β(h_{t-1})) (sec. 4.2.1)    (B·k, D)
    i,f,o,g     LSTM gates (eq. 1): T_{D+m+n, n}[E y_{t-1}; h_{t-1}; ẑ_t]          (B·k, 4n)
    c_t, h_t    memory and hidden state (eq. 2-3)                                 (B·k, n)
    p(y_t)      ∝ exp(L_o tanh(E y_{t-1} + L_h h_t + L_z ẑ_t))  (eq. 7; tanh from the original code)
    h_0, c_0    tanh(f_init,h / f_init,c (mean_i a_i))  (eq. 5; hidden ReLU layers with dropout: original code)
Every matmul that depends only on h_{t-1} (the recurrence, the query W_h h_{t-1}, f_β) is one fused `nn.Linear`; the
word side of the LSTM input and the deep output run for all steps at once, so the loop holds two matmuls and the
attention. More: docs/paper.md#where-each-equation-lives.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from caption.errors import check_range
from caption.model.attention import AdditiveScorer, AttentionSettings
from caption.model.precision import at_least_float32
from caption.model.weight_settings import defines_weights


@dataclass
class DecoderState:
    """Recurrent state carried from step to step, B·k rows (k per image: the beam in beam search, else 1)."""

    h: Tensor  # hidden state h_{t-1}  (B·k, n)
    c: Tensor  # memory c_{t-1}        (B·k, n)


@dataclass
class StepOutput:
    """One decoding step (teacher-forced or free-running), B·k rows as the state's."""

    state: DecoderState
    context: Tensor  # gated context ẑ_t                    (B·k, D)
    alpha: Tensor  # attention weights α_t                   (B·k, L)
    beta: Tensor  # gate β_t (ones when the gate is off)     (B·k,)
    location: Tensor | None  # hard attention: s_t            (B·k,)
    log_alpha_location: Tensor | None  # hard: log α_{t,s_t}  (B·k,)
    entropy: Tensor | None  # hard: H(α_t)                     (B·k,)


@dataclass
class DecoderOutput:
    """Teacher-forced decoding of whole captions; T = caption length without <start>."""

    logits: Tensor  # unnormalised log p(y_t | a, y_{<t}, s)  (B, T, V)
    alpha: Tensor  # attention weights                       (B, T, L)
    beta: Tensor  # gate values                              (B, T)
    location: Tensor | None = None  # hard: s_t              (B, T)
    log_alpha_location: Tensor | None = None  # hard: log α_{t,s_t}  (B, T)
    entropy: Tensor | None = None  # hard: H(α_t)            (B, T)
    semi_sampled: Tensor | None = None  # hard, training: used the expected context  (B,)
    hidden: Tensor | None = None  # h_{t-1}, the state each step attends from (B, T, n)


def _stack(values: list[Tensor | None]) -> Tensor | None:
    return None if values[0] is None else torch.stack(values, dim=1)


@dataclass(frozen=True)
class DecoderSettings:
    """The LSTM of sec. 3.1.2 and its deep output (eq. 7) (`model.decoder:` in a config).

    Args:
        embed_dim: m, the word embedding size (also the deep output's hidden size, eq. 7).
        hidden_dim: n, the LSTM size.
        init_layers: layers of f_init (eq. 5; 1 = one tanh layer, more adds ReLU layers first).
        prev_word_output: add E y_{t-1} in the deep output (eq. 7; original code: prev2out).
        context_output: add L_z ẑ_t in the deep output (eq. 7; original code: ctx2out).
        dropout: dropout probability on h_t and on the deep output's hidden layer.
    """

    embed_dim: int = defines_weights(512)           # original code (COCO): dim_word=512
    hidden_dim: int = defines_weights(1800)         # original code (COCO): dim=1800
    init_layers: int = defines_weights(2)           # original code (COCO): n_layers_init=2
    prev_word_output: bool = defines_weights(True)  # paper eq. 7; original code: prev2out=True
    context_output: bool = defines_weights(True)    # paper eq. 7; original code: ctx2out=True
    dropout: float = 0.5                            # paper: dropout; original code: use_dropout=True, p = 0.5

    def __post_init__(self) -> None:
        check_range("decoder.init_layers", self.init_layers, low=1)
        check_range("decoder.dropout", self.dropout, low=0, high=1)


class Decoder(nn.Module):
    """LSTM decoder that attends over annotations at every word.

    Args:
        vocab_size: V, size of the output vocabulary (with the special tokens).
        annotation_dim: D, size of each annotation vector.
        settings: the LSTM and its deep output.
        attention: f_att's settings.
        phi: φ, the attention of its kind (`caption.model.kinds.Kind.phi`).
        semi_sampling: hard attention, training: probability per image of using the expected context (sec. 4.1;
            `model.hard.semi_sampling`). The original code's `semi_sampling_p` is the complement.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        annotation_dim: int,
        settings: DecoderSettings,
        attention: AttentionSettings,
        phi: nn.Module,
        semi_sampling: float = 0.0,
    ):
        super().__init__()
        embed_dim, hidden_dim, dropout = settings.embed_dim, settings.hidden_dim, settings.dropout
        self.hidden_dim = hidden_dim
        self.attention_dim = attention.dim
        self.gate = attention.gate
        self.prev_word_output = settings.prev_word_output
        self.inverse_temperature = attention.inverse_temperature
        self.semi_sampling = semi_sampling

        self.embedding = nn.Embedding(vocab_size, embed_dim)  # E
        # f_init (eq. 5): shared ReLU layers over mean_i a_i, each followed by dropout (capgen.py, build_model),
        # then one tanh layer each for h_0 and c_0.
        self.init_hidden_layers = nn.Sequential(*[
            module
            for _ in range(settings.init_layers - 1)
            for module in (nn.Linear(annotation_dim, annotation_dim), nn.ReLU(), nn.Dropout(dropout))
        ])
        self.init_h = nn.Linear(annotation_dim, hidden_dim)
        self.init_c = nn.Linear(annotation_dim, hidden_dim)
        # f_att (eq. 4) and φ (sec. 4).
        self.scorer = AdditiveScorer(annotation_dim=annotation_dim, attention_dim=attention.dim,
                                     layers=attention.layers)
        self.attention = phi
        # LSTM (eq. 1): T [E y_{t-1}; h_{t-1}; ẑ_t] split by what each part depends on.
        self.word_to_gates = nn.Linear(embed_dim, 4 * hidden_dim)  # once for all steps
        self.context_to_gates = nn.Linear(annotation_dim, 4 * hidden_dim, bias=False)
        # Everything computed from h_{t-1}: LSTM recurrence (4n), attention query W_h (A), f_β (1).
        self.hidden_to_all = nn.Linear(hidden_dim, 4 * hidden_dim + attention.dim + 1)
        # Deep output (eq. 7).
        self.dropout = nn.Dropout(dropout)
        self.output_hidden = nn.Linear(hidden_dim, embed_dim)  # L_h
        self.output_context = (nn.Linear(annotation_dim, embed_dim, bias=False)  # L_z
                               if settings.context_output else None)
        self.output_words = nn.Linear(embed_dim, vocab_size)  # L_o

    @property
    def is_hard(self) -> bool:
        """Whether φ picks one location per word (hard attention), not an expectation (soft)."""
        return self.attention.locates

    def init_state(self, annotations: Tensor) -> DecoderState:
        """h_0, c_0 from the mean annotation (eq. 5)."""
        mean = self.init_hidden_layers(annotations.mean(dim=1))  # (B, D)
        # fp32 under bf16 autocast, and so every step's state: bf16's rounding of c_t would compound over the steps
        return DecoderState(h=at_least_float32(torch.tanh(self.init_h(mean))),
                            c=at_least_float32(torch.tanh(self.init_c(mean))))

    def project_annotations(self, annotations: Tensor) -> Tensor:
        """W_a a_i of eq. 4, once per image: (B, L, D) -> (B, L, A)."""
        return self.scorer.project(annotations)

    def sample_semi_sampling(self, images: Tensor) -> Tensor | None:
        """Hard attention, training: which rows use the expected context this sequence (B,), one coin per image
        (sec. 4.1: "with probability 0.5 for a given image"): `images` (B,) numbers each row's image 0..U-1."""
        if not (self.is_hard and self.training and self.semi_sampling > 0):
            return None
        coins = torch.rand(int(images.max()) + 1, device=images.device) < self.semi_sampling  # (U,)
        return coins[images]  # (B,)

    def step(
        self,
        word_gates: Tensor,
        state: DecoderState,
        annotations: Tensor,
        projected: Tensor,
        semi_sampled: Tensor | None = None,
    ) -> StepOutput:
        """One step of eq. 1-3 given the word part of the LSTM input, W_x E y_{t-1} + b (R, 4n).

        The state has R = B·k rows for the B images of `annotations` (B, L, D) and `projected` (B, L, A),
        k consecutive rows per image: k = 1 in training, the beam size in beam search.
        """
        n, A = self.hidden_dim, self.attention_dim
        from_hidden = self.hidden_to_all(state.h)  # (R, 4n + A + 1)
        hidden_gates, query, beta_logit = from_hidden.split([4 * n, A, 1], dim=-1)
        logits = self.scorer(projected, query) * self.inverse_temperature  # e_t: (R, L)
        attended = self.attention(annotations, logits, semi_sampled)
        beta_logit = at_least_float32(beta_logit.squeeze(-1))  # fp32 under bf16 autocast, as α: both are reported
        beta = torch.sigmoid(beta_logit) if self.gate else torch.ones_like(beta_logit)  # (R,)
        context = beta[:, None] * attended.context  # ẑ_t: (R, D)
        gates = word_gates + hidden_gates + self.context_to_gates(context)  # (R, 4n)
        i, f, o, g = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * state.c + torch.sigmoid(i) * torch.tanh(g)  # (R, n)
        h = torch.sigmoid(o) * torch.tanh(c)  # (R, n)
        return StepOutput(
            DecoderState(h, c), context, attended.alpha, beta,
            attended.location, attended.log_alpha_location, attended.entropy,
        )

    def word_gates(self, words: Tensor) -> tuple[Tensor, Tensor]:
        """Embeddings E y and their LSTM input part W_x E y + b, for any shape of word ids."""
        embedded = self.embedding(words)  # (..., m)
        return embedded, self.word_to_gates(embedded)  # (..., 4n)

    def output_logits(self, embedded: Tensor, h: Tensor, context: Tensor) -> Tensor:
        """Deep output (eq. 7): L_o tanh(E y_{t-1} + L_h h_t + L_z ẑ_t), for any leading shape."""
        hidden = self.output_hidden(self.dropout(h))  # (..., m)
        if self.prev_word_output:
            hidden = hidden + embedded
        if self.output_context is not None:
            hidden = hidden + self.output_context(context)
        return self.output_words(self.dropout(torch.tanh(hidden)))  # (..., V)

    def forward(self, annotations: Tensor, captions: Tensor, images: Tensor | None = None) -> DecoderOutput:
        """Teacher-forced pass. captions: <start> w_1 .. w_k <end> <pad>.. (B, T+1); predicts captions[:, 1:].
        `images` (B,): which image each row describes, 0..U-1 (rows of one image share a semi-sampling coin);
        None: a row per image."""
        B, T = captions.shape[0], captions.shape[1] - 1
        projected = self.project_annotations(annotations)  # (B, L, A)
        embedded, word_gates = self.word_gates(captions[:, :-1])  # (B, T, m), (B, T, 4n)
        state = self.init_state(annotations)
        h_0 = state.h  # (B, n)
        images = torch.arange(B, device=annotations.device) if images is None else images
        semi_sampled = self.sample_semi_sampling(images)
        steps = []
        for t in range(T):
            out = self.step(word_gates[:, t], state, annotations, projected, semi_sampled)
            state = out.state
            steps.append(out)
        hs = torch.stack([s.state.h for s in steps], dim=1)  # (B, T, n)
        contexts = torch.stack([s.context for s in steps], dim=1)  # (B, T, D)
        return DecoderOutput(
            logits=self.output_logits(embedded, hs, contexts),  # (B, T, V)
            alpha=torch.stack([s.alpha for s in steps], dim=1),  # (B, T, L)
            beta=torch.stack([s.beta for s in steps], dim=1),  # (B, T)
            location=_stack([s.location for s in steps]),
            log_alpha_location=_stack([s.log_alpha_location for s in steps]),
            entropy=_stack([s.entropy for s in steps]),
            semi_sampled=semi_sampled,
            hidden=torch.cat([h_0[:, None], hs[:, :-1]], dim=1),  # h_{t-1}: (B, T, n)
        )
