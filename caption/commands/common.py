"""What the argparse commands share: the same option names, spelled the same way, with the same checks.

Options are spelled as Lightning's are (`--ckpt_path`, `--beam_size`: words joined by underscores), so one
command line reads the same across `caption fit/test/predict` and `caption describe/evaluate/compare`.
"""

import argparse


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """--ckpt_path (alias --ckpt): a checkpoint written by `caption fit`, or a URL with its --sha256."""
    parser.add_argument("--ckpt_path", "--ckpt", dest="ckpt_path", required=True, metavar="CKPT",
                        help="checkpoint written by `caption fit`, or its https URL (alias: --ckpt)")
    parser.add_argument("--sha256", default=None, help="the URL's expected SHA-256 (downloaded once, then checked)")


def add_decoding(parser: argparse.ArgumentParser, *, default: str = "the checkpoint's") -> None:
    """--beam_size and --max_length, both defaulting to the checkpoint's."""
    parser.add_argument("--beam_size", type=positive_int, default=None, help=f"beam width, 1 = greedy (default: {default})")
    parser.add_argument("--max_length", type=positive_int, default=None,
                        help=f"most words per caption (default: {default} max_caption_length)")


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (the GPU if there is one), cpu, cuda, cuda:1, ...")


def add_batch_size(parser: argparse.ArgumentParser, *, default: int | None) -> None:
    shown = default if default is not None else "the data's eval_batch_size"
    parser.add_argument("--batch_size", type=positive_int, default=default, help=f"images per batch (default: {shown})")


def add_scoring(parser: argparse.ArgumentParser) -> None:
    """--split and --meteor_timeout, for the commands that score a split."""
    parser.add_argument("--split", default="test", choices=("val", "test"), help="split to caption (default: test)")
    parser.add_argument("--meteor_timeout", type=float, default=None,
                        help="seconds before METEOR counts as missing (default: caption.metrics.METEOR_TIMEOUT)")
