"""`caption compare`: several models (soft vs hard attention) on the same split, in one report.

    caption compare runs/shapes_soft runs/shapes_hard --predictions.out reports/shapes

Each model is evaluated as `caption evaluate` does (`caption.inference.evaluate`), all on the same data and split (the
first checkpoint's data, or `--config`), the references PTB-tokenised once for all. DIR (`--predictions.out`) gets
report.md (a table laid out like the paper's Table 1 with the paper's numbers beside it, overlays side by side,
training curves) and each model's results in DIR/<name>/. A run folder stands for its newest model-selection
checkpoint and its newest logs. The parts are in `caption.reports`, imported once the options are read. The report,
file by file: docs/attention.md#from-the-command-line.
"""

import warnings
from pathlib import Path

from caption.cli.options import CommandParser, add_split_evaluation, device, given_decoding
from caption.errors import ConfigError
from caption.io.outputs import writable_folder
from caption.reports import DATASETS


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption compare",
        description="Evaluate several models on the same split and write report.md with tables and figures.",
    )
    parser.add_argument("models", nargs="+", type=Path, metavar="CKPT_OR_RUN", help="checkpoints or run folders")
    add_split_evaluation(parser, out="report.md, its figures and each model's metrics.json, captions.json and "
                         "captions.csv", data="the first checkpoint's", decoding="each checkpoint's")
    parser.add_argument("--names", nargs="+", default=None, help="a name per model (default: soft, hard, ...)")
    parser.add_argument("--images", type=int, default=3, help="images shown with each model's overlays (default: 3)")
    parser.add_argument("--dataset", default=None, choices=DATASETS,
                        help="dataset for the paper's numbers (default: guessed from the data settings)")
    args = parser.parse_args(argv)
    decoding = given_decoding(args)
    if args.images < 0:
        parser.error(f"--images must be >= 0, got {args.images}")
    from caption.evaluation.ptb_tokenizer import PTBCache
    from caption.inference import build_data, evaluate, write_evaluation
    from caption.reports.figures import overlay_figures, write_curves
    from caption.reports.runs import data_differences, read_models
    from caption.reports.table import dataset_name, results_table, write_report

    models = read_models(args.models, names=args.names, device=device(args), config=args.config, decoding=decoding)
    if models[0].captioner.data is None:
        raise ConfigError(f"checkpoint {models[0].checkpoint} does not record its data: pass the training config "
                          "(--config)")
    settings, origin = models[0].captioner.data
    first = models[0].training_data() if args.config is None else None  # with --config, all are evaluated on it
    for model in models[1:]:
        trained_on = None if first is None else model.training_data()
        differences = [] if trained_on is None else data_differences(first, trained_on)
        if differences:
            warnings.warn(f"{model.name} was trained on other data than {models[0].name} ({'; '.join(differences)}); "
                          "all are evaluated on the latter")
    data = build_data(settings, origin)
    # once the inputs are known good (no empty folder left by a refused checkpoint), before any work: one line if not
    writable_folder(args.out, what="--predictions.out")
    if args.batch_size is not None:
        data.eval_batch_size = args.batch_size
    evaluations, cache = [], PTBCache()  # the references' PTB tokens, for every model
    for model in models:
        evaluation = evaluate(model.captioner, data, split=args.split, meteor_timeout=args.meteor_timeout,
                              description=model.name, out=args.out / model.name, cache=cache)
        write_evaluation(evaluation, args.out / model.name, checkpoint=str(model.checkpoint))
        evaluations.append(evaluation)
    figures = overlay_figures(models, evaluations, data, args.split, args.images, args.out)
    curves_path, left_out = write_curves(models, args.out)
    for name, why in left_out.items():
        warnings.warn(f"{name}: no training curves drawn: {why}")
    dataset = args.dataset or dataset_name(settings)
    report = write_report(models, evaluations, dataset=dataset, split=args.split, figures=figures,
                          curves=curves_path, curves_left_out=left_out, out=args.out)
    print(results_table(models, evaluations, dataset))
    print(f"wrote {report}")
