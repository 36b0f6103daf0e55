"""How a report's figures were made, as report.md, metrics.json and the model card record it.

    made = provenance(precision="bf16-mixed", seed=run_seed(checkpoint), device=torch.device("cpu"))
    made.record()    # {"precision": "bf16-mixed", "seed": 0, "commit": "31ac58f...", "modified": false, "device": ...}
    made.line()      # "precision bf16-mixed, seed 0, commit 31ac58f (modified: no), device cpu (AMD EPYC 7B13)"

The commit is the show-attend-tell checkout's, asked of `git` (its HEAD and whether tracked files differ from it);
unknown where git is absent, where the code was installed from a wheel (no checkout around the package) or where git
cannot answer. The seed is the training run's `seed_everything`, read from the config `caption fit` saved beside its
checkpoints (or the training_config.yaml of an exported model folder); unknown when there is none.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

UNKNOWN = "unknown"
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout that holds caption/ (site-packages for a wheel)
SHOWN_SETTING = 20  # the longest precision setting recorded as read (Lightning's are shorter)
GIT_TIMEOUT = 5.0  # seconds for each git question
SAVED_CONFIG = "config.yaml"  # what `caption fit` saves in its run folder's logs
TRAINING_CONFIG = "training_config.yaml"  # the saved config in an exported model folder (caption.io.model_folder)


@dataclass(frozen=True)
class Provenance:
    """What made a set of figures.

    precision: the precision they were computed in ("32-true", "bf16-mixed"), None when unknown.
    seed: the training run's seed_everything, None when unknown.
    commit: the show-attend-tell commit of the code, None when unknown.
    modified: whether tracked files of that checkout differ from the commit, None when unknown.
    device: the device that computed them, with its model ("cpu (AMD EPYC 7B13)", "cuda:0 (NVIDIA H100)").
    """

    precision: str | None
    seed: int | None
    commit: str | None
    modified: bool | None
    device: str

    def record(self) -> dict[str, Any]:
        """The fields for a JSON file (null: unknown)."""
        return asdict(self)

    def line(self) -> str:
        """One line of every field, "unknown" for what is not known."""
        return (f"precision {self.precision or UNKNOWN}, seed {UNKNOWN if self.seed is None else self.seed}, "
                f"{self.code_line()}")

    def code_line(self) -> str:
        """The commit (whether modified) and the device, in one line."""
        modified = UNKNOWN if self.modified is None else "yes" if self.modified else "no"
        commit = UNKNOWN if self.commit is None else f"{self.commit[:12]} (modified: {modified})"
        return f"commit {commit}, device {self.device}"


def provenance(*, precision: str | None, seed: int | None, device: Any) -> Provenance:
    """The provenance of figures computed now, by this code.

    precision: the precision they were computed in.
    seed: the training run's seed (`run_seed`).
    device: the torch device (or its name) that computed them.
    """
    commit, modified = source_commit(root=SOURCE_ROOT)
    return Provenance(precision=precision, seed=seed, commit=commit, modified=modified,
                      device=device_name(device=device))


def git_answer(*arguments: str, root: Path) -> str | None:
    """What `git -C root ARGUMENTS` prints, or None when git is absent, fails or takes too long (no hook of the
    checkout runs: core.fsmonitor is off)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "-c", "core.fsmonitor=false", *arguments],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def source_commit(*, root: Path) -> tuple[str | None, bool | None]:
    """(the commit, whether tracked files differ from it) of the checkout at `root`; (None, None) where `root` is no
    checkout's top folder (a wheel's site-packages) or git cannot say.

    root: the folder that holds the package caption/.
    """
    if not (root / ".git").exists():
        return None, None
    top = git_answer("rev-parse", "--show-toplevel", root=root)
    if top is None or Path(top.strip()).resolve() != root.resolve():
        return None, None
    commit = git_answer("rev-parse", "HEAD", root=root)
    if commit is None:
        return None, None
    status = git_answer("status", "--porcelain", "--untracked-files=no", root=root)
    return commit.strip(), None if status is None else bool(status.strip())


def cpu_model() -> str:
    """The CPU's model name as Linux reports it, else the platform's processor or machine name."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    line = next((line for line in text.splitlines() if line.startswith("model name")), "")
    return line.partition(":")[2].strip() or platform.processor() or platform.machine() or UNKNOWN


def device_name(*, device: Any) -> str:
    """The device with its model: "cpu (AMD EPYC 7B13)", "cuda:0 (NVIDIA H100 80GB HBM3)", else its name.

    device: a torch device or its name.
    """
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return f"cpu ({cpu_model()})"
    if device.type == "cuda":
        try:
            return f"{device} ({torch.cuda.get_device_name(device)})"
        except (RuntimeError, AssertionError):
            return str(device)
    return str(device)


def saved_run_config(checkpoint: Path) -> Path | None:
    """The config a checkpoint's run saved: <run>/**/config.yaml (the oldest: the run's first) for a checkpoint in
    <run>/checkpoints/, or training_config.yaml in an exported model folder; None when there is none."""
    run = checkpoint if checkpoint.is_dir() else checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" \
        else None
    folder = run if run is not None else checkpoint.parent
    if (folder / TRAINING_CONFIG).is_file():
        return folder / TRAINING_CONFIG
    if run is None:  # a checkpoint that stands alone
        return None
    try:
        saved = sorted(run.glob(f"**/{SAVED_CONFIG}"), key=lambda path: path.stat().st_mtime)
    except OSError:
        return None
    return saved[0] if saved else None


def saved_setting(checkpoint: Path | str | None, *keys: str) -> Any:
    """A setting of the config the run that trained `checkpoint` saved (`saved_run_config`), by its keys
    ("trainer", "precision"); None when unknown.

    checkpoint: a checkpoint file, a run folder or a model folder (None: unknown).
    keys: the setting's path in the config.
    """
    config = None if checkpoint is None else saved_run_config(Path(checkpoint))
    if config is None:
        return None
    try:
        found = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    for key in keys:
        found = found.get(key) if isinstance(found, dict) else None
    return found


def run_seed(checkpoint: Path | str | None) -> int | None:
    """The seed_everything of the run that trained `checkpoint`, None when unknown.

    checkpoint: a checkpoint file, a run folder or a model folder (None: unknown).
    """
    seed = saved_setting(checkpoint, "seed_everything")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def run_precision(checkpoint: Path | str | None) -> str | None:
    """The precision setting of the run that trained `checkpoint` ("auto" where unset), None when unknown.

    checkpoint: a checkpoint file, a run folder or a model folder (None: unknown).
    """
    if checkpoint is None or saved_run_config(Path(checkpoint)) is None:
        return None
    precision = saved_setting(checkpoint, "trainer", "precision")
    if precision is None:
        return "auto"
    return str(precision) if isinstance(precision, str | int) and len(str(precision)) <= SHOWN_SETTING else None
