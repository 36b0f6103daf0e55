"""The wing of `caption fit | validate | test | predict` (and `features`' parser): LightningCLI and the plumbing it
needs, apart from the inference commands beside it in `caption.cli`.

    commands.py            CaptionCLI and `main`: the four commands, their callbacks and run folders; the parsers
    parser.py              the parser: packaged configs by name, one-line errors, `--predictions.*`
    class_paths.py         the class-path rule applied to the parse: every config walked, the parsed settings checked
    checkpoint_settings.py a checkpoint's model settings against those given, decoding overrides, `last`
    given.py               which settings the user gave on purpose (command line or `--config`)
    predict_arguments.py   `caption predict` and `caption test`'s data from the checkpoint, `--predictions.out`
    prediction_writer.py   the callback that writes predict's COCO-results JSON
    run_files.py           the run's config.yaml, its failed write in one line
    run_folders.py         checkpoints and logs kept under `--trainer.default_root_dir`
    console.py             Lightning's lines in the console (also `caption pretrain-encoder`'s Trainer)
    short_help.py          `--help` without importing Lightning, from short_help.json beside it

Nothing of Lightning or jsonargparse is patched (`tests/guarantees/test_nothing_patched.py`); the few private names
the project reads are listed, and checked to exist, in `tests/cli/test_private_names.py`. Nothing here imports
Lightning at import of the package: `caption --help` and the short help stay fast.
"""
