"""Learning quality on the built-in data: train the two shapes configs, print their test scores.

    python benchmarks/train_shapes.py                       # both configs, results under runs/benchmarks
    python benchmarks/train_shapes.py --configs configs/shapes_hard.yaml --out /tmp/bench

Each config is trained by the real `caption fit` (which ends by testing its best checkpoint, chosen
on validation BLEU-4, with beam search) in its own process. The configs cap training at 9.5 minutes
(`trainer.max_time`); the wall time printed here also covers validation, data generation and the
final test. Goals on a 2-core CPU: shapes_soft test BLEU-4 >= 0.80, shapes_hard >= 0.75.
"""

import argparse
import csv
import json
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
GOALS = {"shapes_soft": 0.80, "shapes_hard": 0.75}


def last_row_with(path: Path, key: str) -> dict[str, str]:
    rows = [row for row in csv.DictReader(path.open()) if row.get(key)]
    if not rows:
        raise SystemExit(f"{path} has no {key}: did the run fail? See its log next to it.")
    return rows[-1]


def train(config: Path, out: Path) -> dict[str, float | str]:
    name = config.stem
    run_dir = out / name
    log = out / f"{name}.log"
    started = time.perf_counter()
    with log.open("w") as stream:
        result = subprocess.run(
            [sys.executable, "-m", "caption.cli", "fit", "--config", str(config),
             "--trainer.default_root_dir", str(run_dir), "--trainer.logger.init_args.save_dir", str(run_dir),
             "--trainer.enable_progress_bar", "false"],
            stdout=stream, stderr=subprocess.STDOUT,
        )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"caption fit --config {config} failed; see {log}")
    metrics_file = max(run_dir.glob("logs/version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    test = last_row_with(metrics_file, "test/bleu4")
    best_val = max(float(row["val/bleu4"]) for row in csv.DictReader(metrics_file.open()) if row.get("val/bleu4"))
    scores = {metric: float(test[f"test/{metric}"]) for metric in METRICS}
    return {"config": str(config), **scores, "best_val_bleu4": best_val, "wall_seconds": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", type=Path,
                        default=[Path("configs/shapes_soft.yaml"), Path("configs/shapes_hard.yaml")])
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    print(f"# shapes benchmark, {date.today()}, {platform.processor() or platform.machine()}, "
          f"{platform.python_version()}, configs {[str(c) for c in args.configs]}")
    results = [train(config, args.out) for config in args.configs]
    header = ["config", *METRICS, "best_val_bleu4", "wall_seconds", "goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in results:
        goal = GOALS.get(Path(row["config"]).stem)
        verdict = "-" if goal is None else f"BLEU-4 >= {goal}: {'met' if row['bleu4'] >= goal else 'NOT met'}"
        cells = [row["config"], *(f"{row[m]:.3f}" for m in METRICS), f"{row['best_val_bleu4']:.3f}",
                 f"{row['wall_seconds']:.0f}", verdict]
        print("| " + " | ".join(cells) + " |")
    (args.out / "shapes.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
