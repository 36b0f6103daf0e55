"""The analytic FLOP count of caption/model/flops.py equals what PyTorch's own counter sees, product by product."""

import pytest
import torch
from kit.models import tiny_decoder
from torch.utils.flop_counter import FlopCounterMode

from caption.model.decoder import Decoder
from caption.model.flops import DecoderFlops
from caption.model.objectives import hard_attention_loss, soft_attention_loss
from caption.model.search import beam_search, greedy

B, L, D, V = 3, 7, 6, 13


def make_decoder(attention: str, **options) -> Decoder:
    return tiny_decoder(attention, vocab_size=V, annotation_dim=D, embed_dim=5, attention_dim=4, **options)


def counted(run) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    return counter.get_total_flops()


@pytest.mark.parametrize("attention", ["soft", "hard"])
@pytest.mark.parametrize("options", [{}, {"layers": 2, "init_layers": 2},
                                     {"layers": 3, "init_layers": 3, "context_output": False}])
def test_training_flops_match_the_counter(attention, options):
    decoder = make_decoder(attention, **options).train()
    annotations = torch.randn(B, L, D)
    captions = torch.randint(4, V, (B, 6))  # same-length batch: T = 5 real tokens each
    targets, mask = captions[:, 1:], torch.ones(B, 5)

    def step():
        output = decoder(annotations, captions)
        if attention == "soft":
            terms = soft_attention_loss(output, targets, mask, alpha_c=1.0)
        else:
            terms = hard_attention_loss(output, targets, mask, baseline=torch.zeros(()), reinforce_weight=0.1,
                                        entropy_weight=0.01, reward="mean", credit="caption")
        terms.loss.backward()

    assert counted(step) == DecoderFlops.of(decoder, L).training(captions=B, tokens=B * 5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_generation_flops_match_the_counter(beam_size):
    decoder = make_decoder("soft", layers=2, init_layers=2).eval()
    annotations = torch.randn(B, L, D)
    decoded = []
    if beam_size == 1:
        flops = counted(lambda: decoded.append(greedy(decoder, annotations, max_length=6)))
    else:
        flops = counted(lambda: decoded.append(beam_search(decoder, annotations, beam_size=beam_size, max_length=6)))
    steps = decoded[0].tokens.shape[1]
    assert flops == DecoderFlops.of(decoder, L).generation(images=B, rows=B * beam_size, steps=steps)
