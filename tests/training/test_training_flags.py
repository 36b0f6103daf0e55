"""Training flags, in process on tiny data: bf16 mixed precision, non-finite losses, torch.compile,
the periodic `last.ckpt` schedule and the tokens/s log."""

import functools
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from kit.models import tiny_groups, tiny_module
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from caption.data.datamodule import CaptionDataModule
from caption.data.synthetic.shapes import ShapesSource
from caption.training.callbacks import PeriodicCheckpoint, TokensPerSecond
from caption.training.module import CaptionModule, NonFiniteLossError


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> CaptionDataModule:
    root = tmp_path_factory.mktemp("shapes")
    source = ShapesSource(root=str(root), num_train=10, num_val=4, num_test=4)
    return CaptionDataModule(source=source, batch_size=8, eval_batch_size=4)  # 50 captions: 7 batches


def trainer(root: Path, **kwargs) -> L.Trainer:
    options = dict(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root, limit_val_batches=0,
    )
    return L.Trainer(**(options | kwargs))


class Recorder(Callback):
    """Per training batch: the loss returned, the parameter checksum and the baseline, before and after."""

    def __init__(self):
        self.batches: list[dict] = []

    def state(self, module: CaptionModule) -> tuple[float, float]:
        baseline = module.objective.baseline.value.item() if module.model.settings.attention.kind == "hard" else 0.0
        return float(sum(p.detach().double().sum() for p in module.parameters())), baseline

    def on_train_batch_start(self, trainer, module, batch, batch_index):
        self.batches.append({"before": self.state(module), "step_before": trainer.global_step})

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
        loss = outputs.get("loss") if outputs else None
        self.batches[-1].update(after=self.state(module), step_after=trainer.global_step, loss=loss)


class Poisoned(CaptionModule):
    """The word logits turn to NaN on the chosen training batches (counted from 0), so the loss does."""

    def __init__(self, *, poisoned: tuple[int, ...] = (), **kwargs):
        super().__init__(**kwargs)
        self.poisoned, self.batch = poisoned, -1
        self.model.decoder.output_words.register_forward_hook(self.poison)

    def poison(self, layer, inputs, logits):
        return logits * math.nan if self.training and self.batch in self.poisoned else None

    def training_step(self, batch, batch_index):
        self.batch += 1
        return super().training_step(batch, batch_index)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_bf16_mixed_trains_and_decodes(data, tmp_path, attention):
    recorder = Recorder()
    module = tiny_module(data.vocabulary, attention)
    run = trainer(
        tmp_path, precision="bf16-mixed", gradient_clip_val=5.0, max_steps=3, limit_val_batches=1,
        val_check_interval=3, log_every_n_steps=3, callbacks=[recorder, TokensPerSecond()],
    )
    run.fit(module, datamodule=data)
    losses = [batch["loss"] for batch in recorder.batches]
    assert all(loss.dtype == torch.float32 and torch.isfinite(loss) for loss in losses), "losses are computed in fp32"
    assert math.isfinite(float(run.callback_metrics["val/bleu4"])), "greedy decoding under autocast"
    assert float(run.callback_metrics["train/tokens_per_sec"]) > 0
    if attention == "hard":  # the baseline belongs to the hard-attention objective
        baseline = module.objective.baseline.value
        assert math.isfinite(baseline.item()) and baseline.dtype == torch.float32
    batch = next(iter(data.test_dataloader()))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # beam search as `caption test` runs it under bf16-mixed
        decoded = module.model.generate(module.model.annotations(batch), beam_size=2)
    assert decoded.log_prob.dtype == torch.float32 and torch.isfinite(decoded.log_prob).all()
    weight_sums = decoded.alpha.float().sum(-1)[decoded.tokens != 0]  # α may be bf16: ~3 significant digits
    assert torch.allclose(weight_sums, torch.ones_like(weight_sums), atol=0.05)


def test_nonfinite_loss_stops_naming_the_step_and_terms(data, tmp_path):
    module = Poisoned(poisoned=(2,), vocabulary=data.vocabulary, **tiny_groups("hard"))
    with pytest.raises(NonFiniteLossError, match=r"global step 2 \(epoch 0, batch 2\).*nll=nan.*reinforce=") as error:
        trainer(tmp_path, max_steps=5).fit(module, datamodule=data)
    assert "model.optimization.on_nonfinite_loss: skip" in str(error.value)


def test_nonfinite_loss_skips_the_batch_and_counts(data, tmp_path):
    recorder = Recorder()
    module = Poisoned(poisoned=(1, 3), vocabulary=data.vocabulary,
                      **tiny_groups("hard", optimization={"on_nonfinite_loss": "skip"}))
    run = trainer(tmp_path, max_epochs=1, callbacks=[recorder])
    with pytest.warns(UserWarning, match="skipped a batch with a non-finite loss at global step 1"):
        run.fit(module, datamodule=data)
    assert module.nonfinite_batches == 2 and float(run.callback_metrics["train/nonfinite_batches"]) == 2
    assert len(recorder.batches) == 7
    for index, batch in enumerate(recorder.batches):
        assert batch["step_after"] == batch["step_before"] + 1, "Lightning's global step counts every batch"
        if index in (1, 3):  # no backward, no optimizer step: parameters and baseline untouched
            assert batch["loss"] is None and batch["after"] == batch["before"]
        else:
            assert torch.isfinite(batch["loss"]) and batch["after"] != batch["before"]
    assert all(math.isfinite(value) for value in recorder.batches[-1]["after"])
    assert [int(state["step"]) for state in run.optimizers[0].state_dict()["state"].values()][0] == 5

    checkpoint = tmp_path / "skipped.ckpt"
    run.save_checkpoint(checkpoint)
    restored = CaptionModule.load_from_checkpoint(checkpoint, weights_only=True)
    assert restored.nonfinite_batches == 2, "the count survives a resume"


def test_compile_constructs_and_matches_eager(data, monkeypatch):
    # aot_eager traces the decoder step with dynamo and AOTAutograd (forward and backward) without
    # generating C++ kernels (inductor takes a minute on a small CPU); the default backend is used in real runs
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    batch = next(iter(data.train_dataloader()))
    torch.manual_seed(0)
    eager = tiny_module(data.vocabulary, decoder={"dropout": 0.0})
    torch.manual_seed(0)
    compiled = tiny_module(data.vocabulary, decoder={"dropout": 0.0}, optimization={"compile": True})
    assert "step" in vars(compiled.model.decoder) and "step" not in vars(eager.model.decoder)
    assert compiled.state_dict().keys() == eager.state_dict().keys(), "checkpoints are interchangeable"
    torch._dynamo.reset()
    for module in (eager, compiled):
        module.training_step(batch, 0).backward()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1, "the step went through dynamo"
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    eager.eval(), compiled.eval()
    images = eager.model.annotations(batch)[:3]
    assert torch.equal(eager.model.generate(images).tokens, compiled.model.generate(images).tokens)


def test_periodic_checkpoint_schedule(data, tmp_path):
    saved: list[tuple[int, str]] = []
    module = tiny_module(data.vocabulary)
    best = ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="val/bleu4", mode="max")
    run = trainer(
        tmp_path, max_steps=5, limit_val_batches=1, val_check_interval=3, enable_checkpointing=True,
        callbacks=[best, PeriodicCheckpoint(every_n_train_steps=2)],
    )
    save = run.save_checkpoint
    run.save_checkpoint = lambda path, *args, **kwargs: (saved.append((run.global_step, Path(path).name)),
                                                          save(path, *args, **kwargs))
    run.fit(module, datamodule=data)
    # every 2 steps, after the validation at step 3, and at the end (step 5)
    assert [step for step, name in saved if name == "last.ckpt"] == [2, 3, 4, 5]
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 5
    with pytest.raises(ValueError, match="every_n_train_steps"):
        PeriodicCheckpoint(every_n_train_steps=-1)
