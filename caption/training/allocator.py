"""Keep freed CPU memory in the process for reuse, instead of handing it back to the kernel (glibc): opt-in.

By default glibc serves big blocks with fresh pages and hands freed memory back to the kernel, so the big temporaries
of every step (the attention map W_a a_i + W_h h_{t-1} is B·k·L·A floats) are page-faulted and zeroed again; raising
M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (one `mallopt` call each, each checked) keeps them, and the process its peak
memory. malloc is process-wide, so nothing in the library calls this: `caption fit --keep_freed_memory true` (also
validate, test, predict) or your own `configure_allocator(device_type)` asks for it, and it acts only on the CPU
under glibc; the first call decides for the process, in one log line. Why, and what it gains:
docs/measurements.md#speed-input-inference-start-up-memory.
"""

import ctypes
import platform
from collections.abc import Callable

from lightning.pytorch.utilities import rank_zero_info

# knob -> (mallopt parameter from glibc's malloc.h, value, the value as the log line says it)
KNOBS: dict[str, tuple[int, int, str]] = {
    "M_MMAP_THRESHOLD": (-3, 1 << 30, "1 GiB"),  # blocks under 1 GiB come from the heap, where freed blocks are reused
    "M_TRIM_THRESHOLD": (-1, 2**31 - 1, "2 GiB"),  # never shrink the heap
}

_configured: dict[str, bool] | None = None  # the first call's result: malloc is set once per process


def configure_allocator(device_type: str) -> dict[str, bool]:
    """Make glibc keep freed memory for reuse when this process computes on the CPU, once per process.

    Args:
        device_type: the device the process computes on, as `torch.device.type` names it ("cpu", "cuda", ...).

    Returns:
        {knob name: whether glibc accepted it}, e.g. {"M_MMAP_THRESHOLD": True, "M_TRIM_THRESHOLD": True};
        empty when the knobs were not tried (not a CPU run, not glibc).
    """
    global _configured
    if _configured is None:
        _configured = _configure(device_type)
    return _configured


def _configure(device_type: str) -> dict[str, bool]:
    skipped = skip_reason(device_type)
    mallopt = None if skipped else glibc_mallopt()
    if mallopt is None:
        rank_zero_info("caption.training.allocator: malloc left at glibc's defaults "
                       f"({skipped or 'no mallopt in libc.so.6'})")
        return {}
    results = {name: bool(mallopt(parameter, value)) for name, (parameter, value, _) in KNOBS.items()}
    rank_zero_info(f"caption.training.allocator: {knobs_line(results)}")
    return results


def skip_reason(device_type: str) -> str | None:
    """Why malloc is left as it is (not a CPU run, not glibc), or None to set the knobs."""
    if device_type != "cpu":
        return f"the run computes on {device_type}, not the CPU"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "the C library is not glibc"
    return None


def glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's `int mallopt(int param, int value)` (1 on success, 0 on error), or None where it cannot be loaded."""
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


def knobs_line(results: dict[str, bool]) -> str:
    """The log line's text: which knobs are set and which glibc refused."""
    accepted = [f"{name}={KNOBS[name][2]}" for name, ok in results.items() if ok]
    refused = [f"{name}={KNOBS[name][2]}" for name, ok in results.items() if not ok]
    parts = []
    if accepted:
        parts.append(f"freed memory kept for reuse ({', '.join(accepted)} set; the process keeps its peak memory)")
    if refused:
        parts.append(f"glibc's mallopt refused {', '.join(refused)}")
    return "; ".join(parts)
