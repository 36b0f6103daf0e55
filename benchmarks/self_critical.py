"""Self-critical training (SCST) from cross-entropy runs, measured: what it gains in CIDEr-D and what it does to
where the model looks.

    python benchmarks/self_critical.py                  # runs/shapes_soft and runs/shapes_hard (the quick start's)
    python benchmarks/self_critical.py --runs runs/positions/soft runs/positions/hard \
        --config runs/positions/data.yaml --out runs/positions_scst     # the positions benchmark's runs
    python benchmarks/self_critical.py --runs runs/shapes_soft --baselines mean_of_others greedy   # the two baselines
    python benchmarks/self_critical.py --smoke           # a tiny run it trains first: checks the script runs

For each cross-entropy run and each baseline: `caption fit --config shapes_<kind>_scst` (configs/scst.yaml and
configs/shapes_scst.yaml as they ship) starting from the run (`model.optimization.init_from`), with `--config`'s data
settings when given; then the run and its SCST run decode the test split with beam 3 and are scored alike: the
coco-caption metrics, attention accuracy, α entropy, distinct captions / images and the habits of
`caption.evaluation.degeneration`. The advantage's variance is the mean of train/advantage_std² over the SCST run's
steps. Writes OUT/self_critical.json and prints a markdown table, and each run's goals: CIDEr-D at least 5% above
the run it started from, attention accuracy no more than 0.02 below it, distinct captions not fewer, under 600 s.
"""

import argparse
import csv
import json
from datetime import date
from pathlib import Path

from _helpers import caption, SMOKE_FIT, SMOKE_SPLITS

GOALS = {"cider_gain": 0.05, "accuracy_drop": 0.02, "wall_seconds": 600}



def kind_of(run: Path) -> str:
    from caption.io.checkpoints import find_checkpoint, read_checkpoint

    return read_checkpoint(find_checkpoint(run))["hyper_parameters"]["attention"]["kind"]


def score(run: Path) -> dict[str, float]:
    """The test split with beam 3, scored as `caption evaluate` scores it."""
    from caption.inference import Captioner, evaluate, training_data

    captioner = Captioner.from_checkpoint(run, device="cpu")
    evaluation = evaluate(captioner, training_data(captioner), split="test", beam_size=3, description=run.name)
    return evaluation.logged() | {"distinct": evaluation.distinct(), "images": len(evaluation.captions)}


def advantage_variance(run: Path) -> float:
    """Mean of train/advantage_std² over the run's logged steps."""
    rows = [row for file in run.glob("logs/version_*/metrics.csv") for row in csv.DictReader(file.open())]
    values = [float(row["train/advantage_std"]) ** 2 for row in rows if row.get("train/advantage_std")]
    return sum(values) / len(values) if values else float("nan")


def self_critical(run: Path, *, baseline: str, out: Path, config: Path | None, overrides: tuple[str, ...]) -> dict:
    """SCST from `run` with `baseline` into OUT/<run>_<baseline>: its scores, wall seconds, advantage variance."""
    target = out / f"{run.name}_{baseline}"
    command = ["fit", "--config", f"shapes_{kind_of(run)}_scst", *(["--config", str(config)] if config else []),
               "--model.optimization.init_from", str(run), "--model.self_critical.baseline", baseline,
               "--model.encoder.weights", "none",  # every weight comes from the run (init_from)
               "--trainer.default_root_dir", str(target), "--trainer.logger.init_args.save_dir", str(target),
               "--trainer.enable_progress_bar", "false", "--trainer.limit_test_batches", "0", *overrides]
    wall = caption(command, out / f"{target.name}.log")
    return score(target) | {"wall_seconds": round(wall), "advantage_variance": advantage_variance(target)}


def table(results: dict[str, dict]) -> str:
    def cell(value: float | None) -> str:
        return "–" if value is None or value != value else f"{value:.3f}"
    lines = [f"# self-critical training, {date.today()}",
             "| run | CIDEr-D | BLEU-4 | attention accuracy | α entropy | distinct / images | dangling ending "
             "| advantage variance | wall s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        lines.append(f"| {name} | {cell(row['cider'])} | {cell(row['bleu4'])} | {cell(row.get('attention_accuracy'))} "
                     f"| {row['alpha_entropy']:.2f} | {row['distinct']} / {row['images']} "
                     f"| {cell(row['dangling_ending'])} | {cell(row.get('advantage_variance'))} "
                     f"| {row.get('wall_seconds', '–')} |")
    return "\n".join(lines)


def goals(start: dict, after: dict) -> str:
    """One line: each goal of an SCST run against the run it started from, met or not."""
    gain = after["cider"] / start["cider"] - 1
    drop = start.get("attention_accuracy", float("nan")) - after.get("attention_accuracy", float("nan"))
    checks = [f"CIDEr-D {gain:+.1%} ({'met' if gain >= GOALS['cider_gain'] else 'NOT met'}: ≥ +5%)",
              f"accuracy {-drop:+.3f} ({'met' if drop <= GOALS['accuracy_drop'] else 'NOT met'}: ≥ −0.02)",
              f"distinct {after['distinct'] - start['distinct']:+d} "
              f"({'met' if after['distinct'] >= start['distinct'] else 'NOT met'})",
              f"{after['wall_seconds']} s "
              f"({'met' if after['wall_seconds'] < GOALS['wall_seconds'] else 'NOT met'}: < 600 s)"]
    return "; ".join(checks)


def smoke_runs(out: Path) -> tuple[list[Path], Path]:
    """A tiny soft-attention cross-entropy run on a few built-in images, and the config of its data."""
    config = out / "data.json"
    splits = {f"num_{split}": count for split, count in SMOKE_SPLITS.items()}
    config.write_text(json.dumps({"data": {"source": {"init_args": {"root": str(out / "data"), **splits}}},
                                  "model": {"decoder": {"embed_dim": 8, "hidden_dim": 16}, "attention": {"dim": 8},
                                            "encoder": {"channels": [4, 8, 8]}}}))
    runs = []
    for kind in ("soft",):  # the hard run's path is the same script with another named run
        run = out / f"ce_{kind}"
        caption(["fit", "--config", f"shapes_{kind}", "--config", str(config), "--model.encoder.weights", "none",
                 *SMOKE_FIT, "--trainer.default_root_dir", str(run), "--trainer.logger.init_args.save_dir", str(run),
                 "--trainer.enable_progress_bar", "false"], out / f"ce_{kind}.log")
        runs.append(run)
    return runs, config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, nargs="+", default=[Path("runs/shapes_soft"), Path("runs/shapes_hard")])
    parser.add_argument("--config", type=Path, help="data settings of the runs when not the built-in shapes")
    parser.add_argument("--baselines", nargs="+", default=["mean_of_others"], choices=["mean_of_others", "greedy"])
    parser.add_argument("--out", type=Path, help="default: runs/shapes_scst (--smoke: runs/shapes_scst_smoke)")
    parser.add_argument("--epochs", type=int, help="SCST epochs (default: configs/shapes_scst.yaml's)")
    parser.add_argument("--smoke", action="store_true", help="a tiny soft run trained first, one SCST epoch")
    args = parser.parse_args()
    args.out = args.out or Path("runs") / ("shapes_scst_smoke" if args.smoke else "shapes_scst")
    args.out.mkdir(parents=True, exist_ok=True)
    overrides: tuple[str, ...] = ("--trainer.max_epochs", str(args.epochs)) if args.epochs else ()
    if args.smoke:
        args.runs, args.config = smoke_runs(args.out)
        overrides = ("--trainer.max_epochs", "1")
    results, lines = {}, []
    for run in args.runs:
        results[run.name] = start = score(run)
        for baseline in args.baselines:
            name = f"{run.name} + SCST ({baseline})"
            results[name] = after = self_critical(run, baseline=baseline, out=args.out, config=args.config,
                                                  overrides=overrides)
            lines.append(f"{name}: {goals(start, after)}")
    (args.out / "self_critical.json").write_text(json.dumps(results, indent=2))
    print("\n".join([table(results), *lines]))


if __name__ == "__main__":
    main()
