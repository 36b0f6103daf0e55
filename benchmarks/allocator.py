"""What `--keep_freed_memory true` (caption.training.allocator) buys and costs, against glibc's defaults.

    python benchmarks/allocator.py
    python benchmarks/allocator.py --cases "caption library"   # some cases only

Each case runs in its own process:
  torch only          torch, nothing of this project;
  caption library     `import caption, caption.inference`, a `Captioner` built and called on 4 images;
  keep_freed_memory   `caption.training.allocator.configure_allocator("cpu")`, what the flag does.
Each then times 20 steps of beam search's attention-map temporary (W_a a + W_h h: 64 images x 3 beams x 196
locations x 512, 77 MB; median of the last 15), then allocates and frees a 512 MiB tensor: the resident
memory (RSS) before it and after the free, and what the process kept of it. Prints a Markdown table.
"""

import argparse
import platform
import subprocess
import sys
from datetime import date

import torch

CASE = """
import resource, statistics, sys, time
import torch
torch.set_num_threads(1)
case = sys.argv[1]
if case == "caption library":
    import caption, caption.inference
    from caption import Captioner
    from caption.training.module import CaptionModule
    vocabulary = ["<pad>", "<start>", "<end>", "<unk>", "a", "circle"]
    module = CaptionModule(vocabulary=vocabulary, encoder={"name": "small_vgg", "weights": "none", "freeze": False,
                           "channels": (4, 8)}, decoder={"embed_dim": 8, "hidden_dim": 16, "init_layers": 1},
                           attention={"dim": 8, "layers": 1})
    captioner = Captioner(module.model, transform=lambda image: torch.zeros(3, 32, 32),
                          normalization=((0,) * 3, (1,) * 3))
    captioner([torch.rand(3, 32, 32) for _ in range(4)])
elif case == "keep_freed_memory":
    from caption.training.allocator import configure_allocator
    configure_allocator("cpu")

projected, query = torch.ones(64, 1, 196, 512), torch.ones(64, 3, 1, 512)
times = []
for step in range(20):
    start = time.perf_counter()
    hidden = projected + query
    times.append(time.perf_counter() - start)
    del hidden


def rss() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


before = rss()
big = torch.ones(512 * 2**20 // 4)  # 512 MiB, then freed
del big
print(statistics.median(times[5:]) * 1000, before, rss())
"""

CASES = ("torch only", "caption library", "keep_freed_memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES, metavar="CASE",
                        help="the cases to run, named as the table names them (default: all)")
    args = parser.parse_args()
    print(f"# {date.today()}, {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
          f"{platform.libc_ver()[0]} {platform.libc_ver()[1]}")
    print("| case | 77 MB broadcast add, ms (median) | RSS before, MiB | RSS after freeing 512 MiB | kept |")
    print("|---|---:|---:|---:|---:|")
    for case in args.cases:
        out = subprocess.run([sys.executable, "-c", CASE, case], capture_output=True, text=True, check=True).stdout
        milliseconds, before, after = map(float, out.split())
        print(f"| {case} | {milliseconds:.1f} | {before:,.0f} | {after:,.0f} | {after - before:,.0f} |")


if __name__ == "__main__":
    main()
