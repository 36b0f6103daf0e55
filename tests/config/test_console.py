"""What `caption` prints: its own lines, Lightning's progress and summary, and third-party chatter only with -v;
every command's --help at once."""

import logging
import re
import subprocess
import sys
import warnings

import pytest
from kit.cli import REPO, caption, environment
from kit.tiny import fit_args

from caption.config.console import console
from caption.evaluation.ptb_tokenizer import ptb_tokenize

LIGHT_COMMANDS = ("describe", "evaluate", "compare", "features", "migrate-config")
HEAVY_MODULES = ("torch", "lightning", "matplotlib", "pycocoevalcap", "PIL")
HELP_PROGRAM = """
import sys
from caption.cli import main
try:
    main([sys.argv[1], "--help"])
except SystemExit:
    pass
print(sorted(name for name in {heavy!r} if name in sys.modules))
"""


@pytest.mark.parametrize("command", LIGHT_COMMANDS)
def test_help_of_the_commands_that_run_no_training_loads_neither_torch_nor_lightning(command):
    run = subprocess.run([sys.executable, "-c", HELP_PROGRAM.format(heavy=HEAVY_MODULES), command], cwd=REPO,
                         env=environment(), capture_output=True, text=True, timeout=120, check=True)
    *help_text, loaded = run.stdout.strip().splitlines()
    assert f"usage: caption {command}" in "\n".join(help_text)
    assert loaded == "[]", f"`caption {command} --help` imported {loaded}"


@pytest.mark.slow
def test_fit_prints_progress_figures_that_move_each_epoch_once_then_the_best_epoch_and_folders(tmp_path):
    run = tmp_path / "run"
    fit = caption("fit", *fit_args(run, "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "true"))
    assert fit.returncode == 0, fit.stderr[-3000:]
    output = fit.stdout + fit.stderr
    for chatter in ("_pytree", "is deprecated", "PTBTokenizer", "Tip:", "v_num"):
        assert chatter not in output, f"{chatter!r} printed:\n{output[-3000:]}"
    lines = output.splitlines()  # a bar's redraws ("\r") read as lines here
    for epoch in (0, 1):
        finished = [line for line in lines if line.startswith(f"Epoch {epoch}: 100%")]
        assert len(finished) == 1, f"epoch {epoch}'s finished bar printed {len(finished)} times:\n{fit.stdout}"
        assert "loss=" in finished[0] and "val/bleu4=" in finished[0] and "chance" not in finished[0], finished[0]
    assert not re.search(r"\d\.\d{6,}", output), "figures at a few significant digits, not 16"
    kept = next(line for line in lines if line.startswith("kept epoch "))
    assert re.fullmatch(r"kept epoch 1 \(the last\), validation: bleu4 \S+, cider \S+.*", kept), kept
    assert any(line.startswith("test (best checkpoint): bleu1 ") for line in lines)
    assert f"checkpoints: {run / 'checkpoints'} (best: best-epoch" in output
    assert f"logs: {run / 'logs' / 'version_0'} (" in output and "metrics.csv" in output


def test_the_tokenizer_note_is_shown_with_verbose_only(capfd):
    references = {1: ["A dog runs.", "a DOG running"]}
    ptb_tokenize(references)  # the library prints nothing
    with console():
        tokens, _ = ptb_tokenize(references)
    assert tokens == {1: ["a dog runs", "a dog running"]}
    assert "PTBTokenizer" not in capfd.readouterr().err
    with console(verbose=True):
        ptb_tokenize(references)
    assert "PTBTokenizer tokenized" in capfd.readouterr().err


def test_dependency_deprecations_and_tips_are_left_out_unless_verbose(caplog):
    def shown(*, verbose: bool) -> list[str]:
        with console(verbose=verbose), warnings.catch_warnings(record=True) as seen:
            for module in ("lightning.pytorch.utilities._pytree", "caption.training.module"):
                warnings.warn_explicit(f"{module} is deprecated", FutureWarning, "file.py", 1, module=module)
            warnings.warn_explicit("a real problem", UserWarning, "file.py", 2, module="lightning.pytorch.trainer")
        return sorted(str(warning.message) for warning in seen)

    assert shown(verbose=False) == ["a real problem", "caption.training.module is deprecated"]
    assert len(shown(verbose=True)) == 3
    notes = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO, logger=notes.name), console():
        notes.info("💡 Tip: try another package")
        notes.info("GPU available: False")
    assert [record.getMessage() for record in caplog.records] == ["GPU available: False"]
    assert not notes.filters, "the console's filter goes with the command"
