"""What checking a checkpoint's zip checksums costs before it loads (`caption.io.checkpoints.zip_damage`).

    python benchmarks/checkpoint_check.py                    # a 100 MB checkpoint, 7 runs of each, median
    python benchmarks/checkpoint_check.py --megabytes 400 --repeats 3

Writes a checkpoint of random float32 tensors (100 MB by default) to a temporary folder, then
times `zip_damage` (zipfile's testzip: every record read and its CRC-32 compared), `torch.load` as the reader calls it,
and `read_checkpoint` (both, and its checks) from the file cache, the first run of each not counted. Prints a
Markdown table.
"""

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch
from _helpers import cpu_name

from caption.io.checkpoints import read_checkpoint, zip_damage


def seconds(work: Callable[[], object], repeats: int) -> list[float]:
    work()  # warm-up: the file in the page cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=100, help="size of the checkpoint's tensors (default 100)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each (default 7)")
    args = parser.parse_args()
    tensors = max(1, round(args.megabytes * 1e6 / (4 * 256 * 1024)))  # 1 MiB tensors of float32
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "last.ckpt"
        torch.save({"state_dict": {f"w{i}": torch.randn(256, 1024) for i in range(tensors)},
                    "hyper_parameters": {"vocabulary": ["<pad>", "<start>", "<end>", "<unk>"]}}, path)
        size = path.stat().st_size
        print(f"# {date.today()}, {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, a checkpoint of "
              f"{size / 1e6:.0f} MB ({tensors} tensors), from the file cache")
        print("| step | median, s | fastest – slowest, s |")
        print("|---|---:|---|")
        for name, work in (("zip_damage (CRC-32 of every record)", lambda: zip_damage(path)),
                           ("torch.load (weights_only, to the CPU)",
                            lambda: torch.load(path, map_location="cpu", weights_only=True)),
                           ("read_checkpoint (both, and its checks)", lambda: read_checkpoint(path))):
            times = seconds(work, args.repeats)
            print(f"| {name} | {statistics.median(times):.3f} | {min(times):.3f} – {max(times):.3f} |")


if __name__ == "__main__":
    main()
