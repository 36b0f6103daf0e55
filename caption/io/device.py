"""What the hardware a run uses has, asked of the machine: bf16 matrix units, and the memory new tensors can take.

    bf16_support(device)      CPU "AMX", "AVX-512 BF16" (Linux's /proc/cpuinfo flags) or "none"; CUDA "sm_XY" from
                              compute capability 8.0, or "none"
    default_precision(device) what the precision "auto" runs in there: bf16-mixed where the hardware multiplies bf16
                              matrices (it pays and keeps the results: docs/measurements.md#bf16-against-fp32), else
                              32-true; `resolved_precision` the setting "auto" on a device or a Trainer's accelerator
    free_memory(device)       a GPU's free memory and what PyTorch's cache holds unused; the CPU's MemAvailable
"""

from pathlib import Path
from typing import Literal

import torch


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def bf16_support(device: torch.device | str) -> str:
    """What multiplies bf16 matrices on `device`: CPU "AMX", "AVX-512 BF16" or "none" (emulated, slower than fp32);
    CUDA "sm_XY" with bf16 tensor cores, or "none"."""
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}" if major >= 8 else "none"
    if device.type != "cpu":
        return "none"
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX-512 BF16" if "avx512_bf16" in flags else "none"


def default_precision(device: torch.device | str) -> Literal["32-true", "bf16-mixed"]:
    """bf16-mixed where the hardware has bf16 matrix units, else 32-true."""
    return "32-true" if bf16_support(device) == "none" else "bf16-mixed"


def resolved_precision(setting: str | None, device: torch.device | str | None) -> str:
    """The precision `setting` runs in on `device` (a torch device, or a Trainer's accelerator: "cpu", "gpu", "cuda",
    "mps", "auto" or None): "auto" or unset is `default_precision` there ("auto": the GPU if there is one), any other
    setting stays as it is. The one place "auto" is resolved, for every command and `Captioner`."""
    if setting not in (None, "auto"):
        return setting
    if not isinstance(device, torch.device):
        device = {"gpu": "cuda", None: "auto"}.get(device, device)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            device = torch.device(device)
        except RuntimeError:  # an accelerator torch has no device for: no bf16 units asked of it
            return "32-true"
    return default_precision(device)


def free_memory(device: torch.device) -> int | None:
    """Bytes that new tensors on `device` can take: a GPU's free memory and what PyTorch's cache holds unused; the
    CPU's available memory (Linux's MemAvailable); None where it cannot be asked."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                fields = dict(line.split(":", 1) for line in meminfo if ":" in line)
            return int(fields["MemAvailable"].split()[0]) * 1024  # in kB
        except (OSError, KeyError, ValueError):
            return None
    return None
