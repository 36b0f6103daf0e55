"""Training and beam-search speed and peak GPU memory at the paper's COCO sizes: fp32 against bf16-mixed.

Synthetic features stand in for COCO (nothing to download): annotations of 14×14×512 (L=196, D=512,
VGG conv5 at 224×224), captions of 16 words plus <end> over 10,000 words, batch 64, word embedding 512,
LSTM 1800, attention 512 (the original code's COCO config). Every run is a short `Trainer.fit` of the
real CaptionModule (encoder skipped: the batches carry annotations, as with the feature cache), soft and hard; then
beam search (3 and 5) over 64 images of random annotations, 20 words each (<end> made impossible), under the same
autocast (`caption.model.precision`). `python benchmarks/speed.py --device cuda` gives the same cases as a fraction of
the GPU's matmul rate in each precision.

    python benchmarks/precision_gpu.py                          # on a GPU: prints a Markdown table
    python benchmarks/precision_gpu.py --device cpu --tiny      # smoke test of the script itself
"""

import argparse
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from caption.model.precision import autocast
from caption.model.vocabulary import Vocabulary
from caption.training.module import CaptionModule


class SyntheticCaptions(Dataset):
    """Ready-made batches: random annotations (B, L, D) and random captions <start> w_1..w_T <end>."""

    def __init__(self, *, batches: int, batch_size: int, locations: int, dim: int, words: int, length: int):
        generator = torch.Generator().manual_seed(0)
        self.annotations = torch.randn(batch_size, locations, dim, generator=generator).relu()
        body = torch.randint(len(Vocabulary.SPECIALS), words, (batch_size, length), generator=generator)
        start = torch.full((batch_size, 1), Vocabulary.START)
        end = torch.full((batch_size, 1), Vocabulary.END)
        self.caption = torch.cat([start, body, end], dim=1)  # (B, T+1)
        self.batches = batches

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"annotations": self.annotations, "caption": self.caption, "image_id": torch.arange(len(self.caption))}


class Timer(L.Callback):
    """Seconds per optimizer step after `warmup` steps, and the peak CUDA memory of the run."""

    def __init__(self, warmup: int):
        self.warmup, self.start, self.seconds_per_step = warmup, 0.0, float("nan")

    def on_train_batch_end(self, trainer, module, *_):
        if trainer.global_step == self.warmup:
            self.start = synced_now(module.device)

    def on_train_end(self, trainer, module):
        self.seconds_per_step = (synced_now(module.device) - self.start) / (trainer.global_step - self.warmup)


def synced_now(device: torch.device) -> float:
    """time.perf_counter() once the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def coco_module(attention: str, args: argparse.Namespace, **settings) -> tuple[CaptionModule, int, int]:
    """The CaptionModule at the paper's COCO sizes (`--tiny`: a few units), its vocabulary size and its L."""
    decoder, dim = (dict(embed_dim=8, hidden_dim=16), 8) if args.tiny else (dict(embed_dim=512, hidden_dim=1800), 512)
    words, locations = (50, 9) if args.tiny else (10_000, 196)
    vocabulary = list(Vocabulary.SPECIALS) + [f"w{i}" for i in range(words - len(Vocabulary.SPECIALS))]
    module = CaptionModule(vocabulary=vocabulary, encoder={"name": "vgg16", "weights": "none"}, decoder=decoder,
                           attention={"kind": attention, "dim": dim}, **settings)
    return module, words, locations


def measure(attention: str, precision: str, args: argparse.Namespace) -> tuple[float, float]:
    module, words, locations = coco_module(attention, args)
    steps = args.warmup + args.steps
    data = SyntheticCaptions(batches=steps, batch_size=args.batch_size, locations=locations,
                             dim=module.model.encoder.dim, words=words, length=args.length)
    timer = Timer(args.warmup)
    trainer = L.Trainer(
        accelerator=args.device, devices=1, precision=precision, max_steps=steps, limit_val_batches=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        gradient_clip_val=5.0, callbacks=[timer],
    )
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(module, DataLoader(data, batch_size=None, num_workers=2, pin_memory=args.device == "cuda"))
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    return 1.0 / timer.seconds_per_step, peak


def measure_search(precision: str, beam_size: int, args: argparse.Namespace) -> tuple[float, float]:
    """(images/s, peak GiB) of beam search over `args.images` images in `precision`, after one untimed run."""
    module, _, locations = coco_module("soft", args, decoding={"max_caption_length": 20})
    module = module.to(args.device).eval()
    with torch.no_grad():
        module.model.decoder.output_words.bias[Vocabulary.END] = float("-inf")  # every hypothesis runs to the cap
    annotations = torch.randn(args.images, locations, module.model.encoder.dim, device=args.device)

    def run() -> None:
        with torch.no_grad(), autocast(args.device, precision):
            module.model.generate(annotations, beam_size=beam_size)

    run()
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = synced_now(module.device)
    run()
    seconds = synced_now(module.device) - started
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    return args.images / seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=50, help="timed optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (allocator, kernel selection)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--length", type=int, default=16, help="words per caption (plus <end>)")
    parser.add_argument("--images", type=int, default=64, help="images each beam search captions")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, to check the script runs")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: `--device cpu --tiny` checks the script on the CPU")
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"{device}, batch {args.batch_size}, {args.length + 1} target words per caption, {args.steps} timed steps")
    print("| attention | precision | steps/s | captions/s | tokens/s | peak memory (GiB) |\n|---|---|---|---|---|---|")
    for attention in ("soft", "hard"):
        for precision in ("32-true", "bf16-mixed"):
            steps_per_second, peak = measure(attention, precision, args)
            captions = steps_per_second * args.batch_size
            print(f"| {attention} | {precision} | {steps_per_second:.2f} | {captions:.0f} "
                  f"| {captions * (args.length + 1):.0f} | {peak:.2f} |")
    print("\n| search | precision | images/s | peak memory (GiB) |\n|---|---|---|---|")
    for beam_size in (3, 5):
        for precision in ("32-true", "bf16-mixed"):
            images_per_second, peak = measure_search(precision, beam_size, args)
            print(f"| beam {beam_size} | {precision} | {images_per_second:.1f} | {peak:.2f} |")


if __name__ == "__main__":
    main()
