"""`caption describe`: caption your own images and see where the model looked.

    caption describe --ckpt_path runs/shapes_soft photo.jpg photos/ --predictions.out figures

Prints each image's caption and writes DIR/captions.json, captions.csv (`caption.evaluation.results`, after each batch,
before its figures) and DIR/<name>.png (the image as the encoder sees it, then one panel per word with its overlay:
`caption.evaluation.overlays`); with `--predictions.num_captions k`, each image's k best beams and DIR/<name>_1.png
... _k.png. Images get the transform of the model's training data (`caption.inference.Captioner`); folders are
captioned in batches (`caption.inference.describe_images`). The model, torch and the image libraries are imported once
the options are read. More:
docs/attention.md#from-the-command-line.
"""

from caption.cli.options import (
    CommandParser,
    add_batch_size,
    add_checkpoint,
    add_config,
    add_decoding,
    add_device,
    add_num_captions,
    add_output,
    device,
    given,
    path,
    positive_int,
)
from caption.errors import CaptionError
from caption.io.outputs import readable_name, writable_folder


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption describe",
        description="Caption images and draw where the model looked for each word (one figure per image).",
    )
    parser.add_argument("inputs", nargs="+", type=path, metavar="IMAGE_OR_FOLDER", help="image files and/or folders")
    add_checkpoint(parser)
    add_output(parser, default="runs/describe", help="folder for the figures, captions.json and captions.csv")
    add_config(parser, default=None,
               help="YAML with the training `data:` section, for checkpoints that do not record it")
    add_decoding(parser)
    add_num_captions(parser, default=None,
                     help="the k best beams of each image, each with its log-probability and figure (the beam is "
                          "then at least k wide; default: the best caption only)")
    add_batch_size(parser, default=16)
    parser.add_argument("--columns", type=positive_int, default=6, help="panels per row (default: 6)")
    parser.add_argument("--format", default="png", choices=("png", "pdf", "svg", "jpg"), help="figure format")
    add_device(parser)
    args = parser.parse_args(argv)
    from caption.data.sources.image_files import image_files
    from caption.inference import Captioner, describe

    files = image_files(args.inputs, required="caption describe")  # none: one error line, before the model is read
    # --config: a file, a packaged config's name or a named run (its fragments' `data:` merged); the decoding given
    # here is the model's from now on: the one channel from the command line to the search
    captioner = Captioner.from_checkpoint(args.ckpt_path, device=device(args), sha256=args.sha256, config=args.config,
                                          decoding=given(args, "model.decoding"),
                                          precision=args.trainer.precision)
    # once the inputs are known good (no empty folder left by a refused checkpoint), before any work: one line if not
    writable_folder(args.predictions.out, what="--predictions.out")
    described = describe(
        captioner, files, out=args.predictions.out, num_captions=args.predictions.num_captions,
        batch_size=args.data.eval_batch_size,
        columns=args.columns, figure_format=args.format, say=lambda line: print(line, flush=True),
    )
    if not described:  # a folder's unreadable files were each named in a warning
        raise CaptionError(f"none of the {len(files)} image files found could be read in "
                           f"{' '.join(map(readable_name, args.inputs))}: give images Pillow can open")
    print(f"wrote {sum(len(item.captions) for item in described)} figures, captions.json and captions.csv to "
          f"{args.predictions.out}")
