"""caption.training.allocator: only CPU runs on glibc, each knob on its own, one log line per process, only when asked
for (`--keep_freed_memory true`), and the real effect: a loop that allocates the same big temporary at every step
stops page-faulting it."""

import logging
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from kit.tiny import tiny_args

from caption.cli import main
from caption.training import allocator
from caption.training.allocator import configure_allocator

REPO = Path(__file__).resolve().parents[2]

MMAP, TRIM = (-3, 1 << 30), (-1, 2**31 - 1)  # (mallopt parameter, value) of each knob, as glibc's malloc.h says


class FakeMallopt:
    """Records each mallopt(parameter, value) call; refuses the parameters in `refused` (returns 0, as glibc does)."""

    def __init__(self, refused: tuple[int, ...] = ()):
        self.calls: list[tuple[int, int]] = []
        self.refused = refused

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 0 if parameter in self.refused else 1


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """A process that has not configured malloc yet, on glibc; returns the logged lines."""
    monkeypatch.setattr(allocator, "_configured", None)
    monkeypatch.setattr(allocator.platform, "system", lambda: "Linux")
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda *_: ("glibc", "2.36"))
    lightning_logger = logging.getLogger("lightning.pytorch")  # rank_zero_info's; it need not reach the root logger
    monkeypatch.setattr(lightning_logger, "propagate", False)  # caught once, whether or not it reaches the root
    lightning_logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    yield lambda: [r.getMessage() for r in caplog.records if r.getMessage().startswith("caption.training.allocator")]
    lightning_logger.removeHandler(caplog.handler)


def with_mallopt(monkeypatch: pytest.MonkeyPatch, mallopt: FakeMallopt) -> FakeMallopt:
    monkeypatch.setattr(allocator, "glibc_mallopt", lambda: mallopt)
    return mallopt


def test_a_cpu_run_sets_each_knob_with_its_own_call_and_says_so(fresh, monkeypatch):
    mallopt = with_mallopt(monkeypatch, FakeMallopt())
    assert configure_allocator("cpu") == {"M_MMAP_THRESHOLD": True, "M_TRIM_THRESHOLD": True}
    assert mallopt.calls == [MMAP, TRIM]
    [line] = fresh()
    assert "M_MMAP_THRESHOLD=1 GiB, M_TRIM_THRESHOLD=2 GiB set" in line and "keeps its peak memory" in line


def test_a_refused_knob_is_named_and_the_other_still_set(fresh, monkeypatch):
    mallopt = with_mallopt(monkeypatch, FakeMallopt(refused=(MMAP[0],)))
    assert configure_allocator("cpu") == {"M_MMAP_THRESHOLD": False, "M_TRIM_THRESHOLD": True}
    assert mallopt.calls == [MMAP, TRIM], "a refused knob does not stop the next one"
    [line] = fresh()
    assert "M_TRIM_THRESHOLD=2 GiB set" in line and "refused M_MMAP_THRESHOLD=1 GiB" in line


@pytest.mark.parametrize("device_type", ["cuda", "mps"])
def test_only_cpu_runs_change_malloc(fresh, monkeypatch, device_type):
    mallopt = with_mallopt(monkeypatch, FakeMallopt())
    assert configure_allocator(device_type) == {}
    assert mallopt.calls == []
    assert fresh() == ["caption.training.allocator: malloc left at glibc's defaults "
                       f"(the run computes on {device_type}, not the CPU)"]


def test_other_c_libraries_are_left_alone(fresh, monkeypatch):
    mallopt = with_mallopt(monkeypatch, FakeMallopt())
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda *_: ("", ""))  # musl
    assert configure_allocator("cpu") == {}
    assert mallopt.calls == [] and fresh() == ["caption.training.allocator: malloc left at glibc's defaults "
                                               "(the C library is not glibc)"]


def test_the_first_call_decides_for_the_process(fresh, monkeypatch):
    mallopt = with_mallopt(monkeypatch, FakeMallopt())
    first = configure_allocator("cpu")
    assert configure_allocator("cpu") == first and configure_allocator("cuda") == first
    assert mallopt.calls == [MMAP, TRIM] and len(fresh()) == 1


PROGRAM = """
import resource, sys, torch
from caption.training.allocator import configure_allocator
tuned = None
if sys.argv[1] == "tuned":
    tuned = configure_allocator("cpu")
    configure_allocator("cpu")  # a second call changes nothing and logs nothing
projected, query = torch.ones(64, 1, 196, 512), torch.ones(64, 3, 1, 512)
faults = []
for step in range(20):  # beam search's attention map W_a a + W_h h: 64 images x 3 beams x 196 x 512 (77 MB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    hidden = projected + query
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del hidden
print(None if tuned is None else all(tuned.values()), *faults)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_memory_is_reused_without_page_faults():
    def faults_after_warm_up(mode: str) -> tuple[str, list[int], str]:
        out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True)
        tuned, *faults = out.stdout.split()
        return tuned, [int(count) for count in faults[5:]], out.stderr

    pages = 64 * 3 * 196 * 512 * 4 // 4096  # 18,816 pages of 4 KiB
    default_tuned, default_faults, _ = faults_after_warm_up("default")
    tuned, tuned_faults, log = faults_after_warm_up("tuned")
    assert default_tuned == "None" and min(default_faults) > pages // 2, "glibc's default maps fresh pages each step"
    # glibc places a block by its own rules, so a step now and then still takes fresh pages; most reuse old ones
    assert tuned == "True" and sum(tuned_faults) < sum(default_faults) / 2, (tuned_faults, default_faults)
    assert log.count("caption.training.allocator: freed memory kept for reuse") == 1, log


@pytest.mark.slow
@pytest.mark.parametrize("flag", [[], ["--keep_freed_memory", "true"]])
def test_the_lightning_commands_change_malloc_only_when_asked(fresh, monkeypatch, tmp_path, flag):
    mallopt = with_mallopt(monkeypatch, FakeMallopt())
    main(["validate", "--config", "shapes_soft", *flag, "--trainer.logger", "false",
          "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path / "run"),
          *tiny_args(tmp_path / "data", num_train=8, num_val=2, num_test=2)])
    assert mallopt.calls == ([MMAP, TRIM] if flag else [])
    assert len(fresh()) == (1 if flag else 0), "one line when asked, none otherwise"
