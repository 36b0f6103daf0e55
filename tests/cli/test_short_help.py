"""`caption fit|validate|test|predict --help`: the project's options grouped by part, each with a line of help, answered
from the kept short help (`caption.cli.lightning.short_help`); the kept one is what LightningCLI's parser gives now, and
`--help-all` is jsonargparse's help of every option."""

import pytest

from caption.cli import main
from caption.cli.lightning.short_help import composed, kept, render

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def test_the_kept_short_help_is_what_the_parser_gives_now():
    assert kept() == composed(), "the options changed: rewrite it with `python -m caption.cli.lightning.short_help`"


@pytest.mark.parametrize("command", LIGHTNING_COMMANDS)
def test_the_short_help_groups_the_projects_options_each_with_its_line(command):
    short = kept()[command]
    assert len(render(short, width=100).splitlines()) <= 200
    options = {name: help_text for group in short["groups"] for names, help_text in group["options"]
               for name in names.split(", ")}
    assert [name for name, help_text in options.items() if not help_text.strip()] == []
    assert {"--config", "--ckpt_path", "--help-all", "--trainer.accelerator", "--trainer.devices",
            "--model.encoder.name", "--model.decoder.embed_dim", "--model.attention.kind", "--model.decoding.beam_size",
            "--data.source", "--data.batch_size"} <= set(options)
    assert "--trainer.gradient_clip_algorithm" not in options and "--lr_scheduler" not in options, "--help-all's"
    assert ("--trainer.max_epochs" in options) == (command == "fit")
    assert ("--predictions.out" in options) == (command == "predict")
    titles = [group["title"] for group in short["groups"]]
    assert {"model.encoder", "model.decoder", "model.attention", "model.decoding", "data", "trainer"} <= {
        title.split(":")[0] for title in titles}
    assert options["--model.decoder.embed_dim"] == "m, the word embedding size (also the deep output's hidden size, " \
                                                   "eq. 7) (default: 512)"
    assert options["--checkpoint.monitor" if command == "fit" else "--data.eval_batch_size"].endswith(
        "(default: val/bleu4)" if command == "fit" else "(default: 100)")


def test_help_is_the_short_one_wherever_it_is_and_help_all_the_full_one(capsys):
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "shapes_soft", "-h"])
    short = capsys.readouterr().out
    assert done.value.code == 0 and short.startswith("usage: caption fit [-h] [--help-all]")
    assert "--model.decoder.embed_dim" in short and "--trainer.gradient_clip_algorithm" not in short
    with pytest.raises(SystemExit) as done:
        main(["fit", "--help-all"])
    full = capsys.readouterr().out
    assert done.value.code == 0 and "--trainer.gradient_clip_algorithm" in full and "--lr_scheduler" in full
