"""Numeric precision: fp32, or bf16 mixed precision where the hardware multiplies in bf16 (Lightning's spellings).

    "32-true"     every op in float32
    "bf16-mixed"  torch.autocast(bfloat16): the matrix products (the encoder's convolutions, every nn.Linear, the
                  context's bmm) in bf16; the weights, the optimizer and every op named below stay float32

What stays float32 under bf16 autocast, and why (docs/paper.md#precision):
    α_t, log α_t, H(α_t)      the softmax of eq. 5 (`caption.model.attention`): α sums to 1 and eq. 12's log α_{t,s_t}
                              and entropy are exact to fp32, not to bf16's 3 significant digits
    h_t, c_t                  the LSTM state (`Decoder.init_state`): bf16's rounding would compound over the steps
    log p(y_t)                the log-softmax of every loss (`token_log_likelihood`), of beam search and of sampling
    R_t, b_t                  the rewards (log-likelihoods; self-critical's CIDEr-D) and every baseline
The losses are built from these, so every loss and every logged term is float32.

The settings are these two or "auto", the default of every command and of `Captioner`: bf16-mixed where it pays and
keeps the results (docs/measurements.md#bf16-against-fp32), on a CPU with AMX or AVX-512 BF16 or a GPU of compute
capability 8.0 or more; 32-true elsewhere (`caption.io.device.default_precision`, which asks the machine).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # torch on first use: the commands' --help reads PRECISIONS without it
    import torch

Precision = Literal["32-true", "bf16-mixed"]
PrecisionSetting = Literal["auto", "32-true", "bf16-mixed"]  # auto: the default precision of the device
SETTINGS: tuple[PrecisionSetting, ...] = ("auto", "32-true", "bf16-mixed")
ALIASES = {"32": "32-true", "bf16": "bf16-mixed", "fp32": "32-true"}  # Lightning's short spellings, and ours


def checked_precision(value: str, *, key: str = "precision") -> PrecisionSetting:
    """A precision setting: one of SETTINGS or a short spelling ("32", "bf16"), else a ValueError naming `key`."""
    value = ALIASES.get(str(value), str(value))
    if value not in SETTINGS:
        raise ValueError(f"{key} must be one of {', '.join(SETTINGS)} (or 32, bf16), got {value!r}")
    return value  # type: ignore[return-value]


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in float32 if it is a float of fewer bits (bf16 under autocast); float64 stays float64."""
    return tensor.float() if tensor.is_floating_point() and tensor.element_size() < 4 else tensor


def autocast(device: torch.device | str, precision: Precision) -> contextlib.AbstractContextManager:
    """bf16-mixed: torch.autocast on the device's type, as Lightning's bf16-mixed runs a step; 32-true: nothing."""
    if precision == "32-true":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
