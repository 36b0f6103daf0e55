"""Model folders on the Hugging Face Hub: a repository id ("owner/name") downloaded into huggingface_hub's cache, and
a folder uploaded, both through `huggingface_hub` (the optional extra `hub`:
`caption.io.install.install_line`).

    folder = pretrained_folder("owner/name", revision="v1")   # the cache's snapshot; a local folder is itself
    folder = pretrained_folder("owner/name@v1")               # the same: a revision pinned in the name
    api = check_login("owner/name")                             # the package, the id and the login, before any work
    url = upload_model_folder(Path("exports/shapes_soft"), "owner/name", api=api)

Downloads go through `huggingface_hub.snapshot_download`, so its cache (`HF_HUB_CACHE`), offline mode
(`HF_HUB_OFFLINE=1`: the cached snapshot of the revision, no network) and revision pinning (a branch, tag or commit)
apply as for any Hub model. Only the model folder's three files are fetched or sent. Every failure (the package
missing, no login, no network, no such repository or revision) is one `CaptionError` naming the repository. Every
command that names a model takes a Hub id too, through `caption.io.checkpoints.local_model`.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from pathlib import Path
from typing import Any

from caption.errors import CaptionError, CheckpointError, ConfigError
from caption.io.install import install_line
from caption.io.model_folder import CARD, CONFIG, LIBRARY, TRAINING_CONFIG, WEIGHTS, is_model_folder

FILES = [WEIGHTS, CONFIG, CARD, TRAINING_CONFIG]  # the last only when the run saved its config
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")  # owner/name, as the Hub spells repository ids
REVISION = re.compile(r"[\w.-]+(?:/[\w.-]+)*")  # a branch, tag or commit (refs/pr/1 too)
# what only a local path ends in: the files a model is saved as, and configs
FILE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".json", ".yaml", ".yml")
OUTPUT_FOLDERS = ("runs", "exports")  # the folders the commands write runs and model folders into, by default


def is_repo_id(name: str) -> bool:
    """Whether `name` is spelled as a Hub model id, owner/name, and not as a local path (`looks_local`)."""
    return REPO_ID.fullmatch(name) is not None and not looks_local(name)


def looks_local(name: str) -> bool:
    """Whether `name` can only mean a local path: it starts with ./, ../, / or ~, has more than one /, ends in a
    file's suffix (.ckpt, ...), starts with runs/ or exports/, or its first part exists here (a mistyped run folder
    of an existing folder, never a Hub id)."""
    first = name.split("/", 1)[0]
    return (name.startswith(("./", "../", "/", "~")) or name.count("/") > 1 or name.endswith(FILE_SUFFIXES)
            or first in OUTPUT_FOLDERS or (bool(first) and Path(first).exists()))


def nearest_path(name: str | os.PathLike) -> str:
    """The end of a message on missing path `name`: "; did you mean X?" with the entry of its folder whose name is
    closest to its own (difflib), or "" when that folder does not exist or holds nothing close."""
    path = Path(name)
    try:
        entries = [entry.name for entry in path.parent.iterdir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, entries, n=1, cutoff=0.6)
    return f"; did you mean {path.parent / close[0]}?" if close else ""


def check_pinned_local(name: str) -> None:
    """A ConfigError when `name` is an existing local path with @revision after it (a revision pins Hub models only)."""
    path, at, pinned = name.partition("@")
    if at and pinned and Path(path).exists():
        raise ConfigError(f"{name}: {path} exists locally, and @{pinned} pins a version of Hugging Face Hub models "
                          f"only (a local path wins over a Hub id of its spelling): name it without @{pinned}")


def hub_reference(name: str) -> tuple[str, str | None] | None:
    """(repository id, revision or None) of `name` spelled owner/name or owner/name@revision; None if it is not."""
    repo_id, at, revision = name.partition("@")
    if not is_repo_id(repo_id) or (at and REVISION.fullmatch(revision) is None):
        return None
    return repo_id, revision or None


def hub(why: str, error: type[CaptionError] = CaptionError) -> Any:
    """The `huggingface_hub` module, or an `error` saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise error(f"{why} needs huggingface_hub, which is not installed: {install_line(extra='hub')}") from None
    return huggingface_hub


def pretrained_folder(name: str | os.PathLike, *, revision: str | None = None) -> Path:
    """The model folder `name` stands for: a local folder of `caption export`, or the snapshot of Hub repository
    owner/name at `revision` (default: main, or the one of owner/name@revision) in huggingface_hub's cache,
    downloaded there first if needed."""
    path = Path(name)
    if path.exists():
        if revision is not None:
            raise ConfigError(f"revision={revision!r} pins a version of a Hub repository, but {name} is a local path")
        if not is_model_folder(path):
            what = "a file" if path.is_file() else f"a folder without {WEIGHTS} or {CONFIG}"
            raise CheckpointError(f"{name}: {what}, not a model folder of `caption export` (for a checkpoint or a run "
                                  "folder: Captioner.from_checkpoint)")
        return path
    check_pinned_local(str(name))
    reference = hub_reference(str(name))
    if reference is None:
        raise CheckpointError(f"{name}: no such model folder, and not a Hugging Face Hub model id (owner/name)"
                              f"{nearest_path(name)}")
    repo_id, pinned = reference
    if pinned is not None and revision is not None and pinned != revision:
        raise ConfigError(f"{name} pins revision {pinned}, but revision={revision!r} is given too: give one")
    return download_model_folder(repo_id, revision=revision or pinned)


def download_model_folder(repo_id: str, *, revision: str | None) -> Path:
    """The snapshot of `repo_id` at `revision` in huggingface_hub's cache (`snapshot_download`), checked to be a model
    folder."""
    where = f"{repo_id}{'' if revision is None else f' (revision {revision})'}"
    huggingface_hub = hub(f"{where}: there is no such local path, and loading it from the Hugging Face Hub",
                          error=CheckpointError)
    errors = hub_errors()
    try:
        folder = Path(huggingface_hub.snapshot_download(repo_id, revision=revision, allow_patterns=FILES,
                                                        library_name=LIBRARY))
    except errors.RevisionNotFoundError:
        raise CheckpointError(f"{where}: the Hugging Face Hub repository has no such revision (a branch, tag or "
                              "commit)") from None
    except errors.RepositoryNotFoundError:
        raise CheckpointError(f"{where}: no such model on the Hugging Face Hub (or it is private or gated: log in "
                              "with `hf auth login`); a local folder of this name does not exist either") from None
    except errors.LocalEntryNotFoundError:
        raise CheckpointError(f"{where}: not in the Hugging Face cache ({hub_cache()}) and the Hub "
                              f"cannot be reached{offline_note()}: download it once with a network, "
                              "or give a local model folder (there is no local path of this name)") from None
    except failures() as error:
        raise CheckpointError(f"{where}: cannot be downloaded from the Hugging Face Hub ({one_line(error)})") from None
    missing = [name for name in (WEIGHTS, CONFIG) if not (folder / name).is_file()]
    if missing and importlib.import_module("huggingface_hub.constants").HF_HUB_OFFLINE:
        pinned = "" if revision is None else f" --revision {revision}"
        raise CheckpointError(f"{where}: the copy in the Hugging Face cache ({folder}) is incomplete (no "
                              f"{' or '.join(missing)}) and HF_HUB_OFFLINE is set: download it again with a network "
                              f"(`hf download {repo_id}{pinned}` with HF_HUB_OFFLINE unset)")
    if missing:
        raise CheckpointError(f"{where}: the Hub repository holds no {' or '.join(missing)}: not a model folder of "
                              "`caption export`")
    return folder


def check_login(repo_id: str, *, what: str | None = None) -> Any:
    """The Hub's API client for uploading to `repo_id`, once a token is there (`hf auth login` or HF_TOKEN); else a
    CaptionError saying how to log in, that starts with `what` (default: --push and the id)."""
    what = what or f"--push {repo_id}"
    huggingface_hub = hub(what)
    if not is_repo_id(repo_id):
        raise ConfigError(f"{what}: not a Hugging Face Hub model id (owner/name)")
    get_token = getattr(huggingface_hub, "get_token", None) or huggingface_hub.HfFolder.get_token
    token = get_token()
    if not token:
        raise CaptionError(f"{what}: not logged in to the Hugging Face Hub: run `hf auth login` (or set "
                           "HF_TOKEN), then push again")
    return huggingface_hub.HfApi(token=token)


def upload_model_folder(folder: Path, repo_id: str, *, api: Any, private: bool = False, what: str | None = None,
                        kept: bool = True) -> str:
    """Upload the model folder's files to the Hub model repository `repo_id` (created if needed); the commit's URL.
    A failure is a CaptionError that starts with `what` (default: --push and the id) and, when the folder is `kept`,
    says it is complete there."""
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                                   allow_patterns=FILES, commit_message=f"{LIBRARY}: caption export")
    except failures() as error:  # offline, no network, a refused token, a repository of someone else: one line
        again = f"the model folder is complete in {folder}: push it again later" if kept else "push it again later"
        raise CaptionError(f"{what or f'--push {repo_id}'}: the upload failed ({one_line(error)}{offline_note()}); "
                           f"{again}") from None
    return str(getattr(commit, "commit_url", commit))


def failures() -> tuple[type[BaseException], ...]:
    """What a call to the Hub may raise besides its named errors: HTTP and connection errors (OSError, as
    huggingface_hub's own and requests' are; httpx's, which huggingface_hub 1.0 and later use, are not), bad ids."""
    try:
        from httpx import HTTPError
    except ImportError:
        return OSError, ValueError, RuntimeError
    return OSError, ValueError, RuntimeError, HTTPError


def hub_errors() -> Any:
    """The module with huggingface_hub's exceptions (`errors` since 0.23, `utils` before)."""
    try:
        return importlib.import_module("huggingface_hub.errors")
    except ImportError:
        return importlib.import_module("huggingface_hub.utils")


def hub_cache() -> str:
    return str(importlib.import_module("huggingface_hub.constants").HF_HUB_CACHE)


def offline_note() -> str:
    return "; HF_HUB_OFFLINE is set" if importlib.import_module("huggingface_hub.constants").HF_HUB_OFFLINE else ""


def one_line(error: BaseException) -> str:
    """An error of a third-party library as `Class: its first line`."""
    text = str(error).strip().splitlines()
    return f"{error.__class__.__name__}: {text[0]}" if text else error.__class__.__name__
