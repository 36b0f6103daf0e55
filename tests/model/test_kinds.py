"""An attention kind is one entry of `caption.model.kinds.KINDS`: a kind defined in this file alone trains, is
checkpointed and decodes through the command line; an unknown kind is a ConfigError naming the kinds there are."""

import json

import pytest
import torch
from kit.figures import GRACE_HOPPER
from kit.tiny import fit_args
from torch import Tensor, nn

from caption import Captioner
from caption.cli import main
from caption.errors import ConfigError
from caption.model.attention import AttentionOutput, expected_context
from caption.model.kinds import KINDS, Kind
from caption.model.objectives import SoftAttentionObjective, SoftObjectiveSettings
from caption.training.module import CaptionModule

WORDS = ["<pad>", "<start>", "<end>", "<unk>", "a"]


class UniformAttention(nn.Module):
    """φ that looks everywhere alike: α_ti = 1/L, the context the mean annotation (attention's ablation)."""

    locates = False

    def forward(self, annotations: Tensor, logits: Tensor, semi_sampled: Tensor | None = None) -> AttentionOutput:
        alpha = torch.full_like(logits.float(), 1.0 / logits.shape[-1])  # (R, L)
        return AttentionOutput(context=expected_context(annotations, alpha), alpha=alpha)


@pytest.fixture
def uniform(monkeypatch):
    monkeypatch.setitem(KINDS, "uniform", Kind(attention=UniformAttention, objective=SoftAttentionObjective,
                                               settings=SoftObjectiveSettings, group="soft"))


@pytest.mark.slow
def test_a_kind_defined_here_alone_trains_and_decodes_through_the_command_line(uniform, tmp_path):
    run, out = tmp_path / "run", tmp_path / "described"
    main(["fit", *fit_args(run, "--model.attention.kind", "uniform", "--model.soft.alpha_c", "0.5",
                           "--trainer.max_steps", "2", "--trainer.limit_test_batches", "0")])
    last = run / "checkpoints" / "last.ckpt"
    hyperparameters = torch.load(last, weights_only=True)["hyper_parameters"]
    assert hyperparameters["attention"]["kind"] == "uniform" and hyperparameters["soft"]["alpha_c"] == 0.5
    main(["describe", "--ckpt_path", str(last), GRACE_HOPPER, "--predictions.out", str(out)])
    [entry] = json.loads((out / "captions.json").read_text())
    assert isinstance(entry["caption"], str) and (out / "grace_hopper.png").is_file()  # two steps: maybe no word yet
    captioner = Captioner.from_checkpoint(last, device="cpu")
    annotations = captioner.module.annotations({"image": captioner.prepare(GRACE_HOPPER)[None]})  # (1, L, D)
    alpha = captioner.module.decoder(annotations, torch.tensor([[1, 4, 2]])).alpha  # every word looked alike
    torch.testing.assert_close(alpha, torch.full_like(alpha, 1.0 / alpha.shape[-1]))


def test_the_kind_decides_the_objective_and_its_group(uniform):
    module = CaptionModule(vocabulary=WORDS, encoder={"name": "small_vgg", "weights": "none"},
                           attention={"kind": "uniform"})
    assert isinstance(module.objective, SoftAttentionObjective)
    assert module.model.settings.soft == SoftObjectiveSettings()
    assert isinstance(module.model.decoder.attention, UniformAttention) and not module.model.decoder.is_hard
    with pytest.raises(ConfigError, match=r"model.hard only applies to model.attention.kind: hard \(this run's is "
                                          r"uniform\)"):
        CaptionModule(vocabulary=WORDS, encoder={"name": "small_vgg", "weights": "none"},
                      attention={"kind": "uniform"}, hard={"samples": 2})


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"model.attention.kind must be one of hard, soft, got 'sharp'"):
        CaptionModule(vocabulary=WORDS, encoder={"name": "small_vgg", "weights": "none"}, attention={"kind": "sharp"})
