"""ResNet feature caches and the fine-tuning schedule: a cache of another encoder or grid is refused, conflicting
settings are refused before any work, and the two-stage recipe runs through the real CLI — stage 1 trains the
decoder from the feature cache, stage 2 starts from its weights, keeps the encoder frozen for an epoch, fine-tunes
layer4 at its own learning rate, is killed after a periodic checkpoint and resumes with `--ckpt_path last`."""

import json
import signal
import subprocess
from pathlib import Path

import matplotlib.cbook
import pytest
import torch
import yaml
from kit.cli import finish, start, wait_for
from kit.data import karpathy_dataset, resnet_weights
from kit.probes import checksum, read_records

from caption import Captioner
from caption.cli import main
from caption.data.datamodule import CaptionDataModule
from caption.data.features import FeatureCache, FeatureCacheError, build_cache, cache_config
from caption.data.sources.karpathy import KarpathySource
from caption.errors import ConfigError
from caption.io import encoder_weights
from caption.model.encoder import EncoderSettings, build_encoder
from caption.training.finetuning import stage_parameters
from caption.model.caption_model import checkpoint_state

SIZES = {"resize_size": 64, "crop_size": 64}  # ResNet-50 on 64x64 crops: layer4 is 2x2, fast on a CPU
GRID = 2
GRACE_HOPPER = matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetuning")
    return root, karpathy_dataset(root), resnet_weights(root / "resnet50-random.pth")


def source_of(root, annotations):
    return KarpathySource(annotations=str(annotations), images=str(root / "images"), **SIZES)


def config_of(source, weights, *, encoder="resnet50", grid=GRID):
    return cache_config(encoder=encoder, weights=str(weights), freeze=True, source=source, records=source.records(),
                        grid=grid)


# ------------------------------------------------------------------------------------------ the cache
def test_a_cache_of_another_encoder_or_grid_is_refused_as_stale(dataset, tmp_path):
    root, annotations, weights = dataset
    source = source_of(root, annotations)
    encoder = build_encoder(EncoderSettings(name="resnet50", weights=str(weights), grid=GRID),
                            reader=encoder_weights)
    manifest = build_cache(str(tmp_path / "cache"), encoder=encoder, config=config_of(source, weights), source=source,
                           records=source.records(), on_bad_image="error", batch_size=9, num_workers=0,
                           device=torch.device("cpu"))
    assert manifest["encoder"] == "resnet50" and manifest["grid"] == GRID and manifest["shape"] == [9, 4, 2048]
    FeatureCache(str(tmp_path / "cache"), config_of(source, weights))  # matches

    stale = {"grid: the cache has 2, the config gives 1": config_of(source, weights, grid=1),
             "grid: the cache has 2, the config gives 14": config_of(source, weights, grid=None),
             "encoder: the cache has 'resnet50', the config gives 'resnet101'":
                 config_of(source, weights, encoder="resnet101"),
             "encoder: the cache has 'resnet50', the config gives 'vgg16'":
                 config_of(source, weights, encoder="vgg16", grid=None)}
    for what, config in stale.items():
        with pytest.raises(FeatureCacheError, match=what) as error:
            FeatureCache(str(tmp_path / "cache"), config)
        assert "caption features --config" in str(error.value)
    data = CaptionDataModule(source=source_of(root, annotations), features=str(tmp_path / "cache"),
                             encoder="resnet50", encoder_weights=str(weights), encoder_grid=7)
    with pytest.raises(FeatureCacheError, match="grid: the cache has 2, the config gives 7"):
        data.train_dataloader()


# ------------------------------------------------------------------------------------------ settings
def test_conflicting_settings_are_refused_naming_the_keys(dataset):
    root, annotations, _ = dataset
    with pytest.raises(ConfigError, match=r"data.features .*needs model.encoder.freeze: true.*data.features: null"):
        CaptionDataModule(source=source_of(root, annotations), features="cache", freeze_encoder=False)
    cases = [
        ({"name": "resnet50", "freeze": True, "finetune_stages": 1}, "model.encoder.finetune_stages schedule"),
        ({"name": "resnet50", "freeze": True, "frozen_epochs": 2, "learning_rate": 1e-4},
         "model.encoder.frozen_epochs, model.encoder.learning_rate schedule.*model.encoder.freeze is true"),
        ({"name": "small_vgg", "freeze": False, "frozen_epochs": 1}, "small_vgg trains from scratch"),
        ({"name": "resnet50", "freeze": False, "finetune_stages": 6}, "model.encoder.finetune_stages must be 1..5"),
        ({"name": "resnet50", "freeze": False, "frozen_epochs": -1}, "model.encoder.frozen_epochs must be >= 0"),
        ({"name": "vgg16", "freeze": False, "learning_rate": 0.0}, "model.encoder.learning_rate must be > 0"),
    ]
    for settings, message in cases:
        with pytest.raises(ConfigError, match=message):
            EncoderSettings(**settings)
    EncoderSettings(name="resnet50", freeze=False, frozen_epochs=3, finetune_stages=3, learning_rate=1e-4)


def test_fine_tuned_stages_leave_batch_norm_out():
    encoder = build_encoder(EncoderSettings(name="resnet50", weights="none", grid=GRID))
    layer4 = stage_parameters(encoder, 1)
    convolutions = [m.weight for m in encoder.layer4.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(layer4) == len(convolutions) == 10 and all(a is b for a, b in zip(layer4, convolutions))
    everything = stage_parameters(encoder, None)
    batch_norm = sum(isinstance(m, torch.nn.BatchNorm2d) for m in encoder.modules())
    assert len(everything) == len(list(encoder.parameters())) - 2 * batch_norm


def test_every_kind_of_batch_norm_is_left_out_lazy_and_synced_ones_too():
    class Stages(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            norms = [torch.nn.BatchNorm2d(4), torch.nn.SyncBatchNorm(4), torch.nn.LazyBatchNorm2d()]
            self.stages = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), norm) for norm in norms)

    encoder = Stages()
    convolutions = [parameter for stage in encoder.stages for parameter in stage[0].parameters()]
    assert list(map(id, stage_parameters(encoder, None))) == list(map(id, convolutions))


# ------------------------------------------------------------------------------------------ two stages
def encoder_tensors(state: dict[str, torch.Tensor], prefix: str, *, parameters: bool = True) -> list[torch.Tensor]:
    """The tensors of a checkpoint's state dict under `prefix`: its parameters, or its BatchNorm statistics."""
    statistics = ("running_mean", "running_var", "num_batches_tracked")
    return [value for key, value in state.items()
            if key.startswith(prefix) and (not key.endswith(statistics)) == parameters]


def write_configs(tmp_path: Path, root: Path, annotations: Path, weights: Path) -> tuple[Path, Path]:
    """Stage 1 (decoder from the feature cache) and the stage-2 overlay (fine-tuning from images)."""
    stage1 = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu", "max_epochs": 1, "limit_val_batches": 1, "limit_test_batches": 0,
            "log_every_n_steps": 1, "enable_progress_bar": False, "enable_model_summary": False,
            "default_root_dir": str(tmp_path / "stage1"),
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": str(tmp_path / "stage1"), "name": "logs"}},
        },
        "checkpoint": {"filename": "best", "enable_version_counter": False},
        "model": {"encoder": {"name": "resnet50", "weights": str(weights), "grid": GRID},
                  "decoder": {"embed_dim": 8, "hidden_dim": 16, "init_layers": 1}, "attention": {"dim": 8, "layers": 1},
                  "decoding": {"max_caption_length": 6, "beam_size": 1},
                  # a step small enough that 7 steps on 2,048-wide random features leave the LSTM unsaturated, so the
                  # gradient reaches the encoder in stage 2
                  "optimization": {"learning_rate": 0.001}},
        "data": {
            "source": {"class_path": "caption.data.sources.karpathy.KarpathySource",
                       "init_args": {"annotations": str(annotations), "images": str(root / "images"), **SIZES}},
            "batch_size": 4, "eval_batch_size": 4, "features": str(tmp_path / "features"),
        },
    }
    stage2 = {
        "trainer": {
            "max_epochs": 1000, "default_root_dir": str(tmp_path / "stage2"),
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": str(tmp_path / "stage2"), "name": "logs"}},
        },
        "periodic_checkpoint": {"every_n_train_steps": 2},
        "model": {"encoder": {"freeze": False, "frozen_epochs": 1, "finetune_stages": 1, "learning_rate": 0.0001},
                  "optimization": {"init_from": str(tmp_path / "stage1" / "checkpoints" / "best.ckpt")}},
        "data": {"features": None},
    }
    paths = tmp_path / "stage1.yaml", tmp_path / "stage2.yaml"
    for path, config in zip(paths, (stage1, stage2)):
        path.write_text(yaml.safe_dump(config))
    return paths


def kill_after_step(process: subprocess.Popen, probe: Path, step: int) -> None:
    wait_for(lambda: any(r["global_step"] >= step for r in read_records(probe, "encoder") if r["event"] == "batch_end"),
             process)
    process.send_signal(signal.SIGKILL)  # no chance to save anything more
    process.wait()


@pytest.mark.slow
def test_two_stage_recipe_fine_tunes_on_schedule_and_resumes_after_a_kill(dataset, tmp_path):
    root, annotations, weights = dataset
    stage1, stage2 = (str(path) for path in write_configs(tmp_path, root, annotations, weights))
    finish(start("features", "--config", stage1, probe=tmp_path / "probe0"))
    finish(start("fit", "--config", stage1, probe=tmp_path / "probe0"))
    best = torch.load(tmp_path / "stage1" / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]

    # Stage 2: epoch 0 (steps 1-7) frozen, layer4 fine-tuned from epoch 1; killed after the save at step 8 or later
    probe = ["--trainer.callbacks+=kit.probes.EncoderProbe"]
    first = start("fit", "--config", stage1, "--config", stage2, *probe, probe=tmp_path / "probe1")
    kill_after_step(first, tmp_path / "probe1", 9)
    last = tmp_path / "stage2" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    step = saved["global_step"]
    assert step >= 8 and step % 2 == 0 and saved["epoch"] == 1, (step, saved["epoch"])

    records = read_records(tmp_path / "probe1", "encoder")
    started = next(r for r in records if r["event"] == "train_start")
    assert started["decoder"] == pytest.approx(checksum(encoder_tensors(best, "decoder.")), rel=1e-12), "init_from"
    frozen = [r for r in records if r["event"] == "batch_end" and r["epoch"] == 0]
    tuned = [r for r in records if r["event"] == "batch_end" and r["epoch"] == 1]
    stage1_layer4 = checksum(encoder_tensors(best, "encoder.layer4."))
    assert len(frozen) == 7 and all(r["trainable"] == 0 and len(r["groups"]) == 1 for r in frozen)
    assert all(r["layer4"] == pytest.approx(stage1_layer4, rel=1e-12) for r in frozen), "frozen in epoch 0"
    assert all(r["trainable"] == 10 and r["groups"][1] == {"name": "encoder", "lr": 0.0001, "size": 10} for r in tuned)
    # as exact as "frozen"
    assert tuned[-1]["layer4"] != pytest.approx(stage1_layer4, rel=1e-12), "layer4 trains from epoch 1"
    assert not any(r["encoder_training"] for r in records), "BatchNorm stays in eval mode"

    groups = saved["optimizer_states"][0]["param_groups"]
    assert [(group.get("name"), group["lr"], len(group["params"])) for group in groups][1] == ("encoder", 0.0001, 10)
    resumed = start("fit", "--config", stage1, "--config", stage2, *probe, "--ckpt_path", "last",
                      "--trainer.max_steps", str(step + 3), probe=tmp_path / "probe2")
    finish(resumed)
    records = read_records(tmp_path / "probe2", "encoder")
    begin = next(r for r in records if r["event"] == "train_start")
    assert begin["global_step"] == step and begin["epoch"] == 1
    assert begin["groups"][1] == {"name": "encoder", "lr": 0.0001, "size": 10}, "restored with its learning rate"
    assert all(r["trainable"] == 10 for r in records if r["event"] == "batch_end"), "unfrozen again after the resume"
    assert begin["layer4"] == pytest.approx(checksum(encoder_tensors(saved["state_dict"], "encoder.layer4.")),
                                            rel=1e-12), "the checkpoint's weights, not init_from's"
    assert [r["global_step"] for r in records if r["event"] == "batch_end"] == [step + 1, step + 2, step + 3]

    final = torch.load(last, weights_only=True)
    assert final["global_step"] == step + 3
    state = final["state_dict"]
    assert not all(torch.equal(a, b) for a, b in zip(encoder_tensors(state, "encoder.layer4."),
                                                     encoder_tensors(saved["state_dict"], "encoder.layer4."))), \
        "layer4 keeps training after the resume"
    for prefix, parameters in (("encoder.layer3.", True), ("encoder.", False), ("encoder.layer4.0.bn1.", True)):
        unchanged = zip(encoder_tensors(state, prefix, parameters=parameters),
                        encoder_tensors(best, prefix, parameters=parameters))
        assert all(torch.equal(a, b) for a, b in unchanged), f"{prefix} ({'weights' if parameters else 'statistics'})"
    assert json.loads((tmp_path / "features" / "manifest.json").read_text())["grid"] == GRID

    # the fine-tuned ResNet captions new images (its training transform, a 2x2 grid) and draws its attention
    captioner = Captioner.from_checkpoint(last, device="cpu")
    assert captioner.prepare(GRACE_HOPPER).shape == (3, SIZES["crop_size"], SIZES["crop_size"])
    assert captioner(GRACE_HOPPER, max_length=4).alpha.shape[1] == GRID**2
    main(["describe", "--ckpt_path", str(last), GRACE_HOPPER, "--predictions.out", str(tmp_path / "figures"),
          "--model.decoding.max_caption_length", "4"])
    assert (tmp_path / "figures" / "grace_hopper.png").is_file()


def test_init_from_a_run_folder_reads_its_checkpoint_once_and_takes_its_weights(tiny_runs, monkeypatch):
    from caption.io import checkpoints
    from caption.training import finetuning
    from caption.training.module import CaptionModule

    run = tiny_runs["soft"]
    best = checkpoints.find_checkpoint(run)
    module = CaptionModule.load_from_checkpoint(best, weights_only=True, map_location="cpu")
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.zero_()
    reads: list[str] = []
    original = checkpoints.read_checkpoint

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(checkpoints, "read_checkpoint", counted)
    monkeypatch.setattr(finetuning, "read_checkpoint", counted)
    finetuning.load_weights(module, str(run))
    assert reads == [str(best)], "the run folder's checkpoint, read once"
    saved = torch.load(best, weights_only=True)["state_dict"]
    assert all(torch.equal(value, saved[name]) for name, value in checkpoint_state(module.state_dict()).items())
