"""Loading checkpoints safely: always `weights_only=True`, and a clear message naming the file.

A Lightning checkpoint is a pickle; `torch.load(weights_only=True)` rebuilds only tensors and plain containers, so a
file whose pickle would import or call anything else is refused instead of executed. Every reader goes through
`read_checkpoint`: the CLI's Trainers through `SafeCheckpointIO`, inference through its loader of a trained
model (after `download_checkpoint(url, sha256=...)` for a published one). A model
folder of `caption export` (safetensors weights and a JSON config, `caption.io.model_folder`) is read into the same
dict, without unpickling anything, so every reader takes one where it takes a checkpoint. torch does not check the
CRC-32 checksums its zip format stores with every record, so a flipped bit would load as a changed weight without a
word: `zip_damage` checks them first (zipfile's testzip, about half the time of the load itself). The class
paths a checkpoint names are checked by `caption.io.class_paths` before any of it is used, and `SafeCheckpointIO`
writes each checkpoint atomically (`caption.io.outputs.write_atomically`), so a full disk or a kill leaves the
previous file whole. A model is named by a checkpoint file, a run folder, a model folder, or a Hugging Face Hub model
id (owner/name[@revision], when no such local path exists: `local_model`, which `find_checkpoint` asks first).
What you see for each failure: docs/reliability.md.
"""

import hashlib
import importlib.util
import io
import os
import pickle
import re
import warnings
import zipfile
import zlib
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.parse import urlparse

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_warn

from caption.config.keys import dotted, non_finite_message
from caption.errors import CaptionWarning, CheckpointError
from caption.io.class_paths import check_checkpoint_classes, short
from caption.io.hub import check_pinned_local, hub_reference, nearest_path, pretrained_folder
from caption.io.model_folder import (
    CONFIG,
    WEIGHTS,
    is_model_folder,
    left_by_a_stopped_export,
    non_finite_weights,
    read_model_folder,
)
from caption.io.outputs import write_atomically

PathLike = str | os.PathLike  # a checkpoint's path, as CheckpointIO's methods take it

PROJECT = "caption"  # the package whose class paths a checkpoint of another version may name in modules gone since
GROUPS = ("encoder", "decoder", "attention")  # model settings a checkpoint of `caption fit` holds as mappings


def zip_damage(path: PathLike) -> str | None:
    """What is wrong with the zip records of a file torch.save wrote (a record whose bytes no longer match their CRC-32
    checksum, or a record that cannot be read), or None when every record is whole. A file that is no zip at all
    (cut before its directory, or torch's legacy format) is left to torch.load to judge."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # reads every record and compares its CRC-32 with the stored one
            # torch's reader reads a record its directory marks as a folder (MS-DOS attribute 0x10) as no bytes at
            # all, leaving the tensor's memory as it was: torch.save marks none so
            folder = next((info.filename for info in archive.infolist() if info.external_attr & 0x10), None)
    except zipfile.BadZipFile as error:
        try:
            directory = zipfile.is_zipfile(path)
        except (zipfile.BadZipFile, OSError):
            directory = True  # its end record is there, but it is damaged
        return f"its zip records cannot be read ({error})" if directory else None
    except PermissionError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError, NotImplementedError, zlib.error) as error:
        return f"its zip records cannot be read ({error.__class__.__name__}: {error})"
    if damaged is None and folder is not None:
        return f"damaged: its record {folder} is marked as a folder, which torch.save never writes"
    if damaged is not None:
        return (f"damaged: the bytes of its record {damaged} no longer match the CRC-32 checksum written with them (a "
                "flipped bit on a disk or in a copy), so its weights cannot be trusted; use another copy")
    return None


def read_checkpoint(path: PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """torch.load(path, weights_only=True) once its zip checksums are verified, with errors that name the file and
    say what to do; for a folder, the model folder of `caption export` it holds
    (`caption.io.model_folder.read_model_folder`), as the same dict. The classes it names are checked before any of
    it is used."""
    if Path(path).is_dir():
        checkpoint, origin = read_model_folder(path, map_location=map_location), str(Path(path) / CONFIG)
    else:
        checkpoint, origin = loaded_checkpoint(path, map_location=map_location), f"checkpoint {path}"
        settings = {key: checkpoint.get(key) for key in ("hyper_parameters", "datamodule_hyper_parameters")}
        non_finite = non_finite_message(str(path), settings)
        if non_finite is None and isinstance(checkpoint.get("state_dict"), dict):
            non_finite = non_finite_weights(checkpoint["state_dict"])
            non_finite = None if non_finite is None else f"{path}: {non_finite}"
        if non_finite is not None:
            raise CheckpointError(non_finite)
    check_checkpoint_classes(checkpoint, origin=origin)
    return checkpoint


def loaded_checkpoint(path: PathLike, *, map_location: Any) -> dict[str, Any]:
    """Checkpoint file `path` as torch.load(weights_only=True) reads it once its zip checksums are verified, if it is
    one of this project's (hyperparameters with a vocabulary); else a CheckpointError naming it and what to do."""
    if not Path(path).is_file():
        raise CheckpointError(f"{path}: no such checkpoint file{nearest_path(path)}")
    try:
        damage = zip_damage(path)
    except PermissionError as error:
        raise CheckpointError(f"{path}: cannot read it ({error.strerror}): check the file's permissions") from None
    if damage is not None:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint: {damage}")
    try:
        with warnings.catch_warnings():  # torch's note on a pickle of another protocol: the message below says more
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"unsupported global[^\n]*", str(error), flags=re.IGNORECASE)
        if found is None:  # not a pickle that asks for code: random bytes, another format
            raise CheckpointError(f"{path}: not a PyTorch checkpoint (corrupt, or another kind of file)") from None
        raise CheckpointError(
            f"{path}: refused to load: its pickle asks for more than tensors and plain values "
            f"({found.group(0)}), so loading it could run code. Use a checkpoint written by `caption fit`; "
            "never load this file with weights_only=False unless you made it yourself"
        ) from None
    except PermissionError as error:
        raise CheckpointError(f"{path}: cannot read it ({error.strerror}): check the file's permissions") from None
    except (EOFError, KeyError, RuntimeError, IndexError, ValueError, OSError) as error:  # bytes that are no checkpoint
        # a file cut short (a full disk, an interrupted copy) fails in the zip reader with a bare OSError (EINVAL)
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): "
                              f"{error.__class__.__name__}: {' '.join(str(error).split())}") from None
    hyperparameters = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hyperparameters, dict) or "vocabulary" not in hyperparameters:
        raise CheckpointError(
            f"{path}: not a checkpoint of this project (no mapping of hyperparameters with a vocabulary): it was not "
            "written by `caption fit`, or by an old version; retrain or pick another checkpoint"
        )
    older = older_format(checkpoint)
    if older is not None:
        raise CheckpointError(f"{path}: {older}; retrain with `caption fit` or pick another checkpoint")
    return checkpoint


def older_format(checkpoint: dict[str, Any]) -> str | None:
    """Why `checkpoint` is not read, when its layout is not this release's, else None: model settings that are not in
    their groups (`attention: soft` where a checkpoint of `caption fit` holds `attention: {kind: soft, ...}`), or a data
    source of the project (`caption.…`, the one class of the project a checkpoint names) in a module this release does
    not have."""
    hyperparameters = checkpoint["hyper_parameters"]
    flat = next((key for key in GROUPS if key in hyperparameters and not isinstance(hyperparameters[key], dict)), None)
    if flat is not None:
        return (f"written by a format before this release (its model settings are not in groups: "
                f"hyper_parameters.{flat} is {short(hyperparameters[flat])}), which is not read")
    data = checkpoint.get("datamodule_hyper_parameters")
    source = data.get("source") if isinstance(data, dict) else None
    class_path = source.get("class_path") if isinstance(source, dict) else source
    if isinstance(class_path, str) and class_path.startswith(f"{PROJECT}.") and not project_module_exists(class_path):
        return (f"written by another version of caption (it names {class_path}, whose module this release does not "
                "have), whose format is not read")
    return None


def project_module_exists(class_path: str) -> bool:
    """Whether the module of `class_path` (one of the project's) is one this release has; nothing outside the
    project is looked up."""
    try:
        return importlib.util.find_spec(class_path.rpartition(".")[0]) is not None
    except (ImportError, ValueError):  # a package on the way that does not exist
        return False


def first_readable(paths: Iterable[Path], *, where: str) -> tuple[Path, dict[str, Any]] | None:
    """The first of `paths` that `read_checkpoint` reads, with what it read; each one before it that cannot be read
    (truncated, corrupt, foreign) is skipped with a warning naming it and why. None if `paths` is empty; if none can
    be read, a CheckpointError that starts with `where` and gives each file's reason."""
    problems = []
    for path in paths:
        try:
            found = path, read_checkpoint(path)
        except CheckpointError as error:
            problems.append(str(error))
            continue
        for problem in problems:
            rank_zero_warn(f"skipping an unreadable checkpoint: {problem}", category=CaptionWarning)
        return found
    if problems:
        raise CheckpointError(f"{where}: no checkpoint there can be read: {'; '.join(problems)}")
    return None


def newest_first(paths: Iterable[Path]) -> list[Path]:
    """`paths`, the most recently modified first."""
    return sorted(paths, key=lambda path: path.stat().st_mtime, reverse=True)


def local_model(path: Path) -> Path:
    """`path` itself; or, when no such local path exists and it is spelled as a Hugging Face Hub model id
    (owner/name or owner/name@revision), its model folder's snapshot in huggingface_hub's cache
    (`caption.io.hub.pretrained_folder`, downloaded first if needed). A name that can only be a local path (./, runs/,
    a file's suffix, more than one /, an existing first part: `caption.io.hub.looks_local`) is never looked up on the
    Hub. Every command names a model through this rule."""
    if path.exists():
        return path
    check_pinned_local(str(path))
    if hub_reference(str(path)) is None:
        return path
    return pretrained_folder(str(path))


def find_checkpoint(path: Path) -> Path:
    """A checkpoint file itself, a model folder of `caption export` itself (a Hub model id: its snapshot,
    `local_model`), or a run folder's newest readable best-*.ckpt (else last.ckpt, else any); unreadable ones are
    skipped with a warning naming them. Every command and `Captioner.from_checkpoint` take a run folder for a
    checkpoint through this one choice."""
    path = local_model(path)
    if path.is_file() or is_model_folder(path):
        return path
    return run_folder_checkpoint(path)[0]


def found_checkpoint(path: Path) -> tuple[Path, dict[str, Any]]:
    """The checkpoint `find_checkpoint` picks for `path`, with what `read_checkpoint` read of it: the file is read once
    (`find_checkpoint`, then `read_checkpoint`, would read a run folder's twice)."""
    path = local_model(path)
    if path.is_file() or is_model_folder(path):
        return path, read_checkpoint(path)
    return run_folder_checkpoint(path)


def run_folder_checkpoint(path: Path) -> tuple[Path, dict[str, Any]]:
    """`find_checkpoint`'s choice in run folder `path`, with what it read there."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint file or run folder{nearest_path(path)}")
    checkpoints = list(path.rglob("*.ckpt"))
    kinds = [newest_first({p for p in checkpoints if p.match(kind)}) for kind in ("best-*.ckpt", "last.ckpt", "*.ckpt")]
    found = first_readable(dict.fromkeys(p for kind in kinds for p in kind), where=str(path))  # each file once
    if found is not None:
        return found
    if left_by_a_stopped_export(path):
        raise CheckpointError(f"{path}: an incomplete model folder of `caption export` (no {WEIGHTS} or {CONFIG}: "
                              "the export was stopped before it finished), not a run folder: export the model again "
                              f"(caption export --ckpt_path RUN --predictions.out {path})")
    raise CheckpointError(f"{path}: no checkpoint (*.ckpt) in this run folder; train with `caption fit` first")


def plain(value: Any) -> Any:
    """Sequences as lists, so that a YAML list and a stored tuple compare equal."""
    return list(value) if isinstance(value, (list, tuple)) else value


def check_model_settings(
    path: PathLike, checkpoint: dict[str, Any], given: dict[str, tuple[Any, str]], *, defining: Collection[str],
) -> None:
    """A CheckpointError in one line naming every setting of `given` ({dotted key: (value, where it was given)}) that
    would change the model checkpoint `path` was trained as (one of `defining`, the dotted keys of the settings that
    define its weights, which the caller passes in), with both values: such a setting can be neither applied to the
    trained weights nor silently dropped."""
    trained = dotted(checkpoint["hyper_parameters"])
    conflicts = [
        f"model.{key} is {plain(value)!r} {where} but {path} was trained with {plain(trained[key])!r}"
        for key, (value, where) in given.items()
        if key in defining and key in trained and plain(value) != plain(trained[key])
    ]
    if conflicts:
        raise CheckpointError(
            f"{'; '.join(conflicts)}: a trained model's settings cannot change. Leave them out, or use the config the "
            "checkpoint was trained with (its run saved it as config.yaml beside its logs)"
        )


def has_encoder(checkpoint: dict[str, Any]) -> bool:
    """Whether the checkpoint holds the encoder's weights (then the model need not load ImageNet's first)."""
    return any(key.startswith("encoder.") for key in checkpoint.get("state_dict", {}))


def sha256_of(path: PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_checkpoint(url: str, *, sha256: str | None) -> Path:
    """The checkpoint at `url`, downloaded once into $TORCH_HOME/hub/checkpoints (torch.hub's downloader) and
    kept only if its SHA-256 is `sha256`; a file already there is used if its hash matches."""
    if not sha256 or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise CheckpointError(f"{url}: give the checkpoint's expected SHA-256 (64 hex digits) to download it, "
                              f"got {sha256!r}")
    sha256 = sha256.lower()
    name = os.path.basename(urlparse(url).path) or "checkpoint.ckpt"
    path = Path(torch.hub.get_dir()) / "checkpoints" / name
    if path.is_file() and sha256_of(path) == sha256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # into a temporary file, moved to `path` only when the hash matches
        torch.hub.download_url_to_file(url, str(path), hash_prefix=sha256, progress=True)
    except RuntimeError as error:  # torch.hub: invalid hash value
        raise CheckpointError(f"{url}: refused: its SHA-256 is not {sha256} ({error}); "
                              "check the URL and the hash you were given") from None
    except (URLError, OSError) as error:
        raise CheckpointError(f"{url}: cannot download ({error}); download it yourself and pass the file") from None
    return path


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO, loading through `read_checkpoint` (weights_only=True whatever the caller asks) and
    saving local files atomically beside their target (Lightning's own save goes through the system's temporary
    folder, and a failed copy from there leaves a partial checkpoint under the real name)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's fsspec transaction
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomically(path, buffer.getbuffer(), what="checkpoint")

    def load_checkpoint(
        self, path: PathLike, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        return read_checkpoint(path, map_location=map_location or "cpu")
