"""COCO's run rehearsed on COCO-shaped data: every stage through the real `caption` commands and the shipped
coco_soft / coco_hard configs (only paths and step counts overridden), timed, with peak memory.

    python benchmarks/coco_rehearsal.py --scale 1/16                 # data under data/rehearsal/1-16
    python benchmarks/coco_rehearsal.py --scale 1/4 --steps 6
    python benchmarks/coco_rehearsal.py --scale 1/16 --device cuda   # where a GPU is

The data comes from `benchmarks/coco_shaped.py` (made first if missing). Stages, each a subprocess watched with
psutil (peak RSS of the main process, and of its children together: DataLoader workers, Java for METEOR):

    cache        the full feature cache written by `benchmarks/coco_shaped.py` (the project's cache writer, synthetic
                 annotations), killed with SIGKILL half-way and resumed: the rows written before the kill are not
                 written again; images/s of the resumed part (skipped when the cache is complete already)
    vocabulary   read dataset_coco.json and build the vocabulary (`CaptionDataModule`, the config's settings)
    features     `caption features` on the 640x480 JPEGs, killed with SIGKILL half-way, then resumed: images/s of
                 the resumed part, extrapolated to COCO's 123,287 images; the finished rows not encoded again
    fit_soft     `caption fit --config coco_soft`: start to the first training step (the sanity check's two
                 validation batches included, as a user meets them), steps/s from the cache with same-length
                 batches, one validation of the whole val split (greedy, every coco-caption score, METEOR
                 included), the size of a full checkpoint and the time to save it
    resume       `caption fit ... --ckpt_path last`: start to the first step after the saved one
    validate_all `caption evaluate` greedy on the val split with every coco-caption score, METEOR included
    evaluate     `caption evaluate` with beam 5 on the test split
    fit_hard     `caption fit --config coco_hard` (for compare), no validation
    compare      `caption compare` of the soft and hard runs on the test split

Results go to <out>/results.json; `--table` prints one Markdown table of every scale rehearsed. This machine's timings
are only as good as its load: say whether others ran beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import psutil
from coco_shaped import data_paths, generate

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent

COCO_IMAGES = 123_287
MB = 2**20


class Watched:
    """A command run in a subprocess while a thread samples the RSS of it and of its children (psutil)."""

    uss = False  # also sample each process's own memory (USS): reading it slows a large process, so times are off

    def __init__(self, command: list[str], *, env: dict[str, str] | None = None, log: Path):
        self.log = log
        self.started = time.time()
        with open(log, "w") as output:
            self.process = subprocess.Popen(command, cwd=REPO, env={**os.environ, **(env or {})}, stdout=output,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.main_peak = self.children_peak = self.main_uss_peak = self.children_uss_peak = 0
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        try:
            main = psutil.Process(self.process.pid)
            while self.process.poll() is None:
                children = main.children(recursive=True)
                self.main_peak = max(self.main_peak, main.memory_info().rss)
                self.children_peak = max(self.children_peak, sum(_rss(child) for child in children))
                if self.uss:
                    self.main_uss_peak = max(self.main_uss_peak, _uss(main))
                    self.children_uss_peak = max(self.children_uss_peak, sum(_uss(child) for child in children))
                time.sleep(0.2)
        except psutil.Error:
            pass

    def wait(self) -> float:
        """Wait for the end; the seconds it ran. A failure stops the rehearsal, naming the log."""
        code = self.process.wait()
        self._sampler.join()
        if code != 0:
            raise SystemExit(f"{self.log.name}: exit status {code}; the end of {self.log}:\n"
                             f"{self.log.read_text()[-3000:]}")
        return time.time() - self.started

    def kill(self) -> None:
        """SIGKILL to the command and all its children, as an out-of-memory killer or a lost node does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._sampler.join()

    def memory(self) -> dict[str, float]:
        """Peak resident memory (RSS), and the peak of what is each process's alone (USS): RSS counts the pages of files
        mapped (the feature cache is read through a memory map) and, in each forked DataLoader worker, the pages it
        still shares with the main process."""
        rss = {"main_peak_mb": round(self.main_peak / MB), "children_peak_mb": round(self.children_peak / MB)}
        return {**rss, "main_uss_peak_mb": round(self.main_uss_peak / MB),
                "children_uss_peak_mb": round(self.children_uss_peak / MB)} if self.uss else rss


def _uss(process: psutil.Process) -> int:
    """Memory of this process alone (USS): not the mapped files, nor the pages a forked DataLoader worker still shares
    with its parent (RSS counts both)."""
    try:
        return process.memory_full_info().uss
    except psutil.Error:
        return 0


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def kill_after_half(watched: Watched, progress: Path, total: int) -> None:
    """SIGKILL once a cache writer's progress file says half of `total` images are written."""
    while (json.loads(progress.read_text()) if progress.exists() else {"done": 0})["done"] < total // 2:
        if watched.process.poll() is not None:
            raise SystemExit(f"the cache writer ended before it was killed: {watched.log}")
        time.sleep(0.2)
    watched.kill()


def caption(*args: str) -> list[str]:
    return [sys.executable, "-m", "caption.cli", *args]


def clock_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def first(events: list[dict], name: str) -> dict:
    return next(event for event in events if event["event"] == name)


class Rehearsal:
    def __init__(self, out: Path, *, scale: Fraction, steps: int, device: str):
        self.out, self.scale, self.steps, self.device = out, scale, steps, device
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, dict] = {}

    def trainer_device(self) -> list[str]:
        return ["--trainer.accelerator", "gpu", "--trainer.devices", "1"] if self.device == "cuda" else []

    def record(self, stage: str, **figures: object) -> None:
        """Add a stage's figures to <out>/results.json (kept from earlier rehearsals of other stages)."""
        if Watched.uss:  # the memory pass: its times are off
            stage, figures = f"{stage} (memory pass)", {name: value for name, value in figures.items()
                                                        if name.endswith("peak_mb")}
        path = self.out / "results.json"
        results = json.loads(path.read_text()) if path.exists() else {}
        results[stage] = {**figures, "device": self.device, "date": time.strftime("%Y-%m-%d %H:%M")}
        self.results[stage] = results[stage]
        path.write_text(json.dumps(results, indent=1))
        print(f"{stage}: {figures}", flush=True)

    def vocabulary(self) -> None:
        watched = Watched([sys.executable, str(BENCHMARKS / "coco_rehearsal.py"), "--vocabulary_only",
                           "--out", str(self.out)], log=self.logs / "vocabulary.log")
        seconds = watched.wait()
        inner = json.loads(watched.log.read_text().splitlines()[-1])
        self.record("vocabulary", seconds=round(seconds, 1), **inner, **watched.memory())

    def cache(self) -> None:
        folder = self.out / "features"
        manifest = folder / "manifest.json"
        if manifest.exists() and json.loads(manifest.read_text())["complete"]:
            print("cache: complete already (delete it to time it again)", flush=True)
            return
        command = [sys.executable, str(BENCHMARKS / "coco_shaped.py"), "--scale", str(self.scale),
                   "--out", str(self.out)]
        total = len(json.loads((self.out / "dataset_coco.json").read_text())["images"])
        killed = Watched(command, log=self.logs / "cache_killed.log")
        kill_after_half(killed, folder / "progress.json", total)
        resumed = Watched(command, log=self.logs / "cache_resumed.log")
        seconds = resumed.wait()
        log = resumed.log.read_text()
        match = re.search(r"Resuming the feature cache in \S+ at image (\d+)", log)
        if match is None:
            raise SystemExit(f"the cache writer did not resume after SIGKILL: {resumed.log}")
        encoded, elapsed = re.search(r"(\d+) encoded in ([\d.]+) s", log).groups()
        self.record("cache", images=total, killed_after=int(match.group(1)), encoded_after_resume=int(encoded),
                    none_written_twice=int(match.group(1)) + int(encoded) == total,
                    images_per_s=round(int(encoded) / float(elapsed), 1), gigabytes=round(
                        (folder / "annotations.npy").stat().st_size / 2**30, 1) if (folder / "annotations.npy").exists()
                    else None, seconds=round(seconds, 1), **resumed.memory())

    def features(self) -> None:
        folder = self.out / "features_subset"
        shutil.rmtree(folder, ignore_errors=True)
        command = caption("features", "--config", "coco_soft", *data_paths(self.out, "features_subset.json",
                                                                           "features_subset"), *self.trainer_device())
        total = len(json.loads((self.out / "features_subset.json").read_text())["images"])
        kill_after_half(Watched(command, log=self.logs / "features_killed.log"), folder / "progress.json", total)
        second = Watched(command, log=self.logs / "features_resumed.log")
        seconds = second.wait()
        log = second.log.read_text()
        resumed_at = int(re.search(r"Resuming the feature cache in \S+ at image (\d+)", log).group(1))
        encoded, elapsed = re.search(r"(\d+) encoded in ([\d.]+) s", log).groups()
        rate = int(encoded) / float(elapsed)
        self.record("features", images=total, killed_after=resumed_at, encoded_after_resume=int(encoded),
                    images_per_s=round(rate, 2), coco_hours=round(COCO_IMAGES / rate / 3600, 2),
                    seconds=round(seconds, 1), **second.memory())

    def fit(self, stage: str, config: str, *extra: str, resume: bool = False) -> dict:
        run = self.out / "runs" / config
        clock = self.logs / f"{stage}.clock.jsonl"
        clock.unlink(missing_ok=True)
        steps = self.steps + 2 if resume else self.steps
        command = caption("fit", "--config", config, *data_paths(self.out), "--trainer.default_root_dir", str(run),
                          "--trainer.max_steps", str(steps), "--trainer.limit_test_batches", "0",
                          "--trainer.enable_progress_bar", "false", "--trainer.callbacks+=rehearsal_clock.StageClock",
                          *self.trainer_device(), *extra, *(["--ckpt_path", "last"] if resume else []))
        watched = Watched(command, env={"PYTHONPATH": str(BENCHMARKS), "REHEARSAL_CLOCK": str(clock)},
                          log=self.logs / f"{stage}.log")
        seconds = watched.wait()
        events = clock_events(clock)
        started = first(events, "process_start")["at"]
        step_ends = [event["time"] for event in events if event["event"] == "step_end"]
        figures = {"seconds": round(seconds, 1), "to_first_step_s": round(step_ends[0] - started, 1),
                   "steps": len(step_ends)}
        if any(event["event"] == "sanity_end" for event in events):
            figures["sanity_check_s"] = round(
                first(events, "sanity_end")["time"] - first(events, "sanity_start")["time"], 1)
        if len(step_ends) > 2:  # the first step's end includes its start-up: rate over the ones after it
            train_time = (step_ends[-1] - step_ends[0]) - sum(
                end["time"] - start["time"] for start, end in zip(
                    [e for e in events if e["event"] == "validation_start"],
                    [e for e in events if e["event"] == "validation_end"]) if start["time"] < step_ends[-1])
            figures["steps_per_s"] = round((len(step_ends) - 1) / train_time, 4)
        validations = [(start, end) for start, end in zip([e for e in events if e["event"] == "validation_start"],
                                                          [e for e in events if e["event"] == "validation_end"])]
        if validations:
            start, end = validations[0]
            figures.update(validation_s=round(end["time"] - start["time"], 1), validation_images=end["images"])
        if any(event["event"] == "checkpoint_saved" for event in events):
            saved = first(events, "checkpoint_saved")
            figures.update(checkpoint_mb=round(saved["bytes"] / MB), checkpoint_save_s=round(saved["seconds"], 2))
        self.record(stage, **figures, **watched.memory())
        return figures

    def evaluate(self) -> None:
        self._evaluate("evaluate", split="test", beam_size=5)

    def validate_all(self) -> None:
        """Validation as `caption evaluate` does it: greedy on the val split, every coco-caption score (METEOR too;
        validation while training computes BLEU-4 and CIDEr only)."""
        self._evaluate("validate_all", split="val", beam_size=1)

    def _evaluate(self, stage: str, *, split: str, beam_size: int) -> None:
        run = self.out / "runs" / "coco_soft"  # a run folder: its best checkpoint
        report = self.out / "reports" / stage
        command = caption("evaluate", "--ckpt_path", str(run), "--split", split, "--model.decoding.beam_size",
                          str(beam_size), "--predictions.out", str(report), "--trainer.accelerator",
                          "gpu" if self.device == "cuda" else "cpu")
        watched = Watched(command, log=self.logs / f"{stage}.log")
        seconds = watched.wait()
        metrics = json.loads((report / "metrics.json").read_text())["metrics"]
        images = len(json.loads((report / "captions.json").read_text()))
        self.record(stage, seconds=round(seconds, 1), images=images, beam_size=beam_size,
                    scores=sorted(name for name, value in metrics.items() if value is not None), **watched.memory())

    def compare(self) -> None:
        runs = self.out / "runs"
        command = caption("compare", str(runs / "coco_soft"), str(runs / "coco_hard"), "--split", "test",
                          "--predictions.out", str(self.out / "reports" / "compare"), "--trainer.accelerator",
                          "gpu" if self.device == "cuda" else "cpu")
        watched = Watched(command, log=self.logs / "compare.log")
        seconds = watched.wait()
        self.record("compare", seconds=round(seconds, 1), models=2, **watched.memory())

    def run(self, stages: list[str]) -> None:
        for stage in stages:
            if stage == "fit_soft":
                shutil.rmtree(self.out / "runs" / "coco_soft", ignore_errors=True)
                self.fit("fit_soft", "coco_soft", "--trainer.val_check_interval", str(self.steps))
            elif stage == "resume":
                self.fit("resume", "coco_soft", "--trainer.val_check_interval", str(self.steps), resume=True)
            elif stage == "fit_hard":
                shutil.rmtree(self.out / "runs" / "coco_hard", ignore_errors=True)
                self.fit("fit_hard", "coco_hard", "--trainer.limit_val_batches", "0")
            else:
                getattr(self, stage)()


def vocabulary_only(out: Path) -> None:
    """The vocabulary stage's own process: coco_soft's data settings on out/dataset_coco.json."""
    from caption.config.packaged import data_section
    from caption.data.datamodule import CaptionDataModule
    from caption.data.sources.karpathy import KarpathySource

    settings = data_section("coco_soft")
    started = time.perf_counter()
    source = KarpathySource(annotations=str(out / "dataset_coco.json"), images=str(out / "images"))
    data = CaptionDataModule(source=source, min_count=settings["min_count"], max_vocab_size=settings["max_vocab_size"])
    records = data.records()
    read = time.perf_counter()
    words = len(data.vocabulary)
    built = time.perf_counter()
    print(json.dumps({"images": len(records), "captions": sum(len(r.references) for r in records),
                      "words": words, "read_s": round(read - started, 2), "vocabulary_s": round(built - read, 2)}))


def table(root: Path) -> str:
    """A Markdown table of every rehearsal under `root` (one column per scale, one row per stage's figure)."""
    scales = sorted((Fraction(folder.name.replace("-", "/")), json.loads((folder / "results.json").read_text()))
                    for folder in root.iterdir() if (folder / "results.json").exists())
    rows = [(stage, figure) for stage in [*STAGES, *(f"{stage} (memory pass)" for stage in STAGES)]
            for figure in dict.fromkeys(
        name for _, results in scales for name in results.get(stage, {}) if name not in ("device", "date"))]
    lines = ["| stage | figure | " + " | ".join(f"{scale} of COCO" for scale, _ in scales) + " |",
             "|---|---|" + "---|" * len(scales)]
    for stage, figure in rows:
        values = [results.get(stage, {}).get(figure, "") for _, results in scales]
        lines.append(f"| {stage} | {figure} | " + " | ".join(str(value) for value in values) + " |")
    dates = sorted({entry["date"][:10] for _, results in scales for entry in results.values()})
    return "\n".join(lines) + (
        f"\n\n{', '.join(dates)}; "
        f"{', '.join(sorted({entry['device'] for _, results in scales for entry in results.values()}))}")


STAGES = ["cache", "vocabulary", "features", "fit_soft", "resume", "validate_all", "evaluate", "fit_hard", "compare"]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=Fraction, default=Fraction(1, 16), help="share of COCO's size: 1/16, 1/4, 1")
    parser.add_argument("--out", type=Path, default=None, help="default: data/rehearsal/<scale, e.g. 1-16>")
    parser.add_argument("--steps", type=int, default=6, help="training steps of each fit (validation after them)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--stages", nargs="+", default=STAGES, choices=STAGES)
    parser.add_argument("--uss", action="store_true", help="the memory pass: also each process's own memory (USS), "
                                                           "which slows the stages (their times are then not kept)")
    parser.add_argument("--table", action="store_true", help="print the table of every rehearsal under data/rehearsal")
    parser.add_argument("--vocabulary_only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        return print(table(REPO / "data" / "rehearsal"))
    out = (args.out or REPO / "data" / "rehearsal" / str(args.scale).replace("/", "-")).resolve()
    if args.vocabulary_only:
        return vocabulary_only(out)
    generate(args.scale, out, full_size_images=256)
    Watched.uss = args.uss
    Rehearsal(out, scale=args.scale, steps=args.steps, device=args.device).run(args.stages)


if __name__ == "__main__":
    main(sys.argv[1:])
