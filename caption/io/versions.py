"""What the project runs on: the versions and builds of torch, torchvision and Lightning, and whether torch and
torchvision work together. torchvision's version is read from its files, never by importing it: a torchvision built
for another torch is what fails to import.

    version_lines()            `caption --version` after the project's line: torch (with its build), torchvision,
                               lightning and the precision "auto" chooses here (imports torch, not torchvision)
    torchvision_mismatch(error) whether `error` is torchvision failing on a torch it was not built for (its operators
                               missing, as a CUDA torchvision beside a CPU torch leaves them)
    mismatch_message()         one line naming both builds and how to install a pair from one index
    mismatched_builds_named()  a mismatch raised inside it becomes an `InstallError` with that line
"""

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata, util
from pathlib import Path

from caption.errors import InstallError

PYTORCH_INDEX = "https://download.pytorch.org/whl"  # pytorch.org's index: one folder per build (cpu, cu126, rocm6.4)
# what torchvision says when its compiled operators do not load into this torch
MISMATCH_SIGNS = (re.compile(r"operator torchvision::\w+ does not exist"),
                  re.compile(r"PyTorch and torchvision were compiled with different CUDA"))
VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def installed_version(distribution: str) -> str | None:
    """The version pip installed of `distribution`, None if it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def torchvision_version() -> str | None:
    """torchvision's version with its build tag (0.29.1+cu130), read from its version.py as text without importing
    it; its package metadata's version (no tag) where that file cannot be read; None if it is not installed."""
    spec = util.find_spec("torchvision") if "torchvision" not in sys.modules else None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    module = sys.modules.get("torchvision")
    if module is not None and getattr(module, "__file__", None):
        locations = [str(Path(module.__file__).parent)]
    for location in locations:
        try:
            found = VERSION_LINE.search((Path(location) / "version.py").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        if found:
            return found.group(1)
    return installed_version("torchvision")


def tagged_build(version: str) -> str | None:
    """The build a version's local tag names: "+cpu" a CPU build, "+cu126" a CUDA 12.6 build, "+rocm6.4" a ROCm 6.4
    build; None without a tag (PyPI's own wheels)."""
    tag = version.partition("+")[2]
    if tag == "cpu":
        return "a CPU build"
    if cuda := re.fullmatch(r"cu(\d+)(\d)", tag):
        return f"a CUDA {cuda.group(1)}.{cuda.group(2)} build"
    if rocm := re.fullmatch(r"rocm([\d.]+)", tag):
        return f"a ROCm {rocm.group(1)} build"
    return None


def torch_build() -> str:
    """The build of the installed torch, as torch reports it: "a CUDA 13.0 build", "a ROCm 6.4 build", "a CPU
    build" (imports torch)."""
    import torch

    if torch.version.cuda:
        return f"a CUDA {torch.version.cuda} build"
    if torch.version.hip:
        return f"a ROCm {torch.version.hip} build"
    return "a CPU build"


def index_folder() -> str:
    """pytorch.org's index of the installed torch's build: .../whl/cpu, .../whl/cu130, .../whl/rocm6.4."""
    import torch

    tag = str(torch.__version__).partition("+")[2]
    if not tag and torch.version.cuda:
        tag = "cu" + torch.version.cuda.replace(".", "")
    return f"{PYTORCH_INDEX}/{tag or 'cpu'}"


def torchvision_release_of(torch_version: str) -> str | None:
    """The torchvision release made with torch `torch_version` (torch 2.N: torchvision 0.(N+15)); None before 2.0."""
    found = re.match(r"2\.(\d+)", torch_version)
    return f"0.{int(found.group(1)) + 15}" if found else None


def torchvision_mismatch(error: BaseException) -> bool:
    """Whether `error` is torchvision failing to load its operators into this torch (the two from different builds or
    releases)."""
    return isinstance(error, RuntimeError) and any(sign.search(str(error)) for sign in MISMATCH_SIGNS)


def mismatch_message() -> str:
    """One line: torchvision's version and build, torch's, what does not match, and the install line of a matching
    pair from the index of torch's build."""
    import torch

    torch_version = str(torch.__version__)
    vision = torchvision_version() or "(version unknown)"
    vision_build = tagged_build(vision)
    release = torchvision_release_of(torch_version)
    made_for = (f", and torchvision {release} is the release of torch {torch_version.partition('+')[0]}"
                if release is not None and not vision.startswith(release + ".") else "")
    shown_build = f" ({vision_build})" if vision_build else ""
    return (f"torchvision {vision}{shown_build} does not match torch {torch_version} ({torch_build()}){made_for}: "
            f"install both from one index, e.g. pip install --force-reinstall torch=={torch_version.partition('+')[0]}"
            f" torchvision --index-url {index_folder()} (pytorch.org lists the other builds)")


@contextmanager
def mismatched_builds_named() -> Iterator[None]:
    """Inside it, torchvision failing on a torch of another build or release is an `InstallError` of one line
    (`mismatch_message`) instead of its traceback."""
    try:
        yield
    except RuntimeError as error:
        if not torchvision_mismatch(error):
            raise
        raise InstallError(mismatch_message()) from None


def version_lines() -> list[str]:
    """What `caption --version` prints after the project's version: torch with its build; torchvision (read, not
    imported); lightning; the precision "auto" runs in on the device a run would take here (the GPU if there is
    one)."""
    import torch

    from caption.io.device import bf16_support, resolved_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    units = bf16_support(device)
    where = f"{device}, bf16 units: {units}" if units != "none" else f"{device}, no bf16 units"
    vision = torchvision_version()
    vision_build = tagged_build(vision or "")
    return [
        f"torch {torch.__version__} ({torch_build()})",
        f"torchvision {vision or 'not installed'}" + (f" ({vision_build})" if vision_build else ""),
        f"lightning {installed_version('lightning') or 'not installed'}",
        f"precision auto: {resolved_precision('auto', device)} here ({where})",
    ]
