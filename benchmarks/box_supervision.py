"""Does attention supervised by boxes keep hard attention looking under beam search? Hard attention's stage 2 trained
with `model.hard.box_supervision`, beside the same stage without it, on the soft runs' frozen encoders of
`benchmarks/seeds.py`; each run's validation split decoded greedily and at beam 3 (`caption evaluate --beam_sizes 1 3`).

    python benchmarks/seeds.py shapes_generic --seeds 0 1 2          # the soft runs (and hard ones without it)
    python benchmarks/box_supervision.py runs/seeds/shapes_generic --seeds 0 1 2 --weight 1.0
    python benchmarks/box_supervision.py runs/seeds/positions --data runs/seeds/positions/data.yaml --seeds 2
    python benchmarks/box_supervision.py --smoke        # on a tiny soft run it trains first: checks it runs

For each seed N: `caption fit --config shapes_hard --config <data> --seed_everything N --trainer.precision 32-true
--model.encoder.weights SEEDS/soft_seedN --model.hard.box_supervision W` into OUT/boxes_seedN (default OUT: SEEDS/
box_supervision), kept when already trained; then `caption evaluate --split val --beam_sizes 1 3` of it and of
SEEDS/hard_seedN (the same stage without the supervision), when there. Prints a table per seed and the means, and
writes OUT/box_supervision.json.

What it measured, with the machine and date: docs/measurements.md#attention-supervised-by-boxes-under-beam-search.
"""

import argparse
import json
from pathlib import Path

from _helpers import SMOKE_FIT, SMOKE_SPLITS, caption

BEAMS = ("1", "3")


def beam_scores(run: Path) -> dict[int, dict[str, float]]:
    """{beam size: {bleu4, cider, attention_accuracy}} of `run` on the validation split, evaluated once."""
    out = run / "eval_val"
    if not (out / "beam_sizes.json").is_file():
        caption(["evaluate", "--ckpt_path", str(run), "--split", "val", "--beam_sizes", *BEAMS,
                 "--predictions.out", str(out)], run.parent / f"{run.name}-eval_val.log")
    rows = json.loads((out / "beam_sizes.json").read_text())
    return {int(row["beam_size"]): row for row in rows["models"][0]["scores"]}


def figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def difference(greedy: float | None, beam: float | None) -> str:
    return "–" if greedy is None or beam is None else f"{beam - greedy:+.3f}"


def smoke_fit(out: Path) -> list[str]:
    """The tiny overrides of a smoke run, after training its soft seed 0 into OUT/soft_seed0."""
    tiny = [*SMOKE_FIT, "--data.source.init_args.root", str(out / "data"), "--trainer.enable_progress_bar", "false",
            *(f"--data.source.init_args.num_{split}={count}" for split, count in SMOKE_SPLITS.items())]
    soft = out / "soft_seed0"
    caption(["fit", "--config", "shapes_soft", "--config", "shapes_generic", "--model.encoder.weights", "none", *tiny,
             "--trainer.default_root_dir", str(soft), "--trainer.logger.init_args.save_dir", str(soft)],
            out / "soft_seed0.log")
    return tiny


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seeds_folder", type=Path, nargs="?", help="benchmarks/seeds.py's OUT: soft_seedN (and "
                        "hard_seedN)")
    parser.add_argument("--smoke", action="store_true", help="seed 0 of a tiny soft run it trains first")
    parser.add_argument("--data", default="shapes_generic", help="the data config of those runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--weight", type=float, default=1.0, help="model.hard.box_supervision")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.smoke:
        args.seeds_folder, args.seeds = args.out or Path("runs/box_supervision_smoke"), [0]
    if args.seeds_folder is None:
        parser.error("give benchmarks/seeds.py's folder (or --smoke)")
    out = args.out or args.seeds_folder / "box_supervision"
    out.mkdir(parents=True, exist_ok=True)
    extra = smoke_fit(out) if args.smoke else []
    results: dict[str, dict[int, dict]] = {"with": {}, "without": {}}
    for seed in args.seeds:
        run = out / f"boxes_seed{seed}"
        if not (run / "checkpoints" / "last.ckpt").is_file():
            caption(["fit", "--config", "shapes_hard", "--config", args.data, "--seed_everything", str(seed),
                     "--trainer.enable_progress_bar", "false", "--trainer.precision", "32-true",
                     "--model.encoder.weights", str(args.seeds_folder / f"soft_seed{seed}"),
                     "--model.hard.box_supervision", str(args.weight), "--trainer.default_root_dir", str(run),
                     "--trainer.logger.init_args.save_dir", str(run), *extra], out / f"{run.name}.log")
        results["with"][seed] = beam_scores(run)
        baseline = args.seeds_folder / f"hard_seed{seed}"
        if baseline.is_dir():
            results["without"][seed] = beam_scores(baseline)
    print("| runs | seed | greedy accuracy | beam 3 accuracy | beam 3 − greedy | beam 3 BLEU-4 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, seeds in results.items():
        gaps = []
        for seed, scores in seeds.items():
            greedy, beam = scores[1]["attention_accuracy"]["mean"], scores[3]["attention_accuracy"]["mean"]
            if greedy is not None and beam is not None:  # None: no generated word named an object
                gaps.append((greedy, beam))
            print(f"| {name} | {seed} | {figure(greedy)} | {figure(beam)} | {difference(greedy, beam)} | "
                  f"{figure(scores[3]['bleu4']['mean'])} |")
        if seeds:
            greedy, beam = ((sum(pair[i] for pair in gaps) / len(gaps)) if gaps else None for i in (0, 1))
            print(f"| {name} | mean | {figure(greedy)} | {figure(beam)} | {difference(greedy, beam)} | |")
    (out / "box_supervision.json").write_text(json.dumps({"weight": args.weight, **results}, indent=1))


if __name__ == "__main__":
    main()
