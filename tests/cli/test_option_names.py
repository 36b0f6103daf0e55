"""One name per knob across every command, and a run folder wherever a checkpoint is taken."""

import contextlib
import io
import json
import re
from collections import defaultdict

import pytest
from kit.cli import failed
from PIL import Image

from caption.cli import COMMANDS, main
from caption.cli.options import CommandParser, add_device, device
from caption.errors import ConfigError
from caption.inference import Captioner
from caption.io.checkpoints import find_checkpoint

OPTION = re.compile(r"^  (-{1,2}[\w.+-]+)")  # an option's line in argparse's and jsonargparse's help

# the spellings each knob has had or might get: every command may offer at most one of them, the same one
KNOBS = {
    "the checkpoint": ("--ckpt_path", "--ckpt", "--checkpoint_path"),
    "beam width": ("--model.decoding.beam_size", "--beam_size", "--beam", "--beam_width"),
    "most words per caption": ("--model.decoding.max_caption_length", "--max_length", "--max_caption_length"),
    "images per batch when captioning": ("--data.eval_batch_size", "--batch_size", "--eval_batch_size"),
    "where to run": ("--trainer.accelerator", "--device", "--accelerator"),
    "which device": ("--trainer.devices", "--devices", "--gpus"),
    "the output folder": ("--predictions.out", "--out", "--output", "--out_dir"),
    "captions per image": ("--predictions.num_captions", "--num_captions", "--n_best"),
}
# different knobs whose names end alike: the encoder's, the decoder's and stage 0's learning rates, captioning's and
# stage 0's batches, ModelCheckpoint's and PeriodicCheckpoint's intervals, what ModelCheckpoint and early stopping
# watch, ModelCheckpoint's messages and Lightning's test/validate results table
DIFFERENT = {
    "learning_rate": {"--model.encoder.learning_rate", "--model.optimization.learning_rate",
                      "--pretraining.learning_rate"},
    "batch_size": {"--data.batch_size", "--pretraining.batch_size"},
    "monitor": {"--checkpoint.monitor", "--early_stopping.monitor"},
    "every_n_train_steps": {"--checkpoint.every_n_train_steps", "--periodic_checkpoint.every_n_train_steps"},
    "verbose": {"--checkpoint.verbose", "--verbose"},
}


def listed(help_text: str) -> set[str]:
    """The options (aliases included) a --help lists, each on its line: `  --name VALUE, --alias VALUE   help`."""
    return {item.split(" ")[0].rstrip("+") for line in help_text.splitlines() if OPTION.match(line)
            for item in line.strip().split("  ")[0].split(", ")}


@pytest.fixture(scope="module")
def options() -> dict[str, set[str]]:
    """{command: the options its --help lists} for every command (--help-all: every option of LightningCLI's)."""
    found = {}
    for name, (module, _) in COMMANDS.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            main([name, "--help-all" if module == "lightning" else "--help"])
        found[name] = listed(out.getvalue())
    return found


def test_every_help_spells_each_knob_the_one_way_fit_does(options):
    for knob, spellings in KNOBS.items():
        used = {option: sorted(name for name, offered in options.items() if option in offered)
                for option in spellings if any(option in offered for offered in options.values())}
        assert set(used) <= {spellings[0]}, f"{knob} is spelled {used}: only {spellings[0]}, as `caption fit` spells it"
    for name in ("describe", "evaluate", "compare"):
        assert {"--model.decoding.beam_size", "--model.decoding.max_caption_length", "--data.eval_batch_size",
                "--trainer.accelerator", "--trainer.devices", "--predictions.out"} <= options[name], name
    assert {"--predictions.num_captions", "--predictions.out"} <= options["describe"] & options["predict"]


def test_no_two_options_name_one_setting_with_and_without_its_group(options):
    """`--beam_size` beside `--model.decoding.beam_size`, `--out` beside `--predictions.out`: by their last part."""
    by_last = defaultdict(set)
    for offered in options.values():
        for option in offered:
            if option.startswith("--") and not option.endswith(".help"):
                by_last[option.rsplit(".", 1)[-1].removeprefix("--")].add(option)
    clashes = {last: names for last, names in by_last.items() if len(names) > 1 and DIFFERENT.get(last) != names}
    assert not clashes, clashes


@pytest.mark.parametrize(("option", "closest"), [("--bream_size", "--beam_sizes"), ("--beam_size", "--beam_sizes"),
                                               ("--model.decoding.beam", "--model.decoding.beam_size")])
def test_an_unknown_option_gets_the_parsers_own_message(capsys, option, closest):
    """A mistyped option, another spelling of a knob, or an abbreviation of an option: refused, never read as one (the
    closest option suggested)."""
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "--ckpt_path", "x.ckpt", "--predictions.out", "o", option, "3"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"unrecognized arguments: {option}" in err
    assert err.splitlines() == [f"caption: error: unrecognized arguments: {option} 3; did you mean {closest}? "
                                "(every option: `caption evaluate --help`)"], "one line, no usage block first"


def test_a_bad_value_of_an_inference_commands_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "--ckpt_path", "x.ckpt", "--trainer.precision", "foo"])
    assert exit_.value.code == 2 and capsys.readouterr().err.splitlines() == [
        "caption: error: argument --trainer.precision: --trainer.precision must be one of auto, 32-true, bf16-mixed "
        "(or 32, bf16), got 'foo' (every option: `caption evaluate --help`)"]


@pytest.mark.parametrize("given, expected", [
    ([], "auto"), (["--trainer.accelerator", "cpu"], "cpu"), (["--trainer.accelerator", "gpu"], "cuda"),
    (["--trainer.devices", "1"], "auto"), (["--trainer.devices", "[1]"], "cuda:1"),
    (["--trainer.accelerator", "cuda", "--trainer.devices", "2,"], "cuda:2"),
])
def test_the_device_options_mean_what_they_mean_to_lightning_on_one_device(given, expected):
    parser = CommandParser(prog="caption x")
    add_device(parser)
    assert device(parser.parse_args(given)) == expected


def test_more_than_one_device_or_a_gpu_index_on_the_cpu_is_refused(capsys):
    parser = CommandParser(prog="caption x")
    add_device(parser)
    for many in ("2", "[0, 1]", "-1"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--trainer.devices", many])
        assert "runs on one device" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="GPU's index"):
        device(parser.parse_args(["--trainer.accelerator", "cpu", "--trainer.devices", "[1]"]))


@pytest.mark.parametrize("command", [["evaluate", "--predictions.out", "OUT"], ["test"]])
def test_a_run_folder_without_a_checkpoint_says_to_train_it_first(tmp_path, command):
    empty = tmp_path / "runs" / "untrained"
    (empty / "checkpoints").mkdir(parents=True)
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in command[1:]]
    line = failed([command[0], "--ckpt_path", str(empty), *args])
    assert f"{empty}: no checkpoint (*.ckpt) in this run folder; train with `caption fit` first" in line


@pytest.mark.slow
def test_a_run_folder_stands_for_the_checkpoint_compare_picks(tiny_runs, tmp_path):
    run = tiny_runs["soft"]
    chosen = find_checkpoint(run)
    assert chosen.name.startswith("best-"), "the model-selection checkpoint"
    captioner = Captioner.from_checkpoint(run, device="cpu")
    assert captioner.checkpoint == str(chosen)
    from_file = Captioner.from_checkpoint(chosen, device="cpu")
    image = tmp_path / "photo.png"
    Image.new("RGB", (40, 40), (200, 30, 30)).save(image)
    assert captioner(image).text == from_file(image).text

    main(["evaluate", "--ckpt_path", str(run), "--predictions.out", str(tmp_path / "eval"),
          "--trainer.accelerator", "cpu"])
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["checkpoint"] == str(chosen)

    main(["predict", "--ckpt_path", str(run), "--data.predict", "test", "--predictions.out", str(tmp_path / "pred"),
          "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu"])
    assert len(json.loads((tmp_path / "pred" / "captions.json").read_text())) > 0


@pytest.mark.parametrize("command", ["describe", "evaluate", "compare"])
def test_every_command_that_decodes_takes_every_decoding_setting(command, capsys):
    """A `--model.decoding.<setting>` per field of DecodingSettings, generated from them: a new one is an option too."""
    from dataclasses import fields

    from caption.model.decoding import DecodingSettings

    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    assert all(f"--model.decoding.{field.name}" in shown for field in fields(DecodingSettings)), shown


def test_the_decoding_settings_given_replace_the_checkpoints(tiny_runs):
    captioner = Captioner.from_checkpoint(tiny_runs["hard"], decoding={"length_penalty": 0.7,
                                                                        "hard_eval_context": "argmax"})
    decoding = captioner.module.settings.decoding
    assert (decoding.length_penalty, decoding.hard_eval_context) == (0.7, "argmax")
    assert captioner.module.decoder.attention.eval_context == "argmax", "the decoder decodes with it"
    with pytest.raises(ConfigError, match="length_penalty"):
        Captioner.from_checkpoint(tiny_runs["hard"], decoding={"length_penalty": -1.0})


def test_every_command_taking_a_config_takes_it_as_fit_does_and_prints_its_options(options):
    """-c beside --config wherever --config is; --print_config in every command."""
    for name, offered in options.items():
        if "--config" in offered:
            assert "-c" in offered, f"caption {name} takes --config but not -c"
        assert "--print_config" in offered, f"caption {name} has no --print_config"


@pytest.mark.parametrize("command, args, out", [
    ("evaluate", ["--ckpt_path", "runs/shapes_soft"], "eval/shapes_soft"),
    ("evaluate", ["--ckpt_path", "runs/shapes_soft/checkpoints/best-epoch=3.ckpt"], "eval/shapes_soft"),
    ("evaluate", ["--ckpt_path", "https://example.org/models/soft.ckpt"], "eval/soft"),
    ("evaluate", ["--ckpt_path", "runs/a", "--predictions.out", "mine"], "mine"),
    ("compare", ["runs/a", "runs/b"], "reports/compare"),
    ("export", ["--ckpt_path", "runs/shapes_soft"], "exports/shapes_soft"),
    ("export", ["--ckpt", "runs/shapes_soft/checkpoints/last.ckpt"], "exports/shapes_soft"),
])
def test_each_command_writes_to_a_default_folder_print_config_shows(command, args, out, capsys):
    config = [] if command == "export" else ["-c", "shapes_soft"]
    with pytest.raises(SystemExit) as exit_:
        main([command, *args, *config, "--print_config"])
    printed = capsys.readouterr().out
    assert exit_.value.code == 0 and f"predictions:\n  out: {out}\n" in printed
    assert not config or "config: shapes_soft" in printed
