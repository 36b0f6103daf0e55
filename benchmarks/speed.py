"""Speed of training and caption generation, as a fraction of this machine's own matrix-multiply rate.

    python benchmarks/speed.py                  # the suite: about 1 minute on 2 quiet CPU cores, plus 3-5 for `input`
    python benchmarks/speed.py --quick          # configuration (a), fewer steps: about 30 seconds
    python benchmarks/speed.py --only train decode --profile   # and where the time goes
    python benchmarks/speed.py --only train decode --precision fp32 bf16   # fp32 beside bf16-mixed, (a) and (b)
    python benchmarks/speed.py --device cuda --only train decode padding   # one GPU: (b) in fp32 and bf16

Sections (--only):
  train    forward + backward + optimizer step through `CaptionModule.training_step` on random cached
           annotations (float16, as the feature cache stores them), soft and hard attention, batches of
           one caption length (as `caption.data.sampler.LengthBatchSampler` makes them) at lengths
           spread like COCO's; tokens/s, captions/s, peak memory, and how long one COCO epoch (566,435
           captions) would take: the number of same-length batches of the epoch times the mean step
           time, the timed lengths being evenly spaced quantiles of the epoch's.
  decode   greedy and beam search (beam 3 and 5) over 64 images (--decode-images), capped at 20 words;
           <end> is made impossible so that random weights run every hypothesis to the cap; images/s.
           At each configuration.
  padding  padded target slots in one epoch of 566,435 COCO-like captions: same-length batches
           versus shuffled ones.
  self_critical  one self-critical training step at the paper's COCO sizes (configuration b, soft and hard): 10
           images × 5 sampled captions (self-critical.pytorch's batch), capped at 20 words, rewarded with CIDEr-D
           against 5,000 images' COCO-like references (document frequencies built once, not timed); the step's
           time and the reward's share of it (the reward's call timed alone on the same samples).
  input    runs benchmarks/input_pipeline.py (VGG16 images/s; training from the cache versus from
           images), then times the DataLoader alone on the cache it built (captions/s, 0 and 2 workers).

Configurations, both with L=196 locations of D=512 and a 10,000-word vocabulary: (a) B=32,
embedding = attention = LSTM = 512; (b) the paper's COCO model: B=64, embedding 512, LSTM 1800,
attention 512, two-layer f_att and f_init (the original code's COCO settings, coco_soft).

Precisions (--precision): fp32, and bf16 (`--trainer.precision bf16-mixed`: the training step and the search under
bf16 autocast, `caption.model.precision`); by default both where the hardware has bf16 matrix units (the header names
them: AMX, AVX-512 BF16, a GPU's sm_XY, or none), else fp32 alone. With both, a last table gives bf16 ÷ fp32 per case.

ratio = achieved FLOP/s ÷ the reference matrix product's FLOP/s in the case's own precision, measured right before
every timed step or run (CPU: a 2048³ `torch.matmul` on the same threads; GPU: 8192³), median over the steps, so that
figures stay comparable on a shared machine. FLOPs are counted analytically from
the dimensions, only where the model needs them (the annotation projection once per image; real
tokens only): see caption/model/flops.py. tokens/s, captions/s and images/s are totals over the timed
steps. Peak memory is the process's peak resident memory (CPU) or peak allocated CUDA memory in
the case. This script keeps freed memory for reuse (caption.training.allocator), as `caption fit --keep_freed_memory
true` does, unless --default-malloc.
"""

import argparse
import contextlib
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from _helpers import coco_like_references, coco_like_words
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DistributedSampler

from caption.data.sampler import LengthBatchSampler
from caption.evaluation.cider_reward import CiderD
from caption.io.device import bf16_support
from caption.model.flops import DecoderFlops
from caption.model.precision import autocast, checked_precision
from caption.model.search import sample
from caption.model.vocabulary import Vocabulary
from caption.training.allocator import configure_allocator
from caption.training.module import CaptionModule

LOCATIONS, ANNOTATION_DIM, VOCABULARY = 196, 512, 10_000
COCO_CAPTIONS = 566_435  # Karpathy train + restval: 113,287 images × ~5 captions
CONFIGS = {
    "a": dict(batch_size=32, decoder=dict(embed_dim=512, hidden_dim=512, init_layers=1),
              attention=dict(dim=512, layers=1)),
    "b": dict(batch_size=64, decoder=dict(embed_dim=512, hidden_dim=1800, init_layers=2),
              attention=dict(dim=512, layers=2)),
}
DECODE_IMAGES, MAX_WORDS = 64, 20
MATRIX_PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::mv"}
ROOT = Path(__file__).resolve().parent


def representative_words(steps: int) -> list[int]:
    """`steps` caption lengths at evenly spaced quantiles of the COCO-like spread (what an epoch's batches hold)."""
    return [int(w) for w in np.quantile(coco_like_words(100_000), (np.arange(steps) + 0.5) / steps, method="nearest")]


def epoch_batches(words: np.ndarray, batch_size: int, same_length: bool) -> list[np.ndarray]:
    """One epoch's batches (arrays of words per caption): the project's same-length sampler, or shuffled."""
    if same_length:
        tokens = (words + 2).tolist()  # what the data module passes: <start> words <end>
        sampler = LengthBatchSampler(DistributedSampler(range(len(words)), num_replicas=1, rank=0, shuffle=False),
                                     batch_size, groups=tokens)
        return [words[batch] for batch in sampler]
    order = np.random.default_rng(0).permutation(len(words))
    return [words[order[start : start + batch_size]] for start in range(0, len(words), batch_size)]


class Clock:
    """Wall-clock time of work on the device, each time with the reference matmul rate right before it."""

    def __init__(self, device: torch.device, dtype: torch.dtype, size: int):
        self.device, self.size = device, size
        self.a = torch.randn(size, size, device=device, dtype=dtype)
        self.b = torch.randn(size, size, device=device, dtype=dtype)
        self.repeats = 10 if device.type == "cuda" else 1

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def matmul_rate(self) -> float:
        """FLOP/s of size³ matrix products: the best of two timings."""
        best = float("inf")
        for _ in range(2):
            self.sync()
            started = time.perf_counter()
            for _ in range(self.repeats):
                torch.matmul(self.a, self.b)
            self.sync()
            best = min(best, (time.perf_counter() - started) / self.repeats)
        return 2 * self.size**3 / best

    def time(self, work) -> tuple[float, float]:
        """(seconds of `work()`, reference FLOP/s measured just before)."""
        rate = self.matmul_rate()
        self.sync()
        started = time.perf_counter()
        work()
        self.sync()
        return time.perf_counter() - started, rate


class PeakMemory:
    """Peak memory of a case: resident set (CPU, Linux, reset through /proc) or allocated CUDA memory.

    On CPU the memory that earlier cases freed (and `configure_allocator` keeps) is first handed back
    with glibc's malloc_trim, so that the peak is this case's own.
    """

    def __init__(self, device: torch.device):
        self.device = device

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, the peak resident set

    def gib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**30
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
        return float("nan")


def build_module(config: str, attention: str, device: torch.device, compile: bool) -> CaptionModule:
    """CaptionModule at a configuration; VGG16 with random weights (never run: the annotations are 'cached')."""
    torch.manual_seed(0)
    words = list(Vocabulary.SPECIALS) + [f"w{i}" for i in range(VOCABULARY - len(Vocabulary.SPECIALS))]
    sizes = CONFIGS[config]
    module = CaptionModule(vocabulary=words, encoder={"name": "vgg16", "weights": "none"}, decoder=sizes["decoder"],
                           attention={"kind": attention, **sizes["attention"]},
                           decoding={"max_caption_length": MAX_WORDS}, optimization={"compile": compile})
    return module.to(device)


def caption_batch(batch_size: int, words: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Random cached annotations and captions <start> w_1 .. w_words <end>, all of one length."""
    captions = torch.randint(len(Vocabulary.SPECIALS), VOCABULARY, (batch_size, words + 2))
    captions[:, 0], captions[:, -1] = Vocabulary.START, Vocabulary.END
    annotations = torch.randn(batch_size, LOCATIONS, ANNOTATION_DIM).half()  # (B, L, D), as the cache stores them
    return {"annotations": annotations.to(device), "caption": captions.to(device)}


REFERENCE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # this script's precisions, and their matmul


def train_step(module: CaptionModule, optimizer: torch.optim.Optimizer, batch: dict, precision: str) -> None:
    with autocast(module.device, checked_precision(precision)):  # as Lightning's bf16-mixed runs training_step
        loss = module.training_step(batch, 0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def header(args: argparse.Namespace, device: torch.device) -> str:
    if device.type == "cuda":
        machine = torch.cuda.get_device_name(device)
    else:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")] if Path("/proc/cpuinfo").exists() else [platform.processor()]
        machine = f"{names[0]} ({platform.machine()}), {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"# benchmarks/speed.py {' '.join(sys.argv[1:])}\n# {datetime.now():%Y-%m-%d %H:%M}, {machine}, "
            f"torch {torch.__version__}; load average {load} (1, 5, 15 min) at the start")


def row(*cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


COLUMNS = ["case", "ms (median)", "tokens/s", "captions/s", "images/s", "GFLOP/s", "reference GFLOP/s", "ratio",
           "peak GiB", "notes"]


def report(case: str, seconds: list[float], flops: list[int], rates: list[float], counts: dict[str, int],
           peak: float, notes: str) -> dict[str, float]:
    """One table row. Rates are totals over the timed repeats; the ratio is the median over repeats, each
    against the reference measured right before it."""
    ratio = statistics.median(f / s / r for f, s, r in zip(flops, seconds, rates))
    per_second = {name: count / sum(seconds) for name, count in counts.items()}
    cells = [f"{per_second[name]:,.1f}" if name in per_second else "" for name in ("tokens", "captions", "images")]
    print(row(case, f"{1e3 * statistics.median(seconds):,.0f}", *cells, f"{sum(flops) / sum(seconds) / 1e9:,.1f}",
              f"{statistics.median(rates) / 1e9:,.0f}", f"{ratio:.2f}", f"{peak:.2f}", notes), flush=True)
    return {"ratio": ratio, **per_second}


def bench_train(args, clock: Clock, config: str, attention: str, precision: str) -> dict:
    device, batch_size = clock.device, CONFIGS[config]["batch_size"]
    module = build_module(config, attention, device, args.compile).train()
    optimizer = module.configure_optimizers()
    counts = DecoderFlops.of(module.model.decoder, LOCATIONS)
    warm = caption_batch(batch_size, 11, device)
    first, _ = clock.time(lambda: train_step(module, optimizer, warm, precision))  # compiles, if asked
    train_step(module, optimizer, warm, precision)
    memory = PeakMemory(device)
    memory.reset()
    seconds, flops, rates, tokens = [], [], [], 0
    for words in representative_words(args.steps):
        batch = caption_batch(batch_size, words, device)
        elapsed, rate = clock.time(lambda: train_step(module, optimizer, batch, precision))
        seconds.append(elapsed), rates.append(rate)
        flops.append(counts.training(captions=batch_size, tokens=batch_size * (words + 1)))
        tokens += batch_size * (words + 1)
    # the timed lengths are quantiles of the epoch's, so their mean step time is the epoch's mean step time
    epoch = len(epoch_batches(coco_like_words(COCO_CAPTIONS), batch_size, True)) * statistics.mean(seconds)
    result = report(f"train ({config}) {attention} {precision}", seconds, flops, rates,
                    {"tokens": tokens, "captions": batch_size * len(seconds)}, memory.gib(),
                    f"COCO epoch {epoch / 3600:,.2f} h; first step {first:.1f} s")
    if args.profile:
        print_profile(lambda: train_step(module, optimizer, warm, precision), device,
                      CONFIGS[config]["attention"]["dim"])
    return result


def bench_self_critical(args, clock: Clock, attention: str, images: int = 10, samples: int = 5) -> None:
    """One self-critical step at configuration (b), and the CIDEr-D reward's share of it."""

    device = clock.device
    torch.manual_seed(0)
    words = list(Vocabulary.SPECIALS) + [f"w{i}" for i in range(VOCABULARY - len(Vocabulary.SPECIALS))]
    sizes = CONFIGS["b"]
    module = CaptionModule(vocabulary=words, encoder={"name": "vgg16", "weights": "none"}, decoder=sizes["decoder"],
                           attention={"kind": attention, **sizes["attention"]}, self_critical={"samples": samples},
                           optimization={"learning_rate": 5e-5}).to(device).train()
    optimizer = module.configure_optimizers()
    specials = len(Vocabulary.SPECIALS)  # the references' words 1..V-specials moved past the specials, then <end>
    references = [[[word + specials - 1 for word in caption] + [Vocabulary.END] for caption in image]
                  for image in coco_like_references([5] * 5000, vocabulary=VOCABULARY - specials)]
    module.self_critical.image_ids = torch.arange(5000)
    module.self_critical.reward = reward = CiderD(references)
    batch = {"annotations": torch.randn(images, LOCATIONS, ANNOTATION_DIM).half().to(device),
             "image_id": torch.arange(images, device=device)}

    def step() -> None:
        loss = module.training_step(batch, 0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()  # warm-up (and the reward's tables onto the device)
    with torch.no_grad():  # this model's samples, to time the reward alone on them
        sampled = sample(module.model.decoder, batch["annotations"].float(), samples=samples, max_length=20).tokens
    rows = batch["image_id"].repeat_interleave(samples)
    steps, rewards = [], []
    for _ in range(args.repeats):
        steps.append(clock.time(step)[0])
        rewards.append(clock.time(lambda: reward(sampled, rows))[0])
    share = statistics.median(rewards) / statistics.median(steps)
    print(f"| self-critical step (b) {attention}, {images} images × {samples} samples | "
          f"{1e3 * statistics.median(steps):,.0f} ms | reward {1e3 * statistics.median(rewards):,.1f} ms, "
          f"{share:.1%} of the step | {sampled.shape[1]} words sampled at most |", flush=True)


def bench_decode(args, clock: Clock, config: str, precision: str) -> dict[int, dict]:
    device = clock.device
    module = build_module(config, "soft", device, args.compile).eval()
    with torch.no_grad():
        module.model.decoder.output_words.bias[Vocabulary.END] = float("-inf")  # every hypothesis runs to the cap
    counts = DecoderFlops.of(module.model.decoder, LOCATIONS)
    images = args.decode_images
    annotations = torch.randn(images, LOCATIONS, ANNOTATION_DIM).to(device)
    results = {}
    for beam in (1, 3, 5):
        decoded = []

        def work():
            with autocast(device, checked_precision(precision)):
                decoded.append(module.model.generate(annotations, beam_size=beam))

        work()  # warm-up (and compilation)
        memory = PeakMemory(device)
        memory.reset()
        seconds, rates = zip(*(clock.time(work) for _ in range(args.repeats)))
        steps = decoded[-1].tokens.shape[1]
        flops = [counts.generation(images=images, rows=images * beam, steps=steps)] * len(seconds)
        name = f"decode ({config}) {'greedy' if beam == 1 else f'beam {beam}'} {precision}"
        results[beam] = report(name, list(seconds), flops, list(rates), {"images": images * len(seconds)},
                               memory.gib(), f"{images} images, {steps} words")
        if args.profile and beam == 3:
            print_profile(work, device, CONFIGS[config]["attention"]["dim"])
    return results


def print_profile(work, device: torch.device, attention_dim: int) -> None:
    """Top operators of one run, and their time split into matrix products, element-wise work on
    per-location tensors (the attention map W_a a_i + W_h h_{t-1} and its gradients: (..., L, A) or
    (B·L, A)), the optimizer, and everything else."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        work()
    events = prof.key_averages(group_by_input_shape=True)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(events.table(sort_by=key, row_limit=18, max_name_column_width=28, max_shapes_column_width=70))

    def per_location(shape: list[int]) -> bool:
        return len(shape) >= 2 and shape[-1] == attention_dim and (shape[-2] == LOCATIONS or shape[0] % LOCATIONS == 0)

    split = {"matrix products": 0.0, "element-wise on (..., L, A)": 0.0, "optimizer": 0.0, "everything else": 0.0}
    for event in events:
        shapes = [shape for shape in (event.input_shapes or []) if isinstance(shape, list)]
        if event.key in MATRIX_PRODUCTS:
            part = "matrix products"
        elif any(per_location(shape) for shape in shapes):
            part = "element-wise on (..., L, A)"
        elif "adam" in event.key.lower() or "rmsprop" in event.key.lower():
            part = "optimizer"
        elif event.key.startswith("aten::"):
            part = "everything else"
        else:
            continue  # profiler ranges (Optimizer.step, autograd nodes) hold the aten operators counted above
        split[part] += getattr(event, key)
    total = sum(split.values())
    print("time split (self time of aten operators): " + "; ".join(
        f"{part} {100 * spent / total:.0f}% ({spent / 1e3:,.0f} ms)" for part, spent in split.items()) + "\n")


def bench_padding(batch_sizes: list[int]) -> None:
    words = coco_like_words(COCO_CAPTIONS)
    print(f"\n## padding in one epoch: {COCO_CAPTIONS:,} captions, {words.mean():.2f} words on average "
          f"(8 + Poisson(3), 1% of 15-30); padded target slots ÷ all slots\n")
    print(row("batch", "same-length batches (sampler)", "batches (smaller than B)", "shuffled batches"))
    print(row(*["---"] * 4))
    for batch_size in batch_sizes:
        cells = []
        for same_length in (True, False):
            batches = epoch_batches(words, batch_size, same_length)
            slots = sum(len(b) * (b.max() + 1) for b in batches)
            waste = 1 - (words + 1).sum() / slots
            cells.append(f"{100 * waste:.2f}%")
            if same_length:
                cells.append(f"{len(batches):,} ({sum(len(b) < batch_size for b in batches)})")
        print(row(batch_size, *cells))


def bench_input(args, train_results: dict) -> None:
    """The input pipeline: benchmarks/input_pipeline.py, then the cached-feature DataLoader alone on its cache."""
    script, out = ROOT / "input_pipeline.py", Path(args.input_out)
    print("\n## input pipeline\n")
    if not script.exists():
        print(f"{script} is not there: nothing to run (its cache is where the DataLoader timing reads from).")
        return
    options = ["--images", "32", "--steps", "2", "--hidden-dim", "512"] if args.quick else []
    subprocess.run([sys.executable, str(script), "--out", str(out), *options], check=True)
    if not (out / "features" / "manifest.json").exists():
        print(f"no feature cache under {out}/features: skipping the DataLoader timing")
        return
    from caption.data.datamodule import CaptionDataModule
    from caption.data.sources.karpathy import KarpathySource

    source = KarpathySource(annotations=str(out / "dataset.json"), images=str(out / "images"))
    for workers in (0, 2):
        data = CaptionDataModule(source=source, batch_size=32, num_workers=workers, same_length_batches=True,
                                 features=str(out / "features"), encoder_weights=str(out / "vgg16-random.pth"))
        loader = data.train_dataloader()
        for _ in loader:  # the first epoch starts the workers
            pass
        captions, started = 0, time.perf_counter()
        while time.perf_counter() - started < 3.0:
            captions += sum(len(batch["caption"]) for batch in loader)
        rate = captions / (time.perf_counter() - started)
        print(f"cached-feature DataLoader, {workers} workers: {rate:,.0f} captions/s")
        if train_results:
            fastest = max(train_results, key=lambda case: train_results[case]["captions"])
            print(f"  {rate / train_results[fastest]['captions']:,.1f}x what the fastest training case above "
                  f"({fastest}) consumes: {train_results[fastest]['captions']:,.1f} captions/s")


def print_speedups(results: dict[str, dict], support: str) -> None:
    """bf16-mixed against fp32, case by case: the ratio of their tokens/s (training) or images/s (decoding)."""
    print(f"\n## bf16-mixed ÷ fp32, same cases, same process (bf16 matrix units: {support})\n")
    print(row("case", "fp32", "bf16-mixed", "bf16 ÷ fp32"))
    print(row(*["---"] * 4))
    for case, fp32 in results.items():
        bf16 = results.get(case.removesuffix(" fp32") + " bf16")
        if not case.endswith(" fp32") or bf16 is None:
            continue
        unit = "tokens" if case.startswith("train") else "images"
        print(row(case.removesuffix(" fp32"), f"{fp32[unit]:,.1f} {unit}/s", f"{bf16[unit]:,.1f} {unit}/s",
                  f"{bf16[unit] / fp32[unit]:.2f}x"))


def allocator_setting(device: torch.device) -> str:
    """Keep freed memory for reuse as `--keep_freed_memory true` does (CPU runs on glibc), and say what it did."""
    knobs = configure_allocator(device.type)
    if knobs and all(knobs.values()):
        return "freed memory kept for reuse, as `caption fit --keep_freed_memory true` does"
    return "glibc default" if not knobs else "partly tuned: " + ", ".join(name for name, ok in knobs.items() if ok)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="configuration (a) only, 3 timed steps, 1 repeat")
    parser.add_argument("--only", nargs="+", choices=["train", "decode", "padding", "self_critical", "input"],
                        default=["train", "decode", "padding", "self_critical", "input"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), help="default: a b on CPU, b on GPU")
    parser.add_argument("--attention", nargs="+", choices=["soft", "hard"], default=["soft", "hard"])
    parser.add_argument("--precision", nargs="+", choices=sorted(REFERENCE_DTYPES),
                        help="default: both where the hardware has bf16 matrix units, else fp32")
    parser.add_argument("--steps", type=int, help="timed training steps per case (default 8; --quick 3)")
    parser.add_argument("--repeats", type=int, help="timed decoding runs per case (default 3; --quick 1)")
    parser.add_argument("--decode-images", type=int, default=DECODE_IMAGES,
                        help=f"images each decoding run captions (default {DECODE_IMAGES})")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's, one per core)")
    parser.add_argument("--compile", action="store_true",
                        help="model.optimization.compile: torch.compile the decoder step")
    parser.add_argument("--profile", action="store_true", help="profile one step of every train and beam-3 case")
    parser.add_argument("--input-out", default="runs/benchmarks/input_pipeline", help="where `input` builds its data")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc as it is (else its thresholds are raised, as --keep_freed_memory "
                             "does)")
    args = parser.parse_args()
    device = torch.device(args.device)
    malloc = "glibc default" if args.default_malloc else allocator_setting(device)
    cuda = device.type == "cuda"
    support = bf16_support(device)
    args.configs = args.configs or (["b"] if cuda else ["a"] if args.quick else ["a", "b"])
    args.precision = args.precision or (["fp32"] if support == "none" else ["fp32", "bf16"])
    args.steps = args.steps or (3 if args.quick else 8)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*self.log.*")  # training_step runs without a Trainer here
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    size = 8192 if cuda else 2048
    clocks = {precision: Clock(device, REFERENCE_DTYPES[precision], size) for precision in args.precision}
    print(header(args, device) + f"; malloc: {malloc}; bf16 matrix units: {support}")
    print(f"# reference: {size}³ matmul in the case's precision ("
          + ", ".join(f"{precision} {clock.matmul_rate() / 1e9:,.0f} GFLOP/s" for precision, clock in clocks.items())
          + "); ratio = achieved FLOP/s ÷ that reference's FLOP/s, measured right before each timed step")
    print()
    results: dict[str, dict] = {}
    if {"train", "decode"} & set(args.only):
        print(row(*COLUMNS))
        print(row(*["---"] * len(COLUMNS)))
    if "train" in args.only:
        for config in args.configs:
            for attention in args.attention:
                for precision in args.precision:
                    results[f"train ({config}) {attention} {precision}"] = bench_train(
                        args, clocks[precision], config, attention, precision)
    if "decode" in args.only:
        for config in args.configs:
            for precision in args.precision:
                for beam, result in bench_decode(args, clocks[precision], config, precision).items():
                    results[f"decode ({config}) {'greedy' if beam == 1 else f'beam {beam}'} {precision}"] = result
    if len(args.precision) == 2:
        print_speedups(results, support)
    train_results = {case: result for case, result in results.items() if case.startswith("train")}
    if "padding" in args.only:
        bench_padding([32, 64])
    if "self_critical" in args.only:
        print("\n| case | step (median) | reward | notes |\n|---|---:|---|---|")
        for attention in args.attention:
            bench_self_critical(args, clocks[args.precision[0]], attention)
    if "input" in args.only:
        bench_input(args, train_results)
    print(f"\n# load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
