"""Learning quality and where the model looks, on the built-in data: the shapes configs and their ablations.

    python benchmarks/shapes.py                                   # the two shapes configs as they ship (alone!)
    python benchmarks/shapes.py --hard-ablations --jobs 2 --epochs 1   # + one row per hard-attention estimator
    python benchmarks/shapes.py --only hard_samples_4 --epochs 4 --out /tmp/shapes
    python benchmarks/shapes.py --smoke                           # a tiny run, to check it works (runs/shapes_smoke)

Each run is the real `caption fit --config ...` (with the overrides of its row) in its own process. Stage 0 comes
first, `caption pretrain-encoder --config shapes_encoder` into <out>/encoder, then the soft run from its encoder
(`model.encoder.weights: <out>/encoder`, as `shapes_soft` does with `runs/shapes_encoder`): it is stage 1 of the
hard recipe, and every hard row but `hard_from_scratch` trains its decoder on soft's encoder, frozen
(`model.encoder.weights: <out>/soft`, as `shapes_hard` does with `runs/shapes_soft`). Then each run's best checkpoint
(validation BLEU-4) decodes the test split with beam 3 and is scored here:
- BLEU-1..4, METEOR, ROUGE-L, CIDEr (coco-caption, PTB tokenizer; all in DIR/shapes.json);
- where each object noun's α peak lies (`caption.evaluation.grounding.localisation`): on the named object (the attention
  accuracy), on another object, on the background, or the noun names an object the image lacks; beside the
  accuracy of a uniformly random location and of a peak on a uniformly chosen object of the image;
- mean β over object nouns (is the gate open when the model names an object?) and the mean entropy of α per
  generated word;
- hard attention: the same with argmax decoding (one location per word) beside the expected context;
- from the training logs: validation accuracy at its best and in the last epoch (does it keep looking?), the
  largest drop of validation BLEU-4 below its best after epoch 3, and the mean squared advantage (R - b)² of the
  last epoch (what the baseline leaves of the reward's variance).
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
from _helpers import SMOKE_FIT, SMOKE_SPLITS

from caption.data.synthetic.shapes import object_for_word
from caption.inference import Captioner, evaluate, training_data

SOFT, HARD = "shapes_soft", "shapes_hard"
# name -> (config, overrides, what the row shows)
RUNS: dict[str, tuple[str, list[str], str]] = {
    "soft": (SOFT, [], "`shapes_soft` as shipped (stage 1)"),
    "hard": (HARD, [], "`shapes_hard` as shipped: the paper's estimator on soft's frozen encoder"),
}
HARD_ABLATIONS: dict[str, tuple[str, list[str], str]] = {
    "hard_from_scratch": (HARD, ["--model.encoder.weights", "none", "--model.encoder.freeze", "false"],
                          "the encoder trained from scratch under REINFORCE"),
    "hard_reinforce_0.1": (HARD, ["--model.hard.reinforce_weight", "0.1"], "λ_r = 0.1 per caption"),
    "hard_entropy_0.128": (HARD, ["--model.hard.entropy_weight", "0.128"],
                           "λ_e = 0.002·B = 0.128, the original's effective entropy weight"),
    "hard_samples_4": (HARD, ["--model.hard.samples", "4"], "N = 4 samples per caption, moving-average baseline"),
    "hard_samples_8": (HARD, ["--model.hard.samples", "8"], "N = 8 samples per caption, moving-average baseline"),
    "hard_leave_one_out": (HARD, ["--model.hard.samples", "4", "--model.hard.baseline", "leave_one_out"],
                           "N = 4, leave-one-out baseline (Kool et al., 2019)"),
    "hard_learned_baseline": (HARD, ["--model.hard.baseline", "learned"],
                              "learned baseline b(h_{t-1}) (Mnih et al., 2014)"),
    "hard_step_credit": (HARD, ["--model.hard.credit", "step"],
                         "per-step reward: each location gets the words it can affect"),
    "hard_semi_sampling_schedule": (HARD, ["--model.hard.semi_sampling", "1.0",
                                           "--model.hard.semi_sampling_final", "0.0"],
                                    "semi-sampling from 1 (all expected context) to 0 (all sampled), linearly"),
    "hard_no_semi_sampling": (HARD, ["--model.hard.semi_sampling", "0.0"], "no semi-sampling: every caption sampled"),
}
TABLE = RUNS | HARD_ABLATIONS


def stage_zero(out: Path, *, smoke: bool) -> str:
    """`caption pretrain-encoder --config shapes_encoder` into out/encoder (a smoke run: one epoch of its tiny data and
    encoder); one line saying its held-out accuracy and wall seconds."""
    tiny = {"model": {"encoder": {"channels": [4, 8, 8]}}, "data": {"source": {"init_args": {
        "root": str(out / "data"), **{f"num_{split}": count for split, count in SMOKE_SPLITS.items()}}}}}
    command = [sys.executable, "-m", "caption.cli", "pretrain-encoder", "--config", "shapes_encoder",
               "--trainer.default_root_dir", str(out / "encoder"),
               *(["--config", json.dumps(tiny), "--pretraining.epochs", "1"] if smoke else [])]
    started = time.perf_counter()
    with (out / "encoder.log").open("w") as stream:
        if subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT).returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed; see {out / 'encoder.log'}")
    about = json.loads((out / "encoder" / "encoder.json").read_text())
    return (f"stage 0: held-out object accuracy {about['accuracy']:.3f} (best epoch {about['best_epoch'] + 1}), "
            f"{time.perf_counter() - started:.0f} s")


def stage_two(config: str, overrides: list[str]) -> bool:
    """Whether the row trains on stage 1's encoder (the hard config, unless the row trains its own)."""
    return config == HARD and "--model.encoder.weights" not in overrides


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    metrics = max(run_dir.glob("logs/version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    return list(csv.DictReader(metrics.open()))


def largest_drop(values: list[float], after_epoch: int = 3) -> float:
    """Largest fall of a validation curve below its best so far, over the epochs after the first `after_epoch`
    (`values[i]` is epoch i + 1)."""
    drops = [max(values[: epoch + 1]) - values[epoch] for epoch in range(after_epoch, len(values))]
    return max(drops, default=0.0)


def last_epoch_mean(rows: list[dict[str, str]], column: str) -> float:
    """The mean of a logged training column over the last epoch that logged it (NaN if none did)."""
    logged = [row for row in rows if row.get(column)]
    if not logged:
        return float("nan")
    last = max(int(row["epoch"]) for row in logged)
    values = [float(row[column]) for row in logged if int(row["epoch"]) == last]
    return sum(values) / len(values)


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
        result |= {f"{metric}{suffix}": value for metric, value in
                   (evaluation.scores | evaluation.attention_scores()).items()}
        result[f"object_beta{suffix}"] = object_word_beta(evaluation, records)
    return result


def smoke_overrides(out: Path) -> list[str]:
    """`caption fit` overrides of a smoke run: `SMOKE_FIT` on a few built-in images generated under out/data."""
    sizes = [item for split, count in SMOKE_SPLITS.items()
             for item in (f"--data.source.init_args.num_{split}", str(count))]
    return [*SMOKE_FIT, "--data.source.init_args.root", str(out / "data"), *sizes]


def fit(name: str, config: str, overrides: list[str], out: Path, epochs: int | None, threads: int | None,
        extra: list[str]) -> dict:
    """One row's `caption fit` in its own process, into out/name, `extra` overrides after the row's; its figures from
    the logs."""
    run_dir = out / name
    log = out / f"{name}.log"
    stage_one = ["--model.encoder.weights", str(out / "soft")] if stage_two(config, overrides) else []
    stage_one = ["--model.encoder.weights", str(out / "encoder")] if name == "soft" else stage_one
    command = [sys.executable, "-m", "caption.cli", "fit", "--config", config, *stage_one, *overrides,
               "--trainer.default_root_dir", str(run_dir), "--trainer.logger.init_args.save_dir", str(run_dir),
               "--trainer.enable_progress_bar", "false", *extra]
    if epochs is not None:
        command += ["--trainer.max_epochs", str(epochs)]
    environment = os.environ | ({"OMP_NUM_THREADS": str(threads)} if threads else {})
    started = time.perf_counter()
    with log.open("w") as stream:
        if subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, env=environment).returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed; see {log}")
    wall = time.perf_counter() - started
    rows = metrics_rows(run_dir)
    validations = [row for row in rows if row.get("val/bleu4")]
    bleu = [float(row["val/bleu4"]) for row in validations]
    accuracy = [float(row.get("val/attention_accuracy") or "nan") for row in validations]
    return {"name": name, "config": config, "overrides": " ".join(overrides), "epochs": len(bleu),
            "val_bleu4": bleu, "val_accuracy": accuracy, "val_bleu4_drop": largest_drop(bleu),
            "val_accuracy_best": max(accuracy, default=float("nan")),
            "val_accuracy_last": accuracy[-1] if accuracy else float("nan"),
            "advantage_square": last_epoch_mean(rows, "train/advantage_square"),
            "wall_seconds": round(wall), "threads": threads or torch.get_num_threads()}


def cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def print_table(results: list[dict]) -> None:
    print("| run | what | epochs | BLEU-4 | accuracy | other object | background | absent | random location "
          "| random object | β on nouns | α entropy | argmax: accuracy / BLEU-4 | val accuracy: best / last "
          "| (R − b)² | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in results:
        argmax = f"{cell(row.get('attention_accuracy_argmax'))} / {cell(row.get('bleu4_argmax'))}"
        print(f"| {row['name']} | {TABLE[row['name']][2]} | {row['epochs']} | {cell(row['bleu4'])} "
              f"| {cell(row['attention_accuracy'])} | {cell(row['attention_other_object'])} "
              f"| {cell(row['attention_background'])} | {cell(row['attention_absent'])} "
              f"| {cell(row['attention_chance_location'])} | {cell(row['attention_chance_object'])} "
              f"| {cell(row['object_beta'])} | {cell(row['alpha_entropy'], 2)} "
              f"| {argmax if 'bleu4_argmax' in row else '–'} "
              f"| {cell(row['val_accuracy_best'])} / {cell(row['val_accuracy_last'])} "
              f"| {cell(row['advantage_square'], 4)} | {row['wall_seconds']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hard-ablations", action="store_true", help="also run the hard-attention estimator rows")
    parser.add_argument("--only", nargs="+", default=None, help="run just these rows (names above); the hard rows "
                        "need <out>/soft, trained first when missing (and reused, not retrained, when there)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="override trainer.max_epochs of every hard row, the shipped one too "
                             "(soft runs as shipped)")
    parser.add_argument("--out", type=Path, help="default: runs/shapes (--smoke: runs/shapes_smoke)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, one thread each when > 1 (wall times are then not comparable)")
    parser.add_argument("--smoke", action="store_true", help="a few images (under <out>/data), one epoch, a model of "
                        "a few units: checks the script runs (its figures mean nothing)")
    args = parser.parse_args()
    args.out = args.out or Path("runs/shapes_smoke" if args.smoke else "runs/shapes")
    extra = smoke_overrides(args.out) if args.smoke else []
    names = args.only or list(RUNS) + (list(HARD_ABLATIONS) if args.hard_ablations else [])
    unknown = sorted(set(names) - set(TABLE))
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {sorted(TABLE)}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# shapes benchmark, {date.today()}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    threads = 1 if args.jobs > 1 else None
    results = []

    def finish(row: dict) -> None:
        results.append(row | score(args.out / row["name"], hard="hard" in Path(row["config"]).stem))
        (args.out / "shapes.json").write_text(json.dumps(results, indent=2))
        print(f"done {row['name']}: {json.dumps({k: v for k, v in results[-1].items() if not k.startswith('val_')})}",
              flush=True)

    if list((args.out / "soft").glob("checkpoints/best-*.ckpt")):  # stage 1 of an earlier run in this folder
        print(f"stage 1: the encoder of {args.out / 'soft'}, trained before (not run nor scored again)", flush=True)
    elif "soft" in names or any(stage_two(*TABLE[name][:2]) for name in names):  # stage 1 first: the hard rows
        print(stage_zero(args.out, smoke=args.smoke), flush=True)
        finish(fit("soft", *TABLE["soft"][:2], args.out, None, None, extra))  # train on its encoder
    rest = [name for name in names if name != "soft"]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # fits in parallel; scoring (Java inside) one at a time
        futures = [pool.submit(fit, name, *TABLE[name][:2], args.out, args.epochs, threads, extra) for name in rest]
        for future in futures:
            finish(future.result())
    print_table(results)


if __name__ == "__main__":
    main()
