"""FLOPs of the decoder, counted analytically from its dimensions: what `benchmarks/speed.py` divides by time,
and the FLOPs per training batch from which `caption.training.callbacks.ModelFlopsUtilization` logs MFU on a GPU.

Only matrix products count, 2 FLOPs a multiply-add, over real tokens only. Dimensions: L locations, D annotation
size, m embedding, n LSTM, A attention, V vocabulary. Backward costs a product's forward FLOPs once per operand that
needs a gradient: once for the products with the annotations (data), twice for the others. The formulas, per image
and per word: docs/measurements.md#how-flops-are-counted; `tests/model/test_flops.py` checks them against
`torch.utils.flop_counter.FlopCounterMode` on the real modules.
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
