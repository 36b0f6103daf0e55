""""Did you mean": a mistyped command, config name or option is answered with the closest known one, and the Lightning
commands answer a mistyped config or project option before Lightning is imported (`caption.config.suggestions`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from caption.cli import main
from caption.cli.lightning.commands import lightning_parsers
from caption.cli.lightning.kept_help import option_names
from caption.cli.lightning.short_help import unknown_project_option
from caption.cli.options import suggested
from caption.config.suggestions import closest

ROOT = Path(__file__).resolve().parents[2]
# runs `caption` in a fresh interpreter, then says what it printed and whether Lightning or torch was ever imported
PROBE = """
import json, sys
from caption.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    print(json.dumps({"said": str(done.code), "imported": sorted({"lightning", "torch"} & set(sys.modules))}))
"""


def caption_in_a_fresh_process(*args: str) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60,
                          env=environment, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_mistyped_command_gets_the_closest_command(capsys):
    with pytest.raises(SystemExit) as done:
        main(["fti"])
    assert str(done.value.code).startswith("caption: error: unknown command 'fti'; did you mean fit? the commands are")


@pytest.mark.parametrize(("args", "said"), [
    (["fit", "--config", "shapes_sofft"],
     "caption: error: config shapes_sofft: no such file, nor a packaged config of that name; "
     "did you mean shapes_soft?"),
    (["fit", "--config", "shapes_soft", "--model.decoder.hiden_dim", "64"],
     "caption: error: unrecognized arguments: --model.decoder.hiden_dim; did you mean --model.decoder.hidden_dim? "
     "(every setting: `caption fit --help-all`)"),
    (["test", "--model.decoding.beam=3", "--ckpt_path", "x.ckpt"],
     "caption: error: unrecognized arguments: --model.decoding.beam; did you mean --model.decoding.beam_size? "
     "(every setting: `caption test --help-all`)"),
])
def test_a_mistyped_config_or_option_is_answered_before_lightning_is_imported(args, said):
    answer = caption_in_a_fresh_process(*args)
    assert answer == {"said": said, "imported": []}


def test_a_config_name_close_to_none_still_lists_the_packaged_ones():
    answer = caption_in_a_fresh_process("fit", "--config", "qqqqqqq")
    assert "packaged: " in answer["said"] and "shapes_soft" in answer["said"] and "did you mean" not in answer["said"]


def test_a_mistyped_option_of_an_inference_command_gets_the_closest_option(capsys):
    with pytest.raises(SystemExit) as done:
        main(["describe", "--ckpt_path", "x.ckpt", "--predictions.ot", "figures", "photo.jpg"])
    assert done.value.code == 2 and capsys.readouterr().err.splitlines() == [
        "caption: error: unrecognized arguments: --predictions.ot; did you mean --predictions.out? "
        "(every option: `caption describe --help`)"]


def test_lightnings_parser_suggests_among_the_short_helps_options():
    known = option_names("fit")
    assert suggested("Unrecognized arguments: --trainer.max_epohcs 3", known) == "; did you mean --trainer.max_epochs?"
    assert suggested("Unrecognized arguments: --trainer.zzz 3", known) == ""
    assert suggested("Expected a <class 'int'>", known) == ""


@pytest.mark.parametrize(("word", "known", "match"), [
    ("--model.decoder.zzz", ["--model.encoder.freeze", "--model.decoder.dropout"], None),
    ("--bream_size", ["--model.decoding.beam_size", "--model.decoding.max_length"], "--model.decoding.beam_size"),
    ("--modle.decoder.hidden_dim", ["--model.decoder.hidden_dim", "--model.decoder.embed_dim"],
     "--model.decoder.hidden_dim"),
    ("shapes_sofft", ["shapes_soft", "shapes_hard", "shapes_soft_scst"], "shapes_soft"),
])
def test_a_suggestion_is_close_by_its_whole_name_and_by_its_last_part(word, known, match):
    assert closest(word, known) == match


def test_no_option_of_lightnings_parser_is_refused_before_it():
    """The check before Lightning refuses an option of the project's groups the short help lacks: it lacks none."""
    for command, parser in lightning_parsers().items():
        known = option_names(command)
        offered = {name for group in parser._action_groups for action in group._group_actions
                   for name in action.option_strings}
        assert [name for name in offered if unknown_project_option(name, known)] == [], command
