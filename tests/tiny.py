"""The tiny model and data that every end-to-end test trains: the whole pipeline in seconds."""

from pathlib import Path


def tiny_args(
    data: Path, *, channels: str = "[4, 8]", kernel_sizes: str = "null", batch_size: int = 8, eval_batch_size: int = 8,
    num_train: int = 40, num_val: int = 8, num_test: int = 8,
) -> list[str]:
    """`caption` overrides for a tiny model on a few built-in images generated under `data`."""
    return [
        "--model.decoder.embed_dim", "8", "--model.decoder.hidden_dim", "16", "--model.attention.dim", "8",
        "--model.encoder.channels", channels, "--model.encoder.kernel_sizes", kernel_sizes,
        "--model.encoder.coordinates", "false",  # 32 steps of a 4-channel CNN do not learn to use them
        "--model.decoding.max_caption_length", "8",
        "--data.batch_size", str(batch_size), "--data.eval_batch_size", str(eval_batch_size),
        "--data.source.init_args.root", str(data),
        "--data.source.init_args.num_train", str(num_train),
        "--data.source.init_args.num_val", str(num_val),
        "--data.source.init_args.num_test", str(num_test),
    ]


# The named run shapes_hard trains on the frozen encoder of a soft run (its stage 1); tests that need no stage 1
# train the hard decoder and its encoder together from scratch instead
HARD_FROM_SCRATCH = ["--model.encoder.weights", "none", "--model.encoder.freeze", "false"]
