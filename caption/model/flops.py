"""FLOPs of the decoder, counted analytically from its dimensions: what `benchmarks/speed.py` divides by time,
and the FLOPs per training batch from which `caption.training.callbacks.ModelFlopsUtilization` logs MFU on a GPU.

One multiply-add is 2 FLOPs; only matrix products are counted (every linear layer, the attention
score w·tanh(..) and the context Σ_i α_ti a_i); element-wise work (tanh, sigmoid, softmax, dropout,
the LSTM cell, Adam) and embedding look-ups count 0. Dimensions: L locations, D annotation size,
m embedding, n LSTM, A attention, V vocabulary.

    once per image      W_a a_i (+ extra f_att layers): 2·L·D·A (+ 2·L·A·A each); f_init: 2·D·2n (+ 2·D·D each)
    once per word       E y → gates 2·m·4n;  h_{t-1} → gates, query, β: 2·n·(4n + A + 1);  score 2·L·A;
                        context 2·L·D;  ẑ_t → gates 2·D·4n;  deep output 2·n·m (+ 2·D·m) + 2·m·V

Backward: a product costs its forward FLOPs once for each operand that needs a gradient (the
weight and/or the input). The annotations are data, so W_a's first layer, f_init's first layer and
the context's Σ_i α_ti a_i cost 1× backward; every other product costs 2×, so one training step of
those is 3× forward. Counted over real tokens only (each caption's words and its <end>): the
FLOPs the model needs, not those a padded batch spends. `tests/model/test_flops.py` checks every
figure here against `torch.utils.flop_counter.FlopCounterMode` on the real modules.
"""

from dataclasses import dataclass

from caption.model.decoder import Decoder


@dataclass(frozen=True)
class DecoderFlops:
    """Forward FLOPs of one image and of one word, split by how much their backward costs."""

    image_data: int  # products with the annotations (W_a, f_init's first layer): 1× backward
    image_trained: int  # products of trained activations (extra f_att / f_init layers): 2× backward
    word_data: int  # Σ_i α_ti a_i: 1× backward
    word_trained: int  # every other per-word product: 2× backward

    @classmethod
    def of(cls, decoder: Decoder, locations: int) -> "DecoderFlops":
        L, n, A = locations, decoder.hidden_dim, decoder.attention_dim
        D, m = decoder.context_to_gates.in_features, decoder.embedding.embedding_dim
        V = decoder.output_words.out_features
        attention_layers = len(decoder.scorer.annotation_projection)
        init_hidden = sum(1 for layer in decoder.init_hidden_layers if hasattr(layer, "weight"))
        first_init = 2 * D * (D if init_hidden else 2 * n)  # f_init's first layer reads mean_i a_i
        output = 2 * n * m + (2 * D * m if decoder.output_context is not None else 0) + 2 * m * V
        return cls(
            image_data=2 * L * D * A + first_init,
            image_trained=(attention_layers - 1) * 2 * L * A * A
            + max(init_hidden - 1, 0) * 2 * D * D + (2 * D * 2 * n if init_hidden else 0),
            word_data=2 * L * D,
            word_trained=2 * m * 4 * n + 2 * n * (4 * n + A + 1) + 2 * L * A + 2 * D * 4 * n + output,
        )

    @property
    def image(self) -> int:
        return self.image_data + self.image_trained

    @property
    def word(self) -> int:
        return self.word_data + self.word_trained

    def training(self, captions: int, tokens: int) -> int:
        """Forward + backward of `captions` captions holding `tokens` real target tokens in all."""
        per_image = 2 * self.image_data + 3 * self.image_trained
        per_word = 2 * self.word_data + 3 * self.word_trained
        return captions * per_image + tokens * per_word

    def generation(self, images: int, rows: int, steps: int) -> int:
        """Greedy (rows = images) or beam search (rows = images × beam) run for `steps` words."""
        return images * self.image + rows * steps * self.word
