"""What `caption` prints: its own lines, Lightning's progress and summary, and third-party chatter only with -v;
every command's --help at once; a short fit as a terminal shows it."""

import logging
import os
import re
import select
import subprocess
import sys
import time
import warnings

import pytest
from kit.cli import PATIENCE_S, REPO, caption, environment
from kit.tiny import fit_args

from caption.cli import COMMANDS
from caption.config.console import console
from caption.evaluation.ptb_tokenizer import ptb_tokenize

# every command whose --help needs no model (fit, validate, test and predict: the kept short help)
LIGHT_COMMANDS = ("fit", "validate", "test", "predict", "pretrain-encoder", "describe", "evaluate", "compare",
                  "features", "serve")
HELP_LIMIT_S = 0.5  # a command's --help, once `caption` itself is imported
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
def test_help_loads_neither_torch_nor_lightning(command):
    run = subprocess.run([sys.executable, "-c", HELP_PROGRAM.format(heavy=HEAVY_MODULES), command], cwd=REPO,
                         env=environment(), capture_output=True, text=True, timeout=120, check=True)
    *help_text, loaded = run.stdout.strip().splitlines()
    assert f"usage: caption {command}" in "\n".join(help_text)
    assert loaded == "[]", f"`caption {command} --help` imported {loaded}"


TIMED_HELP_PROGRAM = """
import contextlib, io, sys, time
from caption.cli import main
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main([sys.argv[1], "--help"])
print(time.perf_counter() - start)
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_answers_in_half_a_second(command):
    """Each command's --help, timed in its own process after `caption.cli` is imported (what every command pays)."""
    run = subprocess.run([sys.executable, "-c", TIMED_HELP_PROGRAM, command], cwd=REPO, env=environment(),
                         capture_output=True, text=True, timeout=120, check=True)
    seconds = float(run.stdout.strip().splitlines()[-1])
    assert seconds < HELP_LIMIT_S, f"`caption {command} --help` took {seconds:.2f} s"


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
    # the shapes beam of 3 beside greedy decoding, as validation decodes: the two are seen together
    assert any(re.fullmatch(r"test, greedy as validation decodes: bleu4 \S+, cider \S+, attention_accuracy .*", line)
               for line in lines), output[-2000:]
    assert f"checkpoints: {run / 'checkpoints'} (best: best-epoch" in output
    assert f"logs: {run / 'logs' / 'version_0'} (" in output and "metrics.csv" in output
    captions, summary = fit.stdout.find("Example test captions"), fit.stdout.find("kept epoch ")
    assert 0 <= captions < summary, "the example captions, then the summary, on one stream"
    assert not [line for line in lines if "Validation" in line or "Testing" in line], "no passing bar kept in a file"


CSI = re.compile(r"\x1b\[(\d*)(?:;\d+)*([A-Za-z])")  # a terminal's control sequence: cursor moves, colours


def screen(text: str, *, width: int) -> list[str]:
    """The lines a terminal `width` columns wide shows after `text` was written to it: carriage returns and cursor
    moves redraw (as tqdm's bars do), a line longer than the width wraps."""
    lines: list[list[str]] = [[]]
    row = column = 0
    at = 0
    while at < len(text):
        sequence = CSI.match(text, at)
        if sequence:
            count = int(sequence.group(1) or 1)
            row = max(0, row - count) if sequence.group(2) == "A" else row + count if sequence.group(2) == "B" else row
            at = sequence.end()
            continue
        character = text[at]
        at += 1
        if character == "\r":
            column = 0
        elif character == "\n":
            row += 1
        else:
            if column == width:
                row, column = row + 1, 0
            lines += [[] for _ in range(row + 1 - len(lines))]
            lines[row] += " " * (column + 1 - len(lines[row]))
            lines[row][column] = character
            column += 1
        lines += [[] for _ in range(row + 1 - len(lines))]
    return ["".join(line).rstrip() for line in lines]


def on_terminal(*args: str, width: int) -> list[str]:
    """What `caption ARGS` shows on a terminal `width` columns wide (a pseudo-terminal for stdout and stderr)."""
    import fcntl
    import pty
    import struct
    import termios

    control, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "caption.cli", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                               stdout=terminal, stderr=terminal, env=environment(changes={"COLUMNS": str(width)}))
    os.close(terminal)
    written, deadline = b"", time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if select.select([control], [], [], 1.0)[0]:
            try:
                chunk = os.read(control, 65536)
            except OSError:  # every end of the terminal closed: the command is done
                break
            if not chunk:
                break
            written += chunk
    os.close(control)
    assert process.wait(timeout=60) == 0, written.decode(errors="replace")[-3000:]
    return screen(written.decode(errors="replace"), width=width)


BAR = re.compile(r"\d+%\||\| *\d+/[\d?]+ \[")  # a piece of a tqdm bar
WHOLE_BAR = re.compile(r"Epoch \d+: +\d+%\|[^|]*\| \d+/\d+ \[[^\]]*\]")  # a kept bar, and nothing else


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_a_short_fit_shows_a_terminal_only_its_own_lines_each_whole(tmp_path):
    """A one-epoch fit as a terminal 100 columns wide shows it: the model in a line, the epoch's bar, the project's
    warning in a line of its own and a dependency's without its path, the example captions and the summary; no
    device line on a CPU, no table of modules, no path under site-packages, no bar left over or joined to a line."""
    run = tmp_path / "run"
    shown = on_terminal("fit", *fit_args(run, "--trainer.enable_progress_bar", "true",
                                         "--trainer.callbacks+=kit.probes.WarnsMidEpoch"), width=100)
    text = "\n".join(shown)
    assert len(shown) < 100, text
    assert not [line for line in shown if "site-packages" in line or "/lightning/" in line], text
    assert not [line for line in shown if BAR.search(line) and not WHOLE_BAR.fullmatch(line)], text
    assert len([line for line in shown if WHOLE_BAR.fullmatch(line)]) == 1, text
    assert "caption: warning: a warning of the project's, in two lines" in shown, text
    assert "dependency: warning: a dependency's note" in shown, text
    assert [line for line in shown if "warning" in line.lower()] == [
        "caption: warning: a warning of the project's, in two lines", "dependency: warning: a dependency's note"]
    assert not [line for line in shown if "available:" in line or "FLOPs" in line or "Seed set" in line], text
    # the precision it trains in, in that line: not Lightning's own line for it too
    assert re.search(r"^model: [\d.]+ [KM]? ?parameters trained, 0 frozen; precision (32-true|bf16-mixed)( \(.+\))?$",
                     text, re.MULTILINE), text
    assert not [line for line in shown if "Automatic Mixed Precision" in line], text
    assert shown.index("Example test captions (beam 3):") < next(
        index for index, line in enumerate(shown) if line.startswith("kept epoch 0"))


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
        notes.info("GPU available: False, used: False")
        notes.info("TPU available: False, using: 0 TPU cores")
        notes.info("GPU available: True (cuda), used: True")
    assert [record.getMessage() for record in caplog.records] == ["GPU available: True (cuda), used: True"]
    assert not notes.filters, "the console's filter goes with the command"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["validate", "test"])
def test_validate_and_test_leave_out_lightnings_words_on_the_seed_and_the_checkpoints_callbacks(command, tiny_runs,
                                                                                               tmp_path):
    result = caption(command, "--ckpt_path", str(tiny_runs["soft"] / "checkpoints" / "last.ckpt"),
                     "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
                     "--trainer.enable_progress_bar", "false")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "No seed found" not in output and "Be aware that when using `ckpt_path`" not in output, output[-3000:]
    assert f"{command.replace('validate', 'val')}/bleu4" in output


SCORING_PROGRAM = """
import sys
import lightning, torch
from caption.cli.lightning.console import lightning_console
from caption.training.progress import ParameterCount

class OneLayer(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def validation_step(self, batch, batch_index):
        return self.layer(batch[0]).mean()

    test_step = validation_step

batches = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2, 4)), batch_size=2)
for command in ("validate", "test"):  # each as its command runs it: a console and a Trainer of its own
    print(f"-- {command}", flush=True)
    with lightning_console(verbose=False, command=command):
        trainer = lightning.Trainer(accelerator="cpu", precision="bf16-mixed", callbacks=[ParameterCount()],
                                    enable_model_summary=False, logger=False, enable_progress_bar=False,
                                    default_root_dir=sys.argv[1])
        getattr(trainer, command)(OneLayer(), dataloaders=batches, verbose=False)
"""


def test_validate_and_test_name_the_precision_in_their_own_line_not_lightnings(tmp_path):
    """What `caption validate` and `test` show of the precision, from a Trainer under their console (bf16-mixed)."""
    run = subprocess.run([sys.executable, "-c", SCORING_PROGRAM, str(tmp_path)], cwd=REPO, env=environment(),
                         capture_output=True, text=True, timeout=PATIENCE_S, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    shown = run.stdout.splitlines()
    assert not [line for line in shown if "Automatic Mixed Precision" in line], shown
    named = [line for line in shown if "precision" in line.lower() or line.startswith("-- ")]
    assert len(named) == 4 and named[0::2] == ["-- validate", "-- test"], shown
    assert all(re.fullmatch(r"scoring in precision bf16-mixed \(.+\)", line) for line in named[1::2]), shown
