"""The tests' shared kit (importable as `kit`: pytest puts tests/ on sys.path, and subprocesses get it on PYTHONPATH).

- `kit.tiny`: the tiny model and data every end-to-end test trains, as `caption` overrides: the ONE place that
  spells the model's CLI keys for tests.
- `kit.cli`: running `caption` as a user does, in this process or in a subprocess, and reading its one-line errors.
- `kit.models`: the tiny Decoder and CaptionModule the unit tests build in Python, settings named in their groups.
- `kit.probes`: test-only callbacks a subprocess run adds with `--trainer.callbacks+=kit.probes.<Name>`.
- `kit.lengths`: caption lengths spread like COCO's (defined in benchmarks/_helpers.py, which the benchmarks use).
- `kit.groups`: simulated groups of runs whose true difference is known (defined in benchmarks/paired_coverage.py).
- `kit.benchmark_files`: a module of benchmarks/ read from its file, for the two above.
- `kit.data`: data fixtures made on the fly: images, bad files, Karpathy/COCO dataset files, random encoder weights.
- `kit.disk`: a small disk (a 1 MiB tmpfs, or a simulated write budget) for full-disk tests.
"""
