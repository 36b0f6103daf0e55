"""The shapes recipe on a generated dataset in the real formats (`caption.data.synthetic.scene_files`), used by
benchmarks/positions.py and benchmarks/silhouettes.py.

Three stages, with the shapes configs as they ship and only the data swapped for the generated one (`DIR/data.yaml`:
`KarpathySource` with its instances file, the images at their own size) and room for its captions
(`model.decoding.max_caption_length`): `caption pretrain-encoder --config shapes_encoder` (the encoder as a
classifier of the instances file's objects), `shapes_soft` starting from that encoder, then `shapes_hard` on the
soft run's best encoder, frozen; each stage is given the folder of the one before (`model.encoder.weights`). No
objective setting is overridden. `--from-scratch`: the soft stage's encoder starts from random weights instead
(no encoder stage), the recipe before the encoder stage. Each best checkpoint (validation BLEU-4) then decodes the
test split with beam 3 and is scored with the coco-caption metrics and where each object noun looked (attention
accuracy beside a random location and a random object of the image). Writes DIR/<name>.json and prints a table.
`--smoke`: the same at a tiny size (`_helpers.SMOKE_FIT`), to check it runs.
"""

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

from _helpers import SMOKE_FIT, SMOKE_SPLITS

from caption.data.synthetic.scene_files import SceneFiles

STAGES = {"encoder": "shapes_encoder", "soft": "shapes_soft", "hard": "shapes_hard"}  # stage -> its named run
# `caption pretrain-encoder` overrides of a smoke run: one epoch, the smoke fit's encoder (`_helpers.SMOKE_FIT`)
SMOKE_ENCODER = ("--pretraining.epochs", "1", "--config", json.dumps({"model": {"encoder": {"channels": [4, 8, 8]}}}))


def data_config(files: SceneFiles, *, image_size: int, caption_length: int, out: Path) -> Path:
    """The settings that swap the shapes data for the generated dataset (read at its size, no crop)."""
    path = out / "data.yaml"
    path.write_text(json.dumps({"model": {"decoding": {"max_caption_length": caption_length}},
                                "data": {"source": files.source_settings(image_size=image_size)}}))
    return path


def run(name: str, command: list[str], out: Path) -> float:
    """One stage's `caption` command in its own process (log: out/name.log); returns its wall seconds."""
    command = [sys.executable, "-m", "caption.cli", *command]
    started = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed; see {out / f'{name}.log'}")
    return time.perf_counter() - started


def fit_command(configs: list[str], overrides: list[str], run: Path) -> list[str]:
    """`caption fit` of one stage into `run`."""
    return ["fit", *(f"--config={config}" for config in configs), *overrides, "--trainer.default_root_dir", str(run),
            "--trainer.logger.init_args.save_dir", str(run), "--trainer.enable_progress_bar", "false"]


def score(run: Path) -> dict[str, float]:
    """The test scores of the run's best checkpoint, beam 3: coco-caption metrics, attention accuracy, α entropy."""
    from caption.inference import Captioner, evaluate, training_data

    best = min(run.glob("checkpoints/best-*.ckpt"), key=lambda path: path.stat().st_mtime)
    captioner = Captioner.from_checkpoint(best, device="cpu")
    evaluation = evaluate(captioner, training_data(captioner), split="test", beam_size=3, description=run.name)
    return evaluation.scores | evaluation.attention_scores()


def two_stage(files: SceneFiles, *, image_size: int, caption_length: int, out: Path, from_scratch: bool = False,
              overrides: tuple[str, ...] = (), encoder_overrides: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """The encoder (unless `from_scratch`), soft on it, then hard on soft's encoder: {stage: its scores and wall
    seconds}; `overrides` go to both fits, `encoder_overrides` to the encoder stage."""
    out.mkdir(parents=True, exist_ok=True)
    data = str(data_config(files, image_size=image_size, caption_length=caption_length, out=out))
    results: dict[str, dict[str, float]] = {}
    if from_scratch:
        start = ["--model.encoder.weights", "none"]
    else:
        wall = run("encoder", ["pretrain-encoder", f"--config={STAGES['encoder']}", f"--config={data}",
                               "--trainer.default_root_dir", str(out / "encoder"), *encoder_overrides], out)
        about = json.loads((out / "encoder" / "encoder.json").read_text())
        results["encoder"] = {"accuracy": about["accuracy"], "chance": 1 / len(about["categories"]),
                              "best_epoch": about["best_epoch"] + 1, "wall_seconds": round(wall)}
        start = ["--model.encoder.weights", str(out / "encoder")]
    walls = {"soft": run("soft", fit_command([STAGES["soft"], data], [*start, *overrides], out / "soft"), out)}
    walls["hard"] = run("hard", fit_command([STAGES["hard"], data], ["--model.encoder.weights", str(out / "soft"),
                                                                     *overrides], out / "hard"), out)
    return results | {stage: score(out / stage) | {"wall_seconds": round(wall)} for stage, wall in walls.items()}


def table(name: str, results: dict[str, dict[str, float]]) -> str:
    """The results as a markdown table."""
    def cell(value: float | None) -> str:
        return "–" if value is None or value != value else f"{value:.3f}"

    lines = [f"# {name} benchmark, {date.today()}"]
    if "encoder" in results:
        encoder = results["encoder"]
        lines.append(f"encoder stage: held-out object accuracy {encoder['accuracy']:.3f} "
                     f"(chance {encoder['chance']:.3f}), best epoch {encoder['best_epoch']}, "
                     f"{encoder['wall_seconds']} s")
    lines += ["| config | BLEU-1 | BLEU-4 | CIDEr | attention accuracy | random object | α entropy | wall s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {stage} | {cell(row['bleu1'])} | {cell(row['bleu4'])} | {cell(row['cider'])} "
              f"| {cell(row.get('attention_accuracy'))} | {cell(row.get('attention_chance_object'))} "
              f"| {row['alpha_entropy']:.2f} | {row['wall_seconds']} |" for stage, row in results.items()
              if stage != "encoder"]
    lines.append(f"hard − soft BLEU-4: {results['hard']['bleu4'] - results['soft']['bleu4']:+.3f}")
    return "\n".join(lines)


def main(*, name: str, description: str, generate: Callable[..., SceneFiles], image_size: int,
         caption_length: int) -> None:
    """The command line of a dataset's benchmark: generate it (kept if there), then the two stages, unless
    --generate-only."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help=f"default: data/{name} (--smoke: data/{name}_smoke)")
    parser.add_argument("--out", type=Path, help=f"default: runs/{name} (--smoke: runs/{name}_smoke)")
    parser.add_argument("--train", type=int, default=3000, help="training images (val and test: 200 each)")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--from-scratch", action="store_true", help="no encoder stage: the soft run trains its "
                        "encoder from random weights (default out: runs/<name>_scratch)")
    parser.add_argument("--smoke", action="store_true", help="a few images, one epoch of each stage, a model of a "
                        "few units: checks the script runs (its figures mean nothing)")
    args = parser.parse_args()
    folder = f"{name}_smoke" if args.smoke else name  # a smoke run's data is never kept for a real one
    args.data = args.data or Path("data") / folder
    args.out = args.out or Path("runs") / (f"{folder}_scratch" if args.from_scratch else folder)
    splits = SMOKE_SPLITS if args.smoke else {"train": args.train, "val": 200, "test": 200}
    files = generate(args.data.resolve(), splits=splits)
    if args.generate_only:
        print(f"wrote {files.annotations}, {files.instances} and {files.images}/")
        return
    results = two_stage(files, image_size=image_size, caption_length=caption_length, out=args.out,
                        from_scratch=args.from_scratch, overrides=SMOKE_FIT if args.smoke else (),
                        encoder_overrides=SMOKE_ENCODER if args.smoke else ())
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=2))
    print(table(name, results))
