"""Learning quality and where the model looks, on the built-in data: the shapes configs and ablations.

    python benchmarks/shapes.py                                  # the two shapes configs as they ship (alone!)
    python benchmarks/shapes.py --ablations --jobs 2             # + the ablation table of the README
    python benchmarks/shapes.py --only soft_alpha_c_1 --epochs 4 --out /tmp/shapes

Each run is the real `caption fit --config ...` (with the overrides of its row) in its own process; then
its best checkpoint (validation BLEU-4) decodes the test split with beam 3 and is scored here:
- BLEU-1..4, METEOR, ROUGE-L, CIDEr (coco-caption, PTB tokenizer; all in DIR/shapes.json) and attention accuracy: the share of object nouns whose α peak,
  at the step that emits the noun, lies inside that object's box (`caption.metrics.attention_accuracy`);
- the score a uniformly random location gets on the same nouns (`chance_attention_accuracy`);
- mean β over object nouns (is the gate open when the model names an object?);
- hard attention: accuracy with the expected context (the original's test-time choice) and with
  argmax decoding (one location per word);
- greedy validation BLEU-4 per epoch, and the largest drop below its best so far after epoch 5.
Prints a markdown table and writes DIR/shapes.json. Run it alone on the machine: wall times are the whole
`caption fit` (data, training, validation, final test), comparable only with --jobs 1.
"""

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import torch

from caption.data.records import object_for_word
from caption.inference import Captioner, evaluate, training_data

SOFT, HARD = "configs/shapes_soft.yaml", "configs/shapes_hard.yaml"
# The encoder before this work: 8×8 grid, 3×3 in every block (an annotation sees 38×38 of 64×64 pixels), no x, y.
BEFORE = ["--model.encoder_channels", "[16, 32, 64, 128]", "--model.encoder_kernel_sizes", "[3, 3, 3, 3]",
          "--model.encoder_coordinates", "false"]
# name -> (config, overrides, what the row shows)
RUNS: dict[str, tuple[str, list[str], str]] = {
    "soft": (SOFT, [], "configs/shapes_soft.yaml as shipped"),
    "hard": (HARD, [], "configs/shapes_hard.yaml as shipped"),
}
ABLATIONS: dict[str, tuple[str, list[str], str]] = {
    "soft_before_encoder": (SOFT, BEFORE, "the encoder before this work: 8×8 grid, receptive field 38 px, no x, y"),
    "soft_coarse_grid": (SOFT, ["--model.encoder_channels", "[16, 32, 64, 128]",
                                "--model.encoder_kernel_sizes", "[3, 3, 3, 1]"], "8×8 grid, receptive field 22 px"),
    "soft_no_coordinates": (SOFT, ["--model.encoder_coordinates", "false"], "no x, y input channels"),
    "soft_uniform": (SOFT, ["--model.inverse_temperature", "0.0"],
                     "α uniform (inverse temperature 0): what the mean annotation alone gives away"),
    "soft_before_encoder_uniform": (SOFT, [*BEFORE, "--model.inverse_temperature", "0.0"],
                                    "α uniform, the encoder before this work"),
    "soft_alpha_c_orig": (SOFT, ["--model.alpha_c", "0.25"], "λ = α_c·B/L = 64/256 (capgen's normalisation)"),
    "soft_alpha_c_1": (SOFT, ["--model.alpha_c", "1.0"], "λ = 1 per caption (before this work)"),
    "soft_constant_lr": (SOFT, ["--lr_scheduler", "null"], "no learning-rate schedule"),
    "hard_reinforce_6.4": (HARD, ["--model.reinforce_weight", "6.4"], "λ_r = 0.1·B (the original's effective weight)"),
    "hard_entropy_0.128": (HARD, ["--model.entropy_weight", "0.128"], "λ_e = 0.002·B (the original's effective weight)"),
    "hard_before_encoder": (HARD, BEFORE, "the encoder before this work"),
}


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    metrics = max(run_dir.glob("logs/version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    return list(csv.DictReader(metrics.open()))


def largest_drop(bleu: list[float], after_epoch: int = 5) -> float:
    """Largest fall of validation BLEU-4 below its best so far, over the epochs after the first `after_epoch`
    (`bleu[i]` is epoch i + 1)."""
    drops = [max(bleu[: epoch + 1]) - bleu[epoch] for epoch in range(after_epoch, len(bleu))]
    return max(drops, default=0.0)


def object_word_beta(evaluation, records) -> float:
    betas = [float(beta) for image_id, caption in evaluation.captions.items()
             for word, beta in zip(caption.words, caption.beta)
             if object_for_word(records[image_id].objects, word) is not None]
    return sum(betas) / len(betas) if betas else float("nan")


def score(run_dir: Path, *, hard: bool) -> dict[str, float]:
    best = min(run_dir.glob("checkpoints/best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    captioner = Captioner.from_checkpoint(best, device="cpu")
    data = training_data(captioner)
    records = {record.image_id: record for record in data.usable("test")}
    contexts = ["expected", "argmax"] if hard else [None]
    result: dict[str, float] = {}
    for context in contexts:
        if context is not None:
            captioner.module.decoder.attention.eval_context = context
        evaluation = evaluate(captioner, data, split="test", beam_size=3, description=f"{run_dir.name} {context or ''}")
        suffix = "" if context in (None, "expected") else f"_{context}"
        result |= {f"{metric}{suffix}": value for metric, value in evaluation.scores.items()} | {
            f"attention_accuracy{suffix}": evaluation.attention_accuracy,
            f"chance{suffix}": evaluation.attention_accuracy_chance,
            f"object_beta{suffix}": object_word_beta(evaluation, records),
        }
    return result


def fit(name: str, config: str, overrides: list[str], out: Path, epochs: int | None, threads: int | None) -> dict:
    run_dir = out / name
    log = out / f"{name}.log"
    command = [sys.executable, "-m", "caption.cli", "fit", "--config", config, *overrides,
               "--trainer.default_root_dir", str(run_dir), "--trainer.logger.init_args.save_dir", str(run_dir),
               "--trainer.enable_progress_bar", "false"]
    if epochs is not None:
        command += ["--trainer.max_epochs", str(epochs)]
    environment = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    started = time.perf_counter()
    with log.open("w") as stream:
        if subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, env=environment).returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed; see {log}")
    wall = time.perf_counter() - started
    rows = metrics_rows(run_dir)
    bleu = [float(row["val/bleu4"]) for row in rows if row.get("val/bleu4")]
    return {"name": name, "config": config, "overrides": " ".join(overrides), "epochs": len(bleu),
            "val_bleu4": bleu, "val_drop_after_5": largest_drop(bleu), "wall_seconds": round(wall),
            "threads": threads or torch.get_num_threads()}


def cell(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ablations", action="store_true", help="also run the ablation rows")
    parser.add_argument("--only", nargs="+", default=None, help="run just these rows (names above)")
    parser.add_argument("--epochs", type=int, default=None, help="override trainer.max_epochs of every run")
    parser.add_argument("--out", type=Path, default=Path("runs/shapes"))
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, one thread each when > 1 (wall times are then not comparable)")
    args = parser.parse_args()
    table = RUNS | (ABLATIONS if args.ablations or args.only else {})
    names = args.only or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {sorted(table)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# shapes benchmark, {date.today()}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    threads = 1 if args.jobs > 1 else None
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # fits in parallel; scoring (Java inside) one at a time
        futures = {name: pool.submit(fit, name, *table[name][:2], args.out, args.epochs, threads) for name in names}
        results = []
        for name, future in futures.items():
            row = future.result()
            results.append(row | score(args.out / name, hard="hard" in Path(row["config"]).stem))
            (args.out / "shapes.json").write_text(json.dumps(results, indent=2))
            print(f"done {name}: {json.dumps({k: v for k, v in results[-1].items() if k != 'val_bleu4'})}", flush=True)
    print("| run | what | epochs | test BLEU-4 | attention accuracy | random location | β on nouns "
          "| argmax: accuracy | argmax: BLEU-4 | val drop after epoch 5 | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in results:
        print(f"| {row['name']} | {table[row['name']][2]} | {row['epochs']} | {cell(row['bleu4'])} "
              f"| {cell(row['attention_accuracy'])} | {cell(row['chance'])} | {cell(row['object_beta'])} "
              f"| {cell(row.get('attention_accuracy_argmax'))} | {cell(row.get('bleu4_argmax'))} "
              f"| {cell(row['val_drop_after_5'])} | {row['wall_seconds']} |")


if __name__ == "__main__":
    main()
