"""`caption export`: a trained model as a folder people can share, with no code in it.

    caption export --ckpt_path runs/shapes_soft                       # exports/shapes_soft/
    caption export --ckpt_path runs/coco_soft --metrics eval/coco_soft/metrics.json --push owner/coco-soft

`--ckpt_path` is a checkpoint file or a run folder (its newest best-*.ckpt, as every command picks it:
`caption.io.checkpoints.find_checkpoint`). The folder of `--predictions.out` (default exports/<run name>) gets
model.safetensors (the weights only), config.json (the model's settings, vocabulary, data settings and the input's
preprocessing, no file of this machine), README.md (the model card, with the Hub's metadata:
`caption.reports.model_card`) and, when the run saved its config, training_config.yaml, each written atomically
(`caption.reports.sharing.export_model`, which `Captioner.save_pretrained` calls too). Every command's
`--ckpt_path` and `Captioner.from_pretrained` load such a folder; `--push owner/name` uploads it to the Hugging Face
Hub (`caption.io.hub`, the extra `hub`). The format: docs/sharing.md.
"""

from __future__ import annotations

from pathlib import Path

from jsonargparse import Namespace

from caption.cli.options import CommandParser, add_output, path, run_name


def main(argv: list[str]) -> None:
    parser = CommandParser(
        prog="caption export",
        description="Write a trained model as a folder to share: model.safetensors, config.json and a model card "
                    "(README.md); --push uploads it to the Hugging Face Hub.",
    )
    parser.add_argument("--ckpt_path", type=path, required=True, metavar="CKPT",
                        help="checkpoint written by `caption fit`, or its run folder (the newest best-*.ckpt, else "
                             "last.ckpt) (alias: --ckpt)")
    add_output(parser, help="the model folder: model.safetensors, config.json, README.md", derived=export_folder,
               default="exports/<run name>: the name of the checkpoint's run folder (runs/x: exports/x)")
    parser.add_argument("--metrics", type=path, default=None,
                        help="a metrics.json of `caption evaluate` for the card's test figures (default: the run's "
                             "last test, from its metrics.csv)")
    parser.add_argument("--model_name", default=None,
                        help="the model's name in its card (default: --push's id, else the name of --predictions.out)")
    parser.add_argument("--license", default="mit", help="the weights' license in the card's metadata, as the Hub "
                                                         "spells it (default: mit, the code's)")
    parser.add_argument("--push", default=None, metavar="OWNER/NAME",
                        help="then upload the folder to this Hugging Face Hub model repository (created if needed; "
                             "needs `hf auth login` and the extra hub: pip install -e \".[hub]\" in a clone)")
    parser.add_argument("--private", action="store_true", help="with --push: create the repository private")
    args = parser.parse_args(argv)
    from caption.io.hub import check_login, upload_model_folder

    api = check_login(args.push) if args.push else None  # before any work: the package, the id, the login
    from caption.reports.sharing import export_model

    exported = export_model(args.ckpt_path, args.predictions.out, metrics=args.metrics, license=args.license,
                            model_name=args.model_name or args.push, what="--predictions.out")
    files = ", ".join(exported.files[:3]) + "".join(f" and {name}" for name in exported.files[3:])
    print(f"wrote {exported.folder}: {files}, from {exported.checkpoint}")
    if api is not None:
        print(f"uploaded to {upload_model_folder(exported.folder, args.push, api=api, private=args.private)}")


def export_folder(args: Namespace) -> Path:
    """exports/<run name>: the default --predictions.out of `caption export`."""
    return Path("exports") / run_name(str(args.ckpt_path))
