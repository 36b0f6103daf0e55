"""What the machine is asked (`caption.io.device`): the CPU's bf16 matrix units, read from its flags, and the
precision "auto" resolves to with them."""

import pytest

from caption.io import device as devices
from caption.io.device import bf16_support, default_precision


@pytest.mark.parametrize(("flags", "support"), [({"avx2"}, "none"), ({"avx512f", "avx512_bf16"}, "AVX-512 BF16"),
                                                ({"avx512_bf16", "amx_bf16", "amx_tile"}, "AMX")])
def test_the_cpus_bf16_support_is_read_from_its_flags_and_bf16_is_the_default_only_with_it(
        monkeypatch: pytest.MonkeyPatch, flags: set[str], support: str) -> None:
    monkeypatch.setattr(devices, "cpu_flags", lambda: flags)
    assert bf16_support("cpu") == support
    assert default_precision("cpu") == ("32-true" if support == "none" else "bf16-mixed")
