"""The tiny model and data that every end-to-end test trains, as `caption` overrides: the whole pipeline in seconds.

This is the one place in the tests that spells the model's command-line keys for a tiny run (`--model.<name>`);
a test adds only the keys it is about."""

from pathlib import Path

from kit.cli import REPO

# configs/shapes_hard.yaml trains on the frozen encoder of a soft run (its stage 1); tests that need no stage 1
# train the hard decoder and its encoder together from scratch instead
HARD_FROM_SCRATCH = ["--model.encoder.weights", "none", "--model.encoder.freeze", "false"]


def encoder_from(run: Path) -> list[str]:
    """Stage 2 of the hard recipe: the encoder of the soft run in `run` (its best checkpoint), frozen as the config
    says."""
    return ["--model.encoder.weights", str(run)]


def tiny_model_args(*, channels: str = "[4, 8]", kernel_sizes: str = "null") -> list[str]:
    """A small_vgg of `channels` from random weights (not stage 0's encoder: configs/shapes_stage1.yaml) and a decoder
    of a few units; captions of at most 8 words."""
    return [
        "--model.encoder.weights", "none",
        "--model.decoder.embed_dim", "8", "--model.decoder.hidden_dim", "16", "--model.attention.dim", "8",
        "--model.encoder.channels", channels, "--model.encoder.kernel_sizes", kernel_sizes,
        "--model.encoder.coordinates", "false",  # 32 steps of a 4-channel CNN do not learn to use them
        "--model.decoding.max_caption_length", "8",
    ]


def tiny_args(
    data: Path, *, channels: str = "[4, 8]", kernel_sizes: str = "null", batch_size: int = 8, eval_batch_size: int = 8,
    num_train: int = 40, num_val: int = 8, num_test: int = 8,
) -> list[str]:
    """`caption` overrides for a tiny model on a few built-in images generated under `data`."""
    return [
        *tiny_model_args(channels=channels, kernel_sizes=kernel_sizes),
        "--data.batch_size", str(batch_size), "--data.eval_batch_size", str(eval_batch_size),
        "--data.source.init_args.root", str(data),
        "--data.source.init_args.num_train", str(num_train),
        "--data.source.init_args.num_val", str(num_val),
        "--data.source.init_args.num_test", str(num_test),
    ]


def config(name: str) -> list[str]:
    """`--config configs/<name>.yaml`, from any working folder."""
    return ["--config", str(REPO / "configs" / f"{name}.yaml")]


def run_args(root: Path, *, logs: bool = True) -> list[str]:
    """Outputs under `root` (checkpoints, and with `logs` the config's CSV logs), no progress bar."""
    logger = ["--trainer.logger.init_args.save_dir", str(root)] if logs else []
    return ["--trainer.default_root_dir", str(root), *logger, "--trainer.enable_progress_bar", "false"]


def fit_args(root: Path, *extra: str, kind: str = "soft", logs: bool = True) -> list[str]:
    """One epoch of a tiny `kind`-attention model on 12 built-in images (6 val, 6 test) generated under
    root.parent/data, checkpoints and logs under `root` (without `logs`, the logger's save_dir left to follow the run
    folder); then `extra`."""
    return [
        *config(f"shapes_{kind}"), "--trainer.max_epochs", "1", *run_args(root, logs=logs),
        *tiny_args(root.parent / "data", channels="[4, 8, 8]", batch_size=16, num_train=12, num_val=6, num_test=6),
        *extra,
    ]


def tiny_run_args(kind: str, run: Path, data: Path) -> list[str]:
    """The session's tiny trained runs (conftest.py `tiny_runs`): 4 epochs on 50 shapes images with tiny dims, a few
    dozen steps, enough for short captions; validation every 2 epochs, no test after fit."""
    return [
        *config(f"shapes_{kind}"),
        "--trainer.max_epochs", "4", "--trainer.check_val_every_n_epoch", "2", "--trainer.log_every_n_steps", "4",
        "--trainer.limit_test_batches", "0",  # no test after fit: the tests evaluate these runs themselves
        *run_args(run), "--trainer.enable_model_summary", "false",
        "--model.optimization.learning_rate", "0.01",
        *tiny_args(data, channels="[4, 8, 8]", batch_size=32, num_train=50),
    ]
