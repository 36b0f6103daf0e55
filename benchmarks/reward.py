"""What the SCST reward costs: CiderD (caption.evaluation.cider_reward) against pycocoevalcap's Cider, same captions.

    python benchmarks/reward.py                  # 5 samples x 5,000 images = 25,000 captions, 5 references each
    python benchmarks/reward.py --images 50      # a smoke run
    python benchmarks/reward.py --device cuda

COCO-like references (COCO's lengths, a 10,000-word vocabulary, words by Zipf's law; benchmarks/_helpers.py) and
SAMPLES candidates per image perturbed from its references as sampled captions are, one (C, T) tensor as a step has
them. Times CiderD's init (once per training, reported apart) and its call (every step: the first, then the median of
REPEATS), torch on THREADS CPU threads (1 unless told: pycocoevalcap runs on one core), and pycocoevalcap's
Cider().compute_score on the same captions: once per sample, each call with every image (so df and N are the
references' in both; the word strings are built before the clock starts). Checks the two agree to 1e-6 caption by
caption and prints a Markdown table and the speed-up.
"""

import argparse
import os
import platform
import statistics
import time
from datetime import date

import numpy as np
import torch
from _helpers import coco_like_references, perturbed
from pycocoevalcap.cider.cider import Cider

from caption.evaluation.cider_reward import CiderD


def timed(run, device: torch.device):
    """(seconds, result) of run(), the device's queue drained on both sides."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=5, help="candidates per image")
    parser.add_argument("--references", type=int, default=5, help="references per image")
    parser.add_argument("--vocabulary", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5, help="timed CiderD calls after the first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's CPU threads (default 1: pycocoevalcap runs on one core too)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    references = coco_like_references([args.references] * args.images, vocabulary=args.vocabulary, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    candidates = [perturbed(refs[int(rng.integers(len(refs)))], rng, vocabulary=args.vocabulary)
                  for refs in references for _ in range(args.samples)]  # candidate c is of image c // samples
    width = max(len(caption) for caption in candidates)
    batch = torch.tensor([caption + [0] * (width - len(caption)) for caption in candidates], device=device)  # (C, T)
    images = torch.arange(args.images, device=device).repeat_interleave(args.samples)  # (C,)

    init_s, reward = timed(lambda: CiderD(references), torch.device("cpu"))
    first_s, ours = timed(lambda: reward(batch, images), device)
    call_s = statistics.median(timed(lambda: reward(batch, images), device)[0] for _ in range(args.repeats))

    def text(caption: list[int]) -> str:
        return " ".join(f"w{w}" for w in caption)

    gts = {i: [text(ref) for ref in refs] for i, refs in enumerate(references)}
    slots = [{i: [text(candidates[i * args.samples + k])] for i in gts} for k in range(args.samples)]
    theirs = np.zeros((args.images, args.samples))
    start = time.perf_counter()
    for k, res in enumerate(slots):
        theirs[:, k] = Cider().compute_score(gts, res)[1]
    theirs_s = time.perf_counter() - start
    gap = float(np.abs(ours.cpu().numpy() - theirs.reshape(-1)).max())

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{len(candidates):,} captions ({args.samples} per image x {args.images:,} images, {args.references} "
          f"references each, {args.vocabulary:,} words); {date.today().isoformat()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (load {load}), "
          f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU thread(s))\n")
    print("| CIDEr-D of every caption | seconds |\n|---|---:|")
    print(f"| CiderD init (once: df, tf-idf and norms of {args.images * args.references:,} references) | "
          f"{init_s:.3f} |")
    print(f"| CiderD call, first | {first_s:.3f} |")
    print(f"| CiderD call, median of {args.repeats} more | {call_s:.3f} |")
    print(f"| pycocoevalcap Cider().compute_score, {args.samples} calls of {args.images:,} images | {theirs_s:.3f} |")
    print(f"\nspeed-up of a call: {theirs_s / call_s:.0f}x; largest difference from pycocoevalcap: {gap:.1e} "
          f"({'agree' if gap <= 1e-6 else 'DISAGREE'} to 1e-6); mean CIDEr-D {float(ours.mean()):.3f}")
    if gap > 1e-6:
        raise SystemExit("CiderD and pycocoevalcap disagree")


if __name__ == "__main__":
    main()
