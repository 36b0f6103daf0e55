"""The package is a library too: importing it and captioning with `Captioner` change nothing process-wide
(malloc, the environment, warning filters, logging, torch's threads) and print nothing."""

import platform
import subprocess
import sys

import pytest

PROGRAM = """
import logging, os, resource, sys, warnings
import lightning.pytorch, matplotlib, torch, torchvision  # what the dependencies do on import is theirs
before = (dict(os.environ), list(warnings.filters), list(logging.getLogger().handlers), torch.get_num_threads())

import caption, caption.inference
from caption import Captioner
from caption.training import allocator

captioner = Captioner.from_checkpoint(sys.argv[1], device="cpu")
captions = captioner([torch.rand(3, 64, 64), torch.rand(3, 64, 64)], beam_size=2)
after = (dict(os.environ), list(warnings.filters), list(logging.getLogger().handlers), torch.get_num_threads())
changed = [name for name, old, new in zip(("environment", "warning filters", "logging", "threads"), before, after)
           if old != new]

projected, query = torch.ones(64, 1, 196, 512), torch.ones(64, 3, 1, 512)
faults = []
for step in range(12):  # a 77 MB temporary at every step: glibc's defaults map fresh pages for it each time
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    hidden = projected + query
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
    del hidden
with open(sys.argv[2], "w") as result:
    result.write(repr((changed, allocator._configured, len(captions), min(faults[4:]))))
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux", reason="page-fault counts as Linux reports them")
def test_importing_and_captioning_change_nothing_process_wide_and_print_nothing(tiny_runs, tmp_path):
    checkpoint = next((tiny_runs["soft"] / "checkpoints").glob("best-*.ckpt"))
    result = tmp_path / "result.txt"
    run = subprocess.run([sys.executable, "-c", PROGRAM, str(checkpoint), str(result)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == "", (run.stdout, run.stderr)
    changed, configured, captioned, faults = eval(result.read_text())
    assert changed == [] and captioned == 2
    assert configured is None, "caption.training.allocator was called: malloc is process-wide"
    pages = 64 * 3 * 196 * 512 * 4 // 4096
    assert faults > pages // 2, "freed memory went back to the kernel, as glibc's defaults do"
