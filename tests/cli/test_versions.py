"""What the command line says about what it runs on: `caption --version` names torch's build, torchvision, Lightning
and the precision "auto" chooses here, and a torchvision built for another torch is one line at start-up."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from caption.cli import main
from caption.io.device import resolved_precision

ROOT = Path(__file__).resolve().parents[2]

# torchvision as a CUDA build installed beside a torch of another build leaves it: its operators fail to register
STAND_IN = {
    "__init__.py": "import torch\nraise RuntimeError('operator torchvision::nms does not exist')\n",
    "version.py": "__version__ = '0.28.0+cu126'\ngit_version = 'stand-in'\n",
}


def test_version_names_torch_with_its_build_torchvision_lightning_and_the_precision_auto_chooses(capsys):
    main(["--version"])
    lines = capsys.readouterr().out.splitlines()
    build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
    assert lines[0].startswith("caption (show-attend-tell) ")
    assert lines[1] == f"torch {torch.__version__} ({build})"
    assert lines[2].startswith("torchvision 0.") and lines[3].startswith("lightning 2.")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert lines[4].startswith(f"precision auto: {resolved_precision('auto', device)} here ({device}")


def test_a_torchvision_of_another_build_is_named_in_one_line_at_start_up(tmp_path):
    """A stand-in torchvision (a CUDA 12.6 build of 0.28.0 failing as the real one does) first on the path: `caption
    fit` says which builds do not match and how to install a pair, in one line, and `--version` still answers."""
    package = tmp_path / "torchvision"
    package.mkdir()
    for name, text in STAND_IN.items():
        (package / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.run([sys.executable, "-m", "caption.cli", "fit", "--config", "shapes_soft"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=60)
    release = f"0.{int(torch.__version__.split('.')[1]) + 15}"
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"caption: error: torchvision 0.28.0+cu126 (a CUDA 12.6 build) does not match torch "
                                 f"{torch.__version__} ("), run.stderr
    assert f"torchvision {release} is the release of torch {torch.__version__.partition('+')[0]}" in run.stderr
    assert "install both from one index, e.g. pip install --force-reinstall torch==" in run.stderr
    assert "--index-url https://download.pytorch.org/whl/" in run.stderr and "Traceback" not in run.stderr
    version = subprocess.run([sys.executable, "-m", "caption.cli", "--version"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=60)
    assert "torchvision 0.28.0+cu126 (a CUDA 12.6 build)" in version.stdout, version.stderr
