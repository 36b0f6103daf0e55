"""Nothing lost, through the `caption` command where a user meets each problem:

1. an unusable output location stops the run before any work, in one line naming it; captions are
   written before scoring; 2. without Java every metric but METEOR is still scored; 3. decoding and
   training settings are checked before training; 4. `caption test` applies decoding overrides;
5. Ctrl-C saves `last.ckpt`; 6. an image that fails while loading is skipped with on_bad_image: skip;
7. images without captions are named per split; 8. the smaller messages (ckpt_path last, random
   bytes, vocabulary, feature-cache lock, YAML errors, misspelled keys); 9. the temporary file of a write killed
   midway is removed by the next write to its folder.
"""

import contextlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from kit.cli import PATIENCE_S, REPO, caption, failed, start, wait_for
from kit.data import karpathy_dataset, with_lone_surrogates
from kit.probes import steps_done
from kit.tiny import config, fit_args, run_args, tiny_model_args
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

from caption.cli import main
from caption.data.features import BUILDER, LOCK, FeatureCacheError, build_cache, building
from caption.evaluation import meteor
from caption.evaluation import scoring as evaluation_module
from caption.evaluation.ptb_tokenizer import PTB_JAVA, PTB_PYTHON, python_ptb_caption
from caption.errors import ConfigError
from caption.inference import Captioner
from caption.io.outputs import OutputError, host_tag, temporary_path, write_atomically

HAS_JAVA = subprocess.run(["which", "java"], capture_output=True).returncode == 0


@pytest.fixture(autouse=True)
def command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["caption"])  # not pytest's arguments


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """A tiny trained run (its folder) and the output of its `caption fit ... --ckpt_path last`."""
    root = tmp_path_factory.mktemp("nothing_lost") / "run"
    result = caption("fit", *fit_args(root), "--ckpt_path", "last")
    assert result.returncode == 0, result.stderr[-3000:]
    return root, result.stdout + result.stderr


def best(root: Path) -> Path:
    return next((root / "checkpoints").glob("best-*.ckpt"))


# ----------------------------------------------------------------------- 1. output locations
def test_fit_refuses_an_output_folder_that_is_a_file_before_training(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("my notes\n")
    line = failed(["fit", *fit_args(tmp_path / "run", "--trainer.default_root_dir", str(taken))])
    assert "trainer.default_root_dir" in line and str(taken) in line
    assert taken.read_text() == "my notes\n" and not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
def test_evaluate_describe_compare_refuse_an_unusable_out_before_decoding(trained, tmp_path, monkeypatch):
    root, _ = trained
    taken = tmp_path / "taken"
    taken.write_text("")
    decoded = []
    monkeypatch.setattr(Captioner, "caption_batch", lambda *args, **kwargs: decoded.append(1))
    for command in (["evaluate", "--ckpt", str(best(root))], ["describe", "--ckpt", str(best(root)), str(taken)],
                    ["compare", str(root)]):
        for out in (taken, Path("/proc/caption-out")):
            line = failed([*command, "--predictions.out", str(out)])
            assert "--predictions.out" in line and str(out) in line
    assert not decoded, "nothing was decoded"


@pytest.mark.slow
def test_evaluate_writes_the_captions_before_scoring(trained, tmp_path, monkeypatch):
    root, _ = trained

    def scoring_fails(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "scratch"))

    monkeypatch.setattr(evaluation_module, "coco_scores", scoring_fails)
    line = failed(["evaluate", "--ckpt", str(best(root)), "--predictions.out", str(tmp_path / "eval")])
    assert "scratch" in line and "No space left" in line
    captions = json.loads((tmp_path / "eval" / "captions.json").read_text())
    assert len(captions) == 6 and all(set(entry) == {"image_id", "caption", "file_name", "log_prob"}
                                      for entry in captions)
    assert (tmp_path / "eval" / "captions.csv").is_file()


def test_a_feature_cache_folder_that_is_a_file_is_refused(tmp_path):
    taken = tmp_path / "features"
    taken.write_text("")
    with pytest.raises(OutputError) as error:  # a CaptionError: `caption` prints it in one line
        build_cache(str(taken), encoder=torch.nn.Identity(), config={}, source=None, records=[], on_bad_image="error",
                    batch_size=1, num_workers=0, device=torch.device("cpu"))
    assert "data.features" in str(error.value) and str(taken) in str(error.value)


# ----------------------------------------------------------------------- 2. scoring without Java
@pytest.mark.skipif(not HAS_JAVA, reason="compares with coco-caption's Java tokenizer")
def test_the_python_tokenizer_splits_like_the_java_one():
    captions = [
        "A man (in a hat) said \"hi\"!", "There's a dog's bone; don't can't won't I'm we'll they've he'd you're",
        "The U.S. flag, 3.5 feet... -- a $5 bill & 50% off [sic] {x} black-and-white and/or e-mail",
        "dogs' toys? yes: no! ok.", "Mr. Smith's cat isn't here.", "it's 5:30 p.m. at St. Louis",
        "a `quoted' word 'single' quotes", "a man's    bike\tis red .", "cannot gonna wanna", "C++ #1 @home hello...",
        "A large red circle, left of a small blue square.", "", "rock'n'roll at 5 o'clock, A. dog?! U.S.. yes!!",
    ]
    java = PTBTokenizer().tokenize({i: [{"caption": text}] for i, text in enumerate(captions)})
    assert [python_ptb_caption(text) for text in captions] == [java[i][0] for i in range(len(captions))]


@pytest.mark.slow
def test_evaluate_without_java_scores_everything_but_meteor(trained, tmp_path, monkeypatch, capsys):
    root, _ = trained
    if HAS_JAVA:
        main(["evaluate", "--ckpt", str(best(root)), "--predictions.out", str(tmp_path / "java")])
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no `java` anywhere
    with pytest.warns(UserWarning, match="pure-Python stand-in"):
        main(["evaluate", "--ckpt", str(best(root)), "--predictions.out", str(tmp_path / "python")])
    assert f"tokenizer {PTB_PYTHON} (no Java" in capsys.readouterr().out
    report = json.loads((tmp_path / "python" / "metrics.json").read_text())
    assert report["tokenizer"] == PTB_PYTHON and report["metrics"]["meteor"] is None
    assert len(json.loads((tmp_path / "python" / "captions.json").read_text())) == 6
    if HAS_JAVA:  # on the built-in data both tokenizers give the same words, hence the same scores
        official = json.loads((tmp_path / "java" / "metrics.json").read_text())
        assert official["tokenizer"] == PTB_JAVA
        assert {k: v for k, v in official["metrics"].items() if k != "meteor"} == {
            k: v for k, v in report["metrics"].items() if k != "meteor"}


# ----------------------------------------------------------------------- 3. settings checked first
@pytest.mark.parametrize("key, value, says", [
    ("model.decoding.beam_size", "0", "must be >= 1"), ("model.decoding.max_caption_length", "0", "must be >= 1"),
    ("model.decoder.dropout", "1.5", "in [0, 1]"), ("model.soft.alpha_c", "-1", "must be >= 0"),
    ("model.optimization.learning_rate", "0", "must be > 0"), ("data.max_length", "0", "must be >= 1"),
    ("data.max_skipped_share", "2", "in [0, 1]"), ("periodic_checkpoint.every_n_train_steps", "-1", "must be >= 0"),
    ("trainer.max_epochs", "-5", "non-negative"),
])
def test_bad_settings_stop_fit_before_training(tmp_path, key, value, says):
    line = failed(["fit", *fit_args(tmp_path / "run", f"--{key}", value)])
    assert key.split(".")[-1] in line and says in line and value in line
    assert not list((tmp_path / "run").rglob("*.ckpt"))


# ----------------------------------------------------------------------- 4. caption test overrides
@pytest.mark.slow
def test_caption_test_applies_decoding_overrides(trained, caplog):
    root, _ = trained
    with caplog.at_level(logging.INFO):
        main(["test", *fit_args(root, "--ckpt_path", str(best(root)), "--model.decoding.beam_size", "1")])
    assert "Example test captions (beam 1)" in caplog.text
    assert "model.decoding.beam_size: 1 from the command line" in caplog.text
    line = failed(["test", *fit_args(root, "--ckpt_path", str(best(root)), "--model.decoding.max_caption_length", "0")])
    assert "model.decoding.max_caption_length must be >= 1" in line


# ----------------------------------------------------------------------- 5. Ctrl-C
@pytest.mark.slow
def test_ctrl_c_saves_last_checkpoint(tmp_path):
    probe = tmp_path / "probe"
    # no epoch or step limit (max_epochs -1): the run cannot end before the Ctrl-C, which is sent only once the
    # probe has seen 3 steps
    args = fit_args(tmp_path / "run", "--trainer.max_epochs", "-1", "--trainer.limit_val_batches", "0",
                    "--periodic_checkpoint.every_n_train_steps", "0", "--trainer.callbacks+=kit.probes.Probe")
    process = start("fit", *args, probe=probe)
    wait_for(lambda: len(steps_done(probe)) >= 3, process)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert not last.exists()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=PATIENCE_S)
    assert "SIGINT: saved" in output and "--ckpt_path last" in output, output[-3000:]
    step = torch.load(last, weights_only=True)["global_step"]
    assert step >= 3, "no step lost"
    resumed = caption("fit", *args, "--ckpt_path", "last", "--trainer.max_steps", str(step + 2), probe=probe)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(last, weights_only=True)["global_step"] == step + 2, "continues from the saved step"


# ------------------------------------------------------------- 6, 7. bad images while training, no captions
def dataset_with_truncated_images_and_an_uncaptioned_one(root: Path) -> tuple[Path, list[Path], int]:
    """Flickr-style data: a train and a test JPEG cut at 90% (their headers are fine), a val image with no
    sentences. Returns the dataset file, the truncated images and the uncaptioned image's id."""
    annotations = karpathy_dataset(root, coco=False)
    data = json.loads(annotations.read_text())
    train, val, test = (next(e for e in data["images"] if e["split"] == split) for split in ("train", "val", "test"))
    truncated = [root / "images" / entry["filename"] for entry in (train, test)]
    for image in truncated:
        image.write_bytes(image.read_bytes()[: int(0.9 * image.stat().st_size)])
    val["sentences"] = []
    annotations.write_text(json.dumps(data))
    return annotations, truncated, val["imgid"]


@pytest.mark.slow
def test_images_failing_while_training_are_skipped_and_listed_and_uncaptioned_ones_named(tmp_path, recwarn, capsys):
    annotations, (train, test), uncaptioned = dataset_with_truncated_images_and_an_uncaptioned_one(tmp_path)
    run = tmp_path / "run"
    args = [
        "fit", *config("shapes_soft"), "--trainer.max_epochs", "1", *run_args(run), *tiny_model_args(),
        "--data.source", "caption.data.sources.karpathy.KarpathySource",
        "--data.source.init_args.annotations", str(annotations), "--data.source.init_args.images",
        str(tmp_path / "images"), "--data.source.init_args.resize_size", "36",
        "--data.source.init_args.crop_size", "32", "--data.batch_size", "4", "--data.on_bad_image", "skip",
        "--data.batch_by_image", "false",  # batches of 4 shuffled captions: a bad image never empties one
    ]
    line = failed(args)
    assert str(train) in line and "data.max_skipped_share=0.01" in line

    recwarn.clear()
    main([*args, "--data.max_skipped_share", "0.3"])
    warned = "\n".join(str(warning.message) for warning in recwarn)
    assert (f"skipping {train}" in warned and f"skipping {test}" in warned
            and "test (best checkpoint): " in capsys.readouterr().out)
    assert "skipped 2 images that failed while loading" in warned, "listed at the end"
    assert f"left out 1 val images without a usable caption (ids {uncaptioned})" in warned
    assert "the val set is not the full split" in warned

    recwarn.clear()
    main(["evaluate", "--ckpt", str(best(run)), "--predictions.out", str(tmp_path / "eval")])
    assert f"skipping {test}" in "\n".join(str(warning.message) for warning in recwarn)
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["images"] == 1, "2 test images, 1 bad"


def karpathy_args(annotations: Path, run: Path) -> list[str]:
    """`caption fit` of a tiny model on the small Karpathy-format data of `annotations`."""
    return [
        "fit", *config("shapes_soft"), "--trainer.max_epochs", "1", *run_args(run), *tiny_model_args(),
        "--data.source", "caption.data.sources.karpathy.KarpathySource",
        "--data.source.init_args.annotations", str(annotations), "--data.source.init_args.images",
        str(annotations.parent / "images"), "--data.source.init_args.resize_size", "36",
        "--data.source.init_args.crop_size", "32", "--data.batch_size", "4", "--data.batch_by_image", "false",
    ]


def test_a_split_whose_captions_are_all_empty_is_refused_before_training(tmp_path):
    annotations = karpathy_dataset(tmp_path, coco=False)
    data = json.loads(annotations.read_text())
    for entry in data["images"]:
        if entry["split"] == "test":
            entry["sentences"] = [{**sentence, "raw": raw}
                                  for sentence, raw in zip(entry["sentences"], ["", " ...", "?"])]
    annotations.write_text(json.dumps(data))
    run = tmp_path / "run"
    line = failed(karpathy_args(annotations, run))
    assert "every image of the 'test' split was left out, none has a caption with a letter or digit" in line, line
    assert not list(run.rglob("*.ckpt")), "refused before training, not after"


@pytest.mark.slow
def test_a_lone_surrogate_in_a_val_or_test_caption_is_scored_by_fit_its_test_and_evaluate(tmp_path, recwarn, capsys,
                                                                                          monkeypatch):
    monkeypatch.setattr(meteor, "Meteor", None)  # METEOR's Java is slow, and not what is tested: missing at once
    annotations = karpathy_dataset(tmp_path, coco=False)
    with_lone_surrogates(annotations)
    run = tmp_path / "run"
    main([*karpathy_args(annotations, run), "--trainer.limit_train_batches", "1"])  # validation and the test after
    assert "test (best checkpoint): " in capsys.readouterr().out
    main(["evaluate", "--ckpt_path", str(best(run)), "--predictions.out", str(tmp_path / "eval")])
    warned = [str(warning.message) for warning in recwarn if "surrogate" in str(warning.message)]
    assert warned and all(line.startswith(f"{annotations}: 2 captions hold a lone UTF-16 surrogate")
                          for line in warned), warned
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["images"] == 2


def test_a_vocabulary_from_a_checkpoint_of_other_data_is_named_with_its_unknown_words(tmp_path, recwarn):
    other = tmp_path / "other.ckpt"  # a checkpoint's vocabulary of other data: of its words only "a" and "photo" here
    torch.save({"state_dict": {}, "hyper_parameters": {"vocabulary": ["<pad>", "<start>", "<end>", "<unk>", "a",
                                                                     "photo", "dog"]}}, other)
    annotations = karpathy_dataset(tmp_path, coco=False)
    main([*karpathy_args(annotations, tmp_path / "run"), "--data.vocabulary_from", str(other),
          "--trainer.limit_val_batches", "0", "--trainer.limit_test_batches", "0"])
    (warned,) = [str(warning.message) for warning in recwarn if "data.vocabulary_from" in str(warning.message)]
    # the 5 train and restval images' words: picture, number, a, train, restval, photo, the digits 0-4 and image 0's
    # un, café, crème, à, zürich and long (30 times): 17, of which the checkpoint has a and photo
    assert f"data.vocabulary_from {other}: 15 of the 17 words of the training captions are not in its vocabulary " \
           "(e.g. long, number, picture, train, 0)" in warned, warned


# ----------------------------------------------------------------------- 8. smaller
@pytest.mark.slow
def test_ckpt_path_last_without_a_checkpoint_says_it_starts_from_scratch(trained):
    root, output = trained
    assert f"there is no last.ckpt in {root / 'checkpoints'} yet, so this run starts from scratch" in output
    assert "save_last" not in output


def test_caption_test_refuses_ckpt_path_last_without_a_checkpoint(tmp_path):
    line = failed(["test", *fit_args(tmp_path / "run", "--ckpt_path", "last")])
    assert f"there is no last.ckpt in {tmp_path / 'run' / 'checkpoints'}" in line


@pytest.mark.parametrize("seed", range(12))  # bytes that fail torch.load in several different ways
def test_random_bytes_are_not_called_a_code_running_pickle(tmp_path, seed):
    (tmp_path / "random.ckpt").write_bytes(random.Random(seed).randbytes(4096))
    line = failed(["evaluate", "--ckpt", str(tmp_path / "random.ckpt"), "--predictions.out", str(tmp_path / "out")])
    assert "random.ckpt: not a" in line and "PyTorch checkpoint" in line and "run code" not in line


@pytest.mark.slow
def test_another_vocabulary_is_named_by_its_words(trained):
    root, _ = trained
    line = failed(["test", *fit_args(root, "--ckpt_path", str(best(root)), "--data.source.init_args.num_train", "2")])
    assert "vocabulary differs" in line and "words only in the checkpoint (" in line


HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from caption.data.features import building
with building(Path(sys.argv[1])):
    print("holding", flush=True)
    time.sleep(600)
"""


def test_a_second_feature_cache_build_refuses_and_a_killed_ones_lock_is_gone(tmp_path):
    def build() -> None:
        build_cache(str(tmp_path), encoder=torch.nn.Identity(), config={}, source=None, records=[],
                    on_bad_image="error", batch_size=1, num_workers=0, device=torch.device("cpu"))

    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(FeatureCacheError, match=f"being built by another `caption features` \\(process "
                                                    f"{holder.pid} on {socket.gethostname()}\\): wait"):
            build()
    finally:
        holder.kill()  # as a pre-empted container's build: no chance to clean up
        holder.wait()
    assert (tmp_path / LOCK).exists(), "the lock file stays; the operating system released its lock"
    # what a build that ran as PID 1 in a container left (the lock as it was written before, and the builder)
    (tmp_path / LOCK).write_text(f"{socket.gethostname()} 1")
    (tmp_path / BUILDER).write_text(json.dumps({"host": socket.gethostname(), "pid": 1}))
    with building(tmp_path):  # no stale lock: the next build starts at once
        assert json.loads((tmp_path / BUILDER).read_text())["pid"] == os.getpid()


def test_parse_errors_are_one_line_naming_the_file_or_key(tmp_path):
    (tmp_path / "broken.yaml").write_text("model:\n  beam_size: [3\n")
    assert str(tmp_path / "broken.yaml") in failed(["fit", "--config", str(tmp_path / "broken.yaml")])
    assert "--model.beam_sise" in failed(["fit", *fit_args(tmp_path / "run", "--model.beam_sise", "3")])


def test_a_second_fit_into_a_folder_in_use_is_refused_naming_the_folder_and_its_holder(tmp_path):
    from filelock import FileLock

    from caption.cli.lightning.run_folders import RUN_HOLDER, RUN_LOCK

    run = tmp_path / "run"
    run.mkdir()
    held = FileLock(run / RUN_LOCK, timeout=0)  # as a `caption fit` running there holds it
    held.acquire()
    (run / RUN_HOLDER).write_text(json.dumps({"host": "lab-pc", "pid": 4242}))
    try:
        line = failed(["fit", *fit_args(run)])
    finally:
        held.release()
    assert f"trainer.default_root_dir {run} is in use by another `caption fit` (process 4242 on lab-pc)" in line, line
    assert not (run / "checkpoints" / "last.ckpt").exists()


@contextlib.contextmanager
def held_by_a_live_fit(folder: Path, record: str | bytes, *, checkpoints: bool = False) -> Iterator[None]:
    """`folder`'s fit lock held where a `caption fit` writing there holds it (its run folder, or with `checkpoints` its
    checkpoint folder), with `record` as its holder file."""
    from filelock import FileLock

    from caption.cli.lightning.run_folders import holder_file, lock_files

    folder.mkdir(parents=True, exist_ok=True)
    place = lock_files(folder, checkpoints=checkpoints)[0]
    lock = FileLock(place, timeout=0)
    lock.acquire()
    holder_file(place).write_bytes(record if isinstance(record, bytes) else record.encode("utf-8"))
    try:
        yield
    finally:
        lock.release()


def run_folder(folder: Path):
    """`folder` as `fit_folders` gives a run folder."""
    from caption.cli.lightning.run_folders import FitFolder, lock_files

    return FitFolder("trainer.default_root_dir", folder, lock_files(folder, checkpoints=False))


def test_a_feature_cache_builders_lying_record_is_described_safely(tmp_path):
    """builder.json is read as the fit lock's record is (`caption.io.lock_holders`): an absurd pid left out, the
    host's terminal escapes shown escaped, a link planted there never followed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        (tmp_path / BUILDER).write_text('{"host": "lab\\u001b[2J-pc", "pid": 1e999}')
        with pytest.raises(FeatureCacheError) as refused:
            with building(tmp_path):
                pass
        assert "by another `caption features` (a process on lab\\x1b[2J-pc): wait" in str(refused.value)
        (tmp_path / BUILDER).unlink()
        (tmp_path / "secret.json").write_text('{"host": "secret", "pid": 7}')
        (tmp_path / BUILDER).symlink_to(tmp_path / "secret.json")
        with pytest.raises(FeatureCacheError) as refused:
            with building(tmp_path):
                pass
        assert "(a process its builder.json does not name)" in str(refused.value), str(refused.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_record_with_an_absurd_pid_and_escapes_in_its_host_is_one_safe_line(tmp_path):
    run = tmp_path / "run"
    with held_by_a_live_fit(run, '{"host": "lab\\u001b[2J\\u001b]0;owned\\u0007-pc", "pid": 1e999}'):
        line = failed(["fit", *fit_args(run)])
    assert f"trainer.default_root_dir {run} is in use by another `caption fit` (a process on " in line, line
    assert "lab\\x1b[2J\\x1b]0;owned\\x07-pc)" in line and "\x1b" not in line and "\x07" not in line, line


@pytest.mark.parametrize("record, holder", [
    ('{"host": "lab-pc", "pid": "4242"}', "a process on lab-pc"),
    ('{"host": "lab-pc", "pid": -5}', "a process on lab-pc"),
    ('{"host": "lab-pc", "pid": true}', "a process on lab-pc"),
    ('{"host": "lab-pc", "pid": 1e999}', "a process on lab-pc"),
    ('{"host": "lab-pc", "pid": 100000000000000000000000000000}', "a process on lab-pc"),
    ('{"host": ["lab-pc"], "pid": 4242}', "process 4242"),
    ('{"host": "lab-pc\\ud800", "pid": 4242}', "process 4242 on lab-pc\\ud800"),
    ('{"host": "' + "x" * 3000 + '", "pid": 4242}', "process 4242 on " + "x" * 80 + "..."),
    ("[" * 2000 + "]" * 2000, "a process its .caption-fit.json does not name"),
    ('{"host": "lab-pc", "pid": 4242' + " " * 5000 + "}", "a process its .caption-fit.json does not name"),
    (b"\xff not json", "a process its .caption-fit.json does not name"),
])
def test_a_holder_record_that_lies_is_described_safely(tmp_path, record, holder):
    from caption.cli.lightning.run_folders import claim_run_folders, releasing_run_folders

    with held_by_a_live_fit(tmp_path, record), pytest.raises(ConfigError) as refused, releasing_run_folders():
        claim_run_folders([run_folder(tmp_path)])
    assert f"in use by another `caption fit` ({holder}): two runs" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("planted", ["fifo", "link to a fifo", "folder"])
def test_a_holder_record_that_is_no_file_is_not_read(tmp_path, planted):
    from filelock import FileLock

    from caption.cli.lightning.run_folders import RUN_HOLDER, RUN_LOCK, claim_run_folders, releasing_run_folders

    lock = FileLock(tmp_path / RUN_LOCK, timeout=0)
    lock.acquire()
    if planted == "folder":
        (tmp_path / RUN_HOLDER).mkdir()
    else:
        fifo = tmp_path / (RUN_HOLDER if planted == "fifo" else "fifo")
        os.mkfifo(fifo)  # reading it would wait for a writer for ever
        if planted == "link to a fifo":
            (tmp_path / RUN_HOLDER).symlink_to(fifo)
    try:
        with pytest.raises(ConfigError, match="another `caption fit` \\(a process its .caption-fit.json does not "
                                              "name\\)"), releasing_run_folders():
            claim_run_folders([run_folder(tmp_path)])
    finally:
        lock.release()


def test_two_fits_sharing_a_checkpoint_folder_are_refused_naming_it_and_its_holder(tmp_path):
    """The first fit writes into runs/a and the shared checkpoint folder; a second one into runs/b and the same
    checkpoint folder would overwrite its last.ckpt. The lock covers every folder a fit writes checkpoints to, the
    default `<run>/checkpoints` too, and lies beside it: a new run's checkpoint folder stays empty."""
    shared = tmp_path / "shared"
    with held_by_a_live_fit(shared, json.dumps({"host": "lab-pc", "pid": 4242}), checkpoints=True):
        line = failed(["fit", *fit_args(tmp_path / "b", "--checkpoint.dirpath", str(shared))])
    assert (f"checkpoint.dirpath {shared} is in use by another `caption fit` (process 4242 on lab-pc): two runs in "
            "one folder overwrite each other's last.ckpt; wait for it to end, or give this run another "
            "--checkpoint.dirpath") in line, line
    assert not any(shared.iterdir()) and not (tmp_path / "b" / "checkpoints").exists()
    checkpoints = tmp_path / "a" / "checkpoints"  # a fit with the default checkpoint folder in runs/a
    with held_by_a_live_fit(checkpoints, json.dumps({"host": "lab-pc", "pid": 4242}), checkpoints=True):
        line = failed(["fit", *fit_args(tmp_path / "c", "--checkpoint.dirpath", str(checkpoints))])
    assert f"checkpoint.dirpath {checkpoints} is in use by another `caption fit` (process 4242 on lab-pc)" in line
    assert not any(checkpoints.iterdir())


def test_a_fit_claims_its_run_and_checkpoint_folders_and_leaves_the_checkpoint_folder_empty(tmp_path):
    """Lightning warns that a checkpoint folder which is not empty may hold another run's checkpoints: the lock of a
    checkpoint folder lies beside it, or inside it only where its parent cannot take the file (a name too long)."""
    from types import SimpleNamespace

    from caption.cli.lightning.run_folders import claim_run_folders, fit_folders, releasing_run_folders

    run, long_named = tmp_path / "run", tmp_path / ("c" * 250)
    trainer = SimpleNamespace(checkpoint_callbacks=[SimpleNamespace(dirpath=str(long_named))])
    config = SimpleNamespace(trainer=SimpleNamespace(default_root_dir=str(run)),
                             checkpoint=SimpleNamespace(dirpath=str(run / "checkpoints")))
    for folder in (run / "checkpoints", long_named):
        folder.mkdir(parents=True)
    with releasing_run_folders():
        claim_run_folders(fit_folders(config, trainer=trainer))
        assert sorted(path.name for path in run.iterdir()) == [
            ".caption-fit.checkpoints.json", ".caption-fit.checkpoints.lock", ".caption-fit.json", ".caption-fit.lock",
            "checkpoints"]
        assert not any((run / "checkpoints").iterdir())
        assert sorted(path.name for path in long_named.iterdir()) == [".caption-fit.json", ".caption-fit.lock"]
    with held_by_a_live_fit(run / "checkpoints", "{}", checkpoints=True), pytest.raises(ConfigError, match=(
            f"^checkpoint.dirpath {run / 'checkpoints'} is in use by another `caption fit` \\(a process its "
            "\\.caption-fit\\.checkpoints\\.json does not name\\)")), releasing_run_folders():
        claim_run_folders(fit_folders(config, trainer=trainer))


def test_a_link_planted_at_the_lock_file_is_named_as_a_link_to_remove(tmp_path):
    from caption.cli.lightning.run_folders import RUN_LOCK

    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "victim.txt").write_text("mine\n")
    (run / RUN_LOCK).symlink_to(tmp_path / "victim.txt")
    line = failed(["fit", *fit_args(run)])
    assert line == (f"caption: error: trainer.default_root_dir {run}: {run / RUN_LOCK} is a link, where `caption fit` "
                    "keeps its lock file; remove it and run again"), line
    assert (tmp_path / "victim.txt").read_text() == "mine\n"


def test_a_lone_fit_started_as_a_later_slurm_task_still_holds_the_lock(tmp_path, monkeypatch):
    """SLURM_PROCID=3 left by an outer job (or `srun` of one task of several) while Lightning runs one process: that
    process is the run's first, and a second fit into its folder is refused."""
    monkeypatch.setenv("SLURM_PROCID", "3")
    run = tmp_path / "run"
    with held_by_a_live_fit(run, json.dumps({"host": "lab-pc", "pid": 4242})):
        line = failed(["fit", *fit_args(run, "--trainer.limit_test_batches", "0")])
    assert f"trainer.default_root_dir {run} is in use by another `caption fit` (process 4242 on lab-pc)" in line, line
    assert not (run / "checkpoints" / "last.ckpt").exists()


def test_a_run_folder_is_released_however_the_command_ends_and_a_dead_holder_is_taken_over(tmp_path):
    from filelock import FileLock

    from caption.cli.lightning.run_folders import RUN_HOLDER, RUN_LOCK, claim_run_folders, releasing_run_folders

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / RUN_LOCK).write_text("")  # left by a run that was killed: no process holds it
    (tmp_path / RUN_HOLDER).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    with pytest.raises(RuntimeError), releasing_run_folders():
        claim_run_folders([run_folder(tmp_path)])
        assert json.loads((tmp_path / RUN_HOLDER).read_text())["pid"] == os.getpid()
        raise RuntimeError("the run failed")
    assert not (tmp_path / RUN_HOLDER).exists()
    lock = FileLock(tmp_path / RUN_LOCK, timeout=0)
    lock.acquire()  # free again
    lock.release()


STOPPED_MIDWAY = """
import os, sys, time
from pathlib import Path
from caption.io.outputs import write_atomically
def stalled(descriptor):  # the bytes are in the temporary file; the rename never comes
    print("writing", flush=True)
    time.sleep(600)
os.fsync = stalled
write_atomically(Path(sys.argv[1]), b"weights" * 1000, what="checkpoint")
"""


def test_the_temporary_file_of_a_write_killed_midway_is_removed_by_the_next_write_to_its_folder(tmp_path):
    def writing(name: str) -> subprocess.Popen:
        writer = subprocess.Popen([sys.executable, "-c", STOPPED_MIDWAY, str(tmp_path / name)], cwd=REPO,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline() == "writing\n"
        return writer

    killed, alive = writing("last.ckpt"), writing("model.safetensors")
    try:
        killed.kill()  # kill -9: no chance to clean up
        killed.wait()
        left = tmp_path / f".last.ckpt.{killed.pid}.{host_tag()}.tmp"
        assert left.is_file(), sorted(path.name for path in tmp_path.iterdir())
        of_another_host = tmp_path / f".best.ckpt.{killed.pid}.other-host.tmp"  # a shared disk: its process unseen
        of_another_host.write_bytes(b"weights")
        write_atomically(tmp_path / "last.ckpt", b"resumed", what="checkpoint")
        assert not left.exists(), "the killed write's temporary file is removed"
        assert of_another_host.is_file(), "another host's is left alone"
        assert (tmp_path / f".model.safetensors.{alive.pid}.{host_tag()}.tmp").is_file(), "a live write's is kept"
        assert (tmp_path / "last.ckpt").read_bytes() == b"resumed"
        assert temporary_path(tmp_path / "x").name == f".x.{os.getpid()}.{host_tag()}.tmp"
    finally:
        alive.kill()
        alive.wait()
