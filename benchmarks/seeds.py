"""Soft against hard attention over seeds: the README's stages trained once per seed, then `caption compare` of the
soft runs against the hard runs on validation and on test, with intervals and the paired test.

    python benchmarks/seeds.py shapes --seeds 0 1 2 --self-critical    # the quick start's data, cross-entropy and SCST
    python benchmarks/seeds.py shapes_generic --seeds 0 1 2           # shapes with generic references, a held-out test
    python benchmarks/seeds.py positions --seeds 0 1 2                # the generated datasets in the real formats
    python benchmarks/seeds.py silhouettes --seeds 0 1 2
    python benchmarks/seeds.py positions --beam_sizes 1 2 3 4 5       # and grounding against the beam size
    python benchmarks/seeds.py --smoke                                # two tiny seeds: checks the script runs

Per seed N, the documented loop (README "Compare soft and hard attention"), with `--seed_everything N` and its own
folders OUT/<stage>_seedN (default OUT: runs/seeds/<data>): `caption pretrain-encoder --config shapes_encoder`, then
`shapes_soft` from that encoder, `shapes_hard` on the soft run's encoder, frozen, and with `--self-critical`
`shapes_soft_scst` and `shapes_hard_scst` from those runs. Only the data is swapped in (shapes_generic: the config
of that name; positions and silhouettes: generated, `benchmarks/two_stage.py`'s data.yaml); the same data for every
seed, so the seeds differ in initialisation and order only. A stage already trained (its last.ckpt, or the
encoder's encoder.json) is kept: the script resumes. Then, per objective and split, `caption compare
OUT/soft_seed* --against OUT/hard_seed* --split S` (beam 3, greedy beside it) into OUT/compare/<objective>-<split>/,
and a table of every comparison.json: the mean ± 95% interval over seeds of BLEU-4, CIDEr-D and attention
accuracy, and the paired test of hard − soft on each. Writes OUT/seeds.json and OUT/seeds.md.
"""

import argparse
import json
from datetime import date
from pathlib import Path

from _helpers import caption, SMOKE_FIT, SMOKE_SPLITS, cpu_name
from two_stage import SMOKE_ENCODER, data_config

FIGURES = {"bleu4": "BLEU-4", "cider": "CIDEr-D", "attention_accuracy": "attention accuracy",
           "greedy/bleu4": "greedy BLEU-4", "greedy/attention_accuracy": "greedy accuracy"}  # beam 3, then greedy
GENERATED = ("positions", "silhouettes")
CAPTION_LENGTH = {"positions": 24, "silhouettes": 24}



def data_configs(name: str, out: Path, *, smoke: bool) -> list[str]:
    """The --config arguments that swap the data in (none for shapes)."""
    if smoke:
        settings = {"data": {"source": {"init_args": {"root": str(out / "data"), **{
            f"num_{split}": count for split, count in SMOKE_SPLITS.items()}}}}}
        (out / "smoke.yaml").write_text(json.dumps(settings))
        return ["--config", str(out / "smoke.yaml")]
    if name == "shapes":
        return []
    if name == "shapes_generic":
        return ["--config", "shapes_generic"]
    from importlib import import_module

    module = import_module(f"caption.data.synthetic.{name}")
    files = module.generate(Path("data", name).resolve(), splits={"train": 3000, "val": 200, "test": 200})
    size = module.SIZE if name == "positions" else module.READ_SIZE
    return ["--config", str(data_config(files, image_size=size, caption_length=CAPTION_LENGTH[name], out=out))]


def train_seed(seed: int, out: Path, data: list[str], *, self_critical: bool, smoke: bool,
               precision: str) -> dict[str, float]:
    """The stages of one seed, each skipped when already trained; {stage: wall seconds} of those run."""
    walls: dict[str, float] = {}
    common = ["--seed_everything", str(seed), "--trainer.enable_progress_bar", "false", "--trainer.precision",
              precision, *data, *(SMOKE_FIT if smoke else ())]

    def fit(stage: str, config: str, start: list[str]) -> None:
        run = out / f"{stage}_seed{seed}"
        if not (run / "checkpoints" / "last.ckpt").is_file():
            walls[stage] = caption(["fit", "--config", config, *common, *start, "--trainer.default_root_dir",
                                    str(run), "--trainer.logger.init_args.save_dir", str(run)], out / f"{run.name}.log")

    encoder = out / f"encoder_seed{seed}"
    if smoke:
        start = ["--model.encoder.weights", "none"]
    else:
        if not (encoder / "encoder.json").is_file():
            walls["encoder"] = caption(["pretrain-encoder", "--config", "shapes_encoder", *data, "--seed_everything",
                                        str(seed), "--trainer.precision", precision,
                                        "--trainer.default_root_dir", str(encoder),
                                        *(SMOKE_ENCODER if smoke else ())], out / f"{encoder.name}.log")
        start = ["--model.encoder.weights", str(encoder)]
    on_soft = ["--model.encoder.weights", str(out / f"soft_seed{seed}")]  # hard's encoder: soft's, frozen
    fit("soft", "shapes_soft", start)
    fit("hard", "shapes_hard", on_soft)
    if self_critical:  # from each run, with the encoder settings it was trained with
        for kind, encoder_start in (("soft", start), ("hard", on_soft)):
            fit(f"{kind}_scst", f"shapes_{kind}_scst",
                [*encoder_start, "--model.optimization.init_from", str(out / f"{kind}_seed{seed}")])
    return walls


def compare(out: Path, seeds: list[int], objective: str, split: str, beam_sizes: list[int]) -> dict:
    """`caption compare` of the soft seeds against the hard seeds (at each of `beam_sizes` too): its comparison.json,
    with its beam_sizes.json under "beam_sizes"."""
    suffix = "" if objective == "cross-entropy" else "_scst"
    folder = out / "compare" / f"{objective}-{split}"
    soft = [str(out / f"soft{suffix}_seed{seed}") for seed in seeds]
    hard = [str(out / f"hard{suffix}_seed{seed}") for seed in seeds]
    swept = ["--beam_sizes", *map(str, beam_sizes)] if beam_sizes else []
    caption(["compare", *soft, "--against", *hard, "--names", "soft", "hard", "--split", split, "--images", "0",
             *swept, "--predictions.out", str(folder)], out / f"compare-{objective}-{split}.log")
    comparison = json.loads((folder / "comparison.json").read_text())
    if beam_sizes:
        comparison["beam_sizes"] = json.loads((folder / "beam_sizes.json").read_text())
    return comparison


def cell(interval: dict) -> str:
    mean, half = interval["mean"], interval.get("half_width")
    if mean is None:
        return "–"
    return f"{mean:.3f}" if half is None else f"{mean:.3f} ± {half:.3f}"


def table(name: str, comparisons: dict[tuple[str, str], dict], seeds: int) -> str:
    """Per objective and kind: each figure on val and test, mean ± 95% interval over seeds; then hard − soft."""
    splits = sorted({split for _, split in comparisons}, key=["val", "test"].index)
    head = " | ".join(f"{split} {label}" for split in splits for label in FIGURES.values())
    lines = [f"| data | objective | kind | {head} |", "|---|---|---|" + "---:|" * (len(FIGURES) * len(splits))]
    for objective in dict.fromkeys(objective for objective, _ in comparisons):
        for kind in ("soft", "hard"):
            cells = [cell(group_interval(comparisons[objective, split], kind, figure))
                     for split in splits for figure in FIGURES]
            lines.append(f"| {name} | {objective} | {kind} | " + " | ".join(cells) + " |")
        cells = [paired_cell(comparisons[objective, split], figure) for split in splits for figure in FIGURES]
        lines.append("| | | hard − soft (paired, 95%) | " + " | ".join(cells) + " |")
    return "\n".join([f"{seeds} seeds each; mean ± 95% Student-t interval over seeds; hard − soft: the paired "
                      "test over seeds and images (Welch–Satterthwaite's t), its 95% interval (* : outside zero)", "",
                      *lines])


def beam_table(name: str, comparisons: dict[tuple[str, str], dict]) -> str:
    """Per objective, split and kind, BLEU-4, CIDEr-D and attention accuracy at each beam size (mean ± 95% interval
    over seeds), from each comparison's beam_sizes.json."""
    lines = ["| data | objective | split | kind | beam size | BLEU-4 | CIDEr-D | attention accuracy |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for (objective, split), comparison in comparisons.items():
        for model in comparison["beam_sizes"]["models"]:
            for scores in model["scores"]:
                cells = [cell(scores.get(metric) or {"mean": None})
                         for metric in ("bleu4", "cider", "attention_accuracy")]
                lines.append(f"| {name} | {objective} | {split} | {model['name']} | {scores['beam_size']} | "
                             + " | ".join(cells) + " |")
    return "\n".join(["Grounding against beam size: mean ± 95% Student-t interval over seeds", "", *lines])


def group_interval(comparison: dict, kind: str, figure: str) -> dict:
    group = next(group for group in comparison["groups"] if group["name"] == kind)
    return group["intervals"].get(figure) or {"mean": None}


def paired_cell(comparison: dict, figure: str) -> str:
    test = next((test for test in comparison["paired_tests"] if test["metric"] == figure), None)
    if test is None or test["difference"] is None:  # greedy's, or no object word to score
        return "–"
    outside = test["low"] > 0 or test["high"] < 0
    return f"{test['difference']:+.3f} [{test['low']:+.3f}, {test['high']:+.3f}]" + ("*" if outside else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", default="shapes", choices=("shapes", "shapes_generic", *GENERATED))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--self-critical", action="store_true", help="also each run's SCST stage")
    parser.add_argument("--splits", nargs="+", default=["val", "test"], choices=("val", "test"))
    parser.add_argument("--out", type=Path, help="default: runs/seeds/<data> (--smoke: runs/seeds_smoke)")
    parser.add_argument("--train-only", action="store_true", help="train the seeds, compare nothing")
    parser.add_argument("--smoke", action="store_true", help="two seeds of a tiny model on 8 images, no encoder stage")
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"),
                        help="every stage's --trainer.precision (default: 32-true)")
    parser.add_argument("--beam_sizes", nargs="+", type=int, default=[],
                        help="also compare at each of these beam sizes (`caption compare --beam_sizes`)")
    args = parser.parse_args()
    if args.smoke:
        args.seeds = args.seeds if len(args.seeds) == 2 else [0, 1]
    suffix = "" if args.precision == "32-true" else "-bf16"
    out = args.out or (Path("runs/seeds_smoke") if args.smoke else Path("runs/seeds") / (args.data + suffix))
    out.mkdir(parents=True, exist_ok=True)
    data = data_configs(args.data, out, smoke=args.smoke)
    walls = {seed: train_seed(seed, out, data, self_critical=args.self_critical, smoke=args.smoke,
                              precision=args.precision) for seed in args.seeds}
    if args.train_only:
        return
    objectives = ["cross-entropy", *(["self-critical"] if args.self_critical else [])]
    comparisons = {(objective, split): compare(out, args.seeds, objective, split, args.beam_sizes)
                   for objective in objectives for split in args.splits}
    text = table(args.data, comparisons, len(args.seeds))
    if args.beam_sizes:
        text += "\n\n" + beam_table(args.data, comparisons)
    about = {"data": args.data, "seeds": args.seeds, "date": str(date.today()), "cpu": cpu_name(),
             "wall_seconds": walls, "comparisons": {f"{objective}-{split}": comparison
                                                    for (objective, split), comparison in comparisons.items()}}
    (out / "seeds.json").write_text(json.dumps(about, indent=2))
    (out / "seeds.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
