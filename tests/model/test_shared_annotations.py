"""k rows per image (beam search's hypotheses) share the image's annotations exactly as copies would.
(That a batch of images decodes as each image alone is tests/model/test_search.py's.)"""

import torch

from caption.model.attention import AdditiveScorer, HardAttention, SoftAttention

B, k, L, D, A = 3, 4, 5, 6, 7


def test_rows_per_image_equal_copied_annotations():
    torch.manual_seed(0)
    scorer = AdditiveScorer(annotation_dim=D, attention_dim=A, layers=1)
    annotations = torch.randn(B, L, D)
    projected = scorer.project(annotations)
    query = torch.randn(B * k, A)  # k consecutive rows per image
    copies, projected_copies = annotations.repeat_interleave(k, dim=0), projected.repeat_interleave(k, dim=0)
    logits = scorer(projected, query)
    by_hand = scorer.score(torch.tanh(projected_copies + query[:, None, :])).squeeze(-1)  # e_ti, one row at a time
    torch.testing.assert_close(logits, by_hand)
    torch.testing.assert_close(SoftAttention()(annotations, logits).context, SoftAttention()(copies, logits).context)
    argmax = HardAttention(eval_context="argmax").eval()
    torch.testing.assert_close(argmax(annotations, logits).context, copies[torch.arange(B * k), logits.argmax(-1)])
    torch.manual_seed(1)
    sampled = HardAttention(eval_context="expected").train()(annotations, logits)
    assert not torch.equal(sampled.location, logits.argmax(-1)), "the check below must not pass by argmax alone"
    torch.testing.assert_close(sampled.context, copies[torch.arange(B * k), sampled.location])
