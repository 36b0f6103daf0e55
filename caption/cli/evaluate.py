"""`caption evaluate`: the coco-caption metrics of a checkpoint on a split, as the paper reports them.

    caption evaluate --ckpt_path runs/shapes_soft --split test      # eval/shapes_soft/

Writes DIR/captions.json (the COCO results format of `caption.evaluation.results`: image_id, caption, file_name,
log_prob) and DIR/captions.csv as soon as the split is decoded, then DIR/metrics.json, which also names the checkpoint
and the tokenizer: coco-caption's PTB tokenizer (Java), or its pure-Python stand-in without Java. DIR
(`--predictions.out`, as for `caption predict`; default eval/<run name>) is created and checked writable before any
work. `--ckpt_path` is a checkpoint file, or a run folder standing for the checkpoint `caption compare` picks there.
The data comes from the checkpoint (`caption fit` stores the data settings in it) or from
`--config`, a YAML file with a `data:` section such as the training config. The work is
`caption.inference.evaluate`, imported once the options are read: `caption evaluate --help` answers at once.

With `--beam_sizes 1 2 3`, the split is also decoded at each of those beam sizes (each batch encoded once): BLEU-4,
CIDEr-D and attention accuracy against the beam size, printed as a table and written to DIR/beam_sizes.json and
DIR/beam_sizes.png (`caption.reports.beam_sizes`).
"""

import warnings

from caption.cli.options import (
    CommandParser,
    add_checkpoint,
    add_split_evaluation,
    device,
    evaluation_folder,
    given,
    given_beam_sizes,
    run_name,
)
from caption.errors import CaptionWarning
from caption.io.outputs import writable_folder


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption evaluate",
        description="Score a checkpoint's captions on a split with coco-caption's metrics (pycocoevalcap).",
    )
    add_checkpoint(parser)
    add_split_evaluation(parser, out="metrics.json, captions.json and captions.csv", data="the checkpoint's data",
                         decoding="the checkpoint's", out_default="eval/<run name>: the name of the checkpoint's "
                         "run folder (runs/x, runs/x/checkpoints/best.ckpt: eval/x)",
                         derived=evaluation_folder)
    args = parser.parse_args(argv)
    out = args.predictions.out
    decoding = given(args, "model.decoding")
    beam_sizes = given_beam_sizes(args)
    from caption.inference import Captioner, evaluate, made_by, training_data, write_evaluation

    # --config: a file, a packaged config's name or a named run (its fragments' `data:` merged)
    captioner = Captioner.from_checkpoint(args.ckpt_path, device=device(args), sha256=args.sha256, config=args.config,
                                          decoding=decoding, precision=args.trainer.precision)
    data = training_data(captioner)
    # once the inputs are known good (no empty folder left by a refused checkpoint), before any work: one line if not
    writable_folder(out, what="--predictions.out")
    if args.data.eval_batch_size is not None:
        data.eval_batch_size = args.data.eval_batch_size
    evaluation = evaluate(captioner, data, split=args.split, meteor_timeout=args.meteor_timeout, out=out,
                          beam_sizes=beam_sizes)
    write_evaluation(evaluation, out, checkpoint=captioner.checkpoint, made=made_by(captioner))
    print(evaluation.table())
    trained_on_cider = captioner.module.settings.self_critical is not None
    for line in evaluation.habit_warnings() if trained_on_cider else []:  # what SCST may teach its captions
        warnings.warn(line, CaptionWarning, stacklevel=1)
    print(f"wrote {out / 'metrics.json'}, {out / 'captions.json'} and {out / 'captions.csv'}")
    if beam_sizes:
        from caption.reports.beam_sizes import beam_size_row, beam_size_table, write_beam_sizes

        rows = [beam_size_row(run_name(args.ckpt_path), {run_name(args.ckpt_path): evaluation})]
        written = write_beam_sizes(rows, split=args.split, images=len(evaluation.captions), out=out)
        print(f"\ngrounding against beam size (%):\n{beam_size_table(rows)}")
        print(f"wrote {' and '.join(map(str, written))}")
