"""`caption compare`: several models (soft vs hard attention) on the same split, in one report.

    caption compare runs/shapes_soft runs/shapes_hard --predictions.out reports/shapes
    caption compare runs/shapes_soft_seed* --against runs/shapes_hard_seed* --predictions.out reports/shapes_seeds

Each model is evaluated as `caption evaluate` does (`caption.inference.evaluate`), all on the same data and split (the
first checkpoint's data, or `--config`), the references PTB-tokenised once for all. DIR (`--predictions.out`, default
reports/compare) gets report.md (a table laid out like the paper's Table 1 with the paper's numbers beside it,
overlays side by side, training curves) and each model's results in DIR/<name>/. A run folder stands for its newest
model-selection checkpoint and its newest logs. The parts are in `caption.reports`, imported once the options are
read. The report, file by file: docs/attention.md#from-the-command-line.

With `--against` the models form groups, each the runs of one recipe (its seeds): the positional models are the first
group, each `--against` (repeatable, one or more models each) another; `--names` names the groups (default: the
attention kind of a group's first model). The table then has a row per group, each metric's mean over its seeds ±
the half-width of its 95% Student-t interval; a paired test (the seeds' spread and the shared test images'
jackknife, Welch–Satterthwaite's t: `caption.reports.intervals`) sets each later group against the first on BLEU-4,
CIDEr-D and attention accuracy, in words, for the recipes with two seeds or more per group, for these trained models
with one; every run's scores follow, each run's results in DIR/<group>/<run folder's name>/ (DIR/<group>/
for a group of one), and DIR/comparison.json holds the groups, their runs, per-seed scores, means, intervals and
tests. The curves draw a group's mean over its min–max band. Without `--against`, each model is its own, as above.

With `--beam_sizes 1 2 3`, each model also decodes the split at each of those beam sizes (each batch encoded once),
and report.md gets a section "Grounding against beam size": BLEU-4, CIDEr-D and attention accuracy per model (or
group, with its seeds' intervals) and beam size, beside DIR/beam_sizes.png and DIR/beam_sizes.json
(`caption.reports.beam_sizes`).
"""

import argparse
import warnings
from pathlib import Path

from caption.cli.options import CommandParser, add_split_evaluation, device, given, given_beam_sizes, path
from caption.errors import ConfigError
from caption.io.outputs import writable_folder
from caption.reports import DATASETS


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption compare",
        description="Evaluate several models on the same split and write report.md with tables and figures; with "
                    "--against, groups of runs (seeds), with intervals over the seeds and a paired test.",
        epilog="examples:\n"
               "  caption compare runs/shapes_soft runs/shapes_hard --predictions.out reports/shapes\n"
               "  caption compare runs/shapes_soft_seed* --against runs/shapes_hard_seed* "
               "--predictions.out reports/shapes_seeds",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("models", nargs="+", type=path, metavar="CKPT_OR_RUN",
                        help="checkpoints or run folders (with --against: the first group)")
    add_split_evaluation(parser, out="report.md, its figures and each model's metrics.json, captions.json and "
                         "captions.csv", out_default="reports/compare", data="the first checkpoint's",
                         decoding="each checkpoint's")
    parser.add_argument("--against", nargs="+", action="append", default=None, metavar="CKPT_OR_RUN",
                        help="another group of runs (e.g. the seeds of one recipe: runs/hard_seed*), set against the "
                             "models given first, which then form one group; repeatable. Each group's row shows the "
                             "mean over its runs ± a 95%% t interval, and a paired test sets each group against "
                             "the first (report.md, comparison.json)")
    parser.add_argument("--names", nargs="+", default=None,
                        help="a name per model, or with --against per group (default: soft, hard, ...: the attention "
                             "kind of each model, or of each group's first)")
    parser.add_argument("--images", type=int, default=3, help="images shown with each model's overlays (default: 3)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="dataset for the paper's numbers (default: guessed from the data settings)")
    args = parser.parse_args(argv)
    decoding = given(args, "model.decoding")
    beam_sizes = given_beam_sizes(args)
    if args.images < 0:
        parser.error(f"--images must be >= 0, got {args.images}")
    from caption.evaluation.ptb_tokenizer import PTBCache
    from caption.inference import build_data, evaluate, made_by, write_evaluation
    from caption.reports.beam_sizes import beam_size_row, beam_size_table, write_beam_sizes
    from caption.reports.figures import overlay_figures, write_curves
    from caption.reports.runs import read_groups, read_models, training_difference
    from caption.reports.seeds import compare_seeds, write_comparison
    from caption.reports.table import (
        beside_greedy, dataset_name, grouped_table, paired_table, results_table, write_report,
    )

    groups = None
    if args.against is None:
        models = read_models(args.models, names=args.names, device=device(args), config=args.config,
                             decoding=decoding, precision=args.trainer.precision)
    else:
        against = [[Path(run) for run in runs] for runs in args.against]  # jsonargparse: no type for appended lists
        groups = read_groups([args.models, *against], names=args.names, device=device(args), config=args.config,
                             decoding=decoding, precision=args.trainer.precision)
        models = [model for group in groups for model in group.models]
    if models[0].captioner.data is None:
        raise ConfigError(f"checkpoint {models[0].checkpoint} does not record its data: pass the training config "
                          "(--config)")
    settings, origin = models[0].captioner.data
    first = models[0].training_data() if args.config is None else None  # with --config, all are evaluated on it
    for model in models[1:]:
        trained_on = None if first is None else model.training_data()
        difference = None if trained_on is None else training_difference(model.name, trained_on,
                                                                          first_name=models[0].name, first=first)
        if difference is not None:
            warnings.warn(difference)
    data = build_data(settings, origin)
    # once the inputs are known good (no empty folder left by a refused checkpoint), before any work: one line if not
    out = args.predictions.out
    writable_folder(out, what="--predictions.out")
    if args.data.eval_batch_size is not None:
        data.eval_batch_size = args.data.eval_batch_size
    evaluations, made, cache = [], [], PTBCache()  # the references' PTB tokens, for every model
    for model in models:
        evaluation = evaluate(model.captioner, data, split=args.split, meteor_timeout=args.meteor_timeout,
                              description=model.name, out=out / model.name, cache=cache, beam_sizes=beam_sizes)
        made.append(made_by(model.captioner))
        write_evaluation(evaluation, out / model.name, checkpoint=str(model.checkpoint), made=made[-1])
        evaluations.append(evaluation)
    shown = list(range(len(models)))  # the overlays: every model, or each group's first run
    if groups is not None:
        firsts = [group.models[0] for group in groups]
        shown = [index for index, model in enumerate(models) if any(model is first for first in firsts)]
    figures = overlay_figures([models[i] for i in shown], [evaluations[i] for i in shown], data, args.split,
                              args.images, out)
    by_group = None if groups is None else {group.name: [model.name for model in group.models] for group in groups}
    curves_path, left_out, constant = write_curves(models, out, by_group)
    for name, why in left_out.items():
        warnings.warn(f"{name}: no training curves drawn: {why}")
    dataset = args.dataset or dataset_name(settings)
    seeds = None
    if groups is not None:
        runs = iter(evaluations)
        seeds = compare_seeds(groups, [[next(runs) for _ in group.models] for group in groups])
        write_comparison(seeds, split=args.split, dataset=dataset, out=out)
    swept, written = None, ()  # a row per model, or per group, and beam size
    if beam_sizes:
        named = dict(zip((model.name for model in models), evaluations))
        rows = by_group or {model.name: [model.name] for model in models}
        swept = [beam_size_row(name, {run: named[run] for run in runs}) for name, runs in rows.items()]
        written = write_beam_sizes(swept, split=args.split, images=len(evaluations[0].captions), out=out)
    report = write_report(models, evaluations, dataset=dataset, split=args.split, figures=figures,
                          curves=curves_path, curves_left_out=left_out, constant_curves=constant, out=out,
                          seeds=seeds, beam_sizes=swept, made=made)
    if seeds is None:
        print(results_table(models, evaluations, dataset))
        print("\n".join(beside_greedy(models, evaluations, seeds)))
    else:
        print(grouped_table(seeds, dataset))
        print("\n".join(beside_greedy(models, evaluations, seeds)))
        print(f"\npaired test (B − A, in points of %):\n{paired_table(seeds)}")
        print(f"wrote {out / 'comparison.json'}")
    if swept is not None:
        print(f"\ngrounding against beam size (%):\n{beam_size_table(swept)}")
        print(f"wrote {' and '.join(map(str, written))}")
    print(f"wrote {report}")
