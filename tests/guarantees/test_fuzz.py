"""A bounded, seeded fuzz pass over the files a user is handed: random byte flips, replaced bytes and cuts of a real
tiny checkpoint each end in a one-line CheckpointError or a load equal to the original's (never a traceback, never a
silently changed weight), and so do those of a model folder of `caption export` (its model.safetensors and
config.json; a safetensors header that lies about a weight's shape, offsets or type, a NaN or infinite value: one
line naming the file, with the folder's checksums and without); random mutations of the shipped shapes configs, of
their YAML tree and of their text, each parsed by `caption fit`'s own parser (no training) end in a one-line error or
a valid config, never a traceback, never an import of a module outside the project, Lightning, torch and torchvision,
never a file written."""

import contextlib
import copy
import json
import math
import random
import shutil
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from kit.planted import planted_modules
from safetensors.torch import load_file, save_file

from caption import Captioner
from caption.cli.lightning.commands import CaptionCLI
from caption.cli.lightning.parser import CaptionArgumentParser
from caption.config.packaged import NAMED_RUNS, packaged_configs
from caption.data.datamodule import CaptionDataModule
from caption.errors import CaptionError
from caption.io.checkpoints import read_checkpoint
from caption.io.class_paths import TRUSTED_PACKAGES
from caption.io.model_folder import CONFIG, WEIGHTS
from caption.training.module import CaptionModule

SEED = 0
CHECKPOINT_MUTATIONS = 600  # about 5 ms each on the tiny checkpoint
CONFIG_MUTATIONS = 120  # about 0.12 s each: a parse by the fit parser
PLANTED = [f"fuzz_planted_{k}" for k in range(3)]  # modules that write a marker when imported


def same(loaded: Any, original: Any) -> bool:
    """Whether what two checkpoint reads gave is equal, tensor by tensor (dtype, shape and every value)."""
    if isinstance(original, torch.Tensor):
        return (isinstance(loaded, torch.Tensor) and loaded.dtype == original.dtype
                and loaded.shape == original.shape and torch.equal(loaded, original))
    if isinstance(original, dict):
        return isinstance(loaded, dict) and loaded.keys() == original.keys() and all(
            same(loaded[key], original[key]) for key in original)
    if isinstance(original, (list, tuple)):
        return type(loaded) is type(original) and len(loaded) == len(original) and all(
            same(a, b) for a, b in zip(loaded, original))
    if isinstance(original, float) and math.isnan(original):
        return isinstance(loaded, float) and math.isnan(loaded)
    return loaded == original


def damaged(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """`data` with one bit flipped, one byte replaced, or cut short; and what was done."""
    kind, position = rng.choice(["flip", "byte", "cut"]), rng.randrange(len(data))
    if kind == "cut":
        return f"cut at {position}", data[:position]
    changed = bytearray(data)
    changed[position] = changed[position] ^ (1 << rng.randrange(8)) if kind == "flip" else rng.randrange(256)
    return f"{kind} at {position}", bytes(changed)


def test_a_damaged_checkpoint_is_refused_in_one_line_or_loads_as_it_was(tiny_runs, tmp_path):
    source = tiny_runs["soft"] / "checkpoints" / "last.ckpt"
    data, original = source.read_bytes(), read_checkpoint(source)
    path, rng, outcomes = tmp_path / "damaged.ckpt", random.Random(SEED), Counter()
    for _ in range(CHECKPOINT_MUTATIONS):
        what, mutated = damaged(data, rng)
        path.write_bytes(mutated)
        try:
            loaded = read_checkpoint(path)
        except CaptionError as error:
            message = str(error)
            assert str(path) in message and "\n" not in message, (what, message)
            outcomes["refused"] += 1
            continue
        assert same(loaded, original), f"{what}: loaded, but not as it was"
        outcomes["whole"] += 1  # a byte no reader looks at (a timestamp, a padding byte)
    assert outcomes["refused"] > CHECKPOINT_MUTATIONS // 2 and outcomes["whole"], outcomes


class ParserBuilt(Exception):
    """Raised by `ParserOnly` once the CLI has built its parser."""


class ParserOnly(CaptionCLI):
    """The CLI up to its parser: built, kept in `parser`, nothing parsed."""

    parser: CaptionArgumentParser

    def parse_arguments(self, parser: CaptionArgumentParser, args: object) -> None:
        ParserOnly.parser = parser
        raise ParserBuilt


def parse(parser: CaptionArgumentParser, args: list[str]) -> None:
    """`caption fit ARGS` parsed as the CLI parses it (`CaptionCLI.parse_arguments`, under its class-path rule)."""
    cli = object.__new__(CaptionCLI)  # the parser built once: the parse alone, the same code path
    with contextlib.ExitStack() as cli.command_scope:
        cli.parse_arguments(parser, args)


def replacement(rng: random.Random, planted: list[str]) -> Any:
    """A value a broken or hostile config may hold."""
    thing = f"{rng.choice(planted)}.Thing"
    loop: list = [thing]
    loop.append(loop)  # a YAML alias inside its own anchor
    return rng.choice([loop, {"class_path": thing, "init_args": {"loop": loop}},
        thing, {"class_path": thing}, {"class_path": thing, "init_args": {"x": 1}}, [thing], [{"class_path": thing}],
        "os.system", {"class_path": "os.system", "init_args": {"command": "true"}},
        {"class_path": "builtins.eval", "init_args": {"source": "1"}}, {"class_path": 5}, {"init_args": {"gamma": "x"}},
        {"class_path": "caption.training.module.CaptionModule"}, "torch.optim.lr_scheduler.StepLR",
        None, 0, -1, 1e308, 3.5, True, "", "x" * 5000, [], {}, {"a": {"b": [1, 2]}}, "/etc/passwd", "../../..", "[1, 2",
    ])


def nodes(tree: Any, where: tuple = (), inside: tuple[int, ...] = ()) -> list[tuple]:
    """The path (keys and indices) of every node under `tree` (a list inside itself: once)."""
    if id(tree) in inside:
        return [where]
    children = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    return [where, *(path for key, child in children for path in nodes(child, (*where, key), (*inside, id(tree))))]


def mutated_tree(tree: Any, rng: random.Random, planted: list[str]) -> Any:
    """`tree` with one to three nodes replaced, deleted, renamed, or given a sibling."""
    tree = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        paths = [path for path in nodes(tree) if path]
        if not paths:
            break
        path = rng.choice(paths)
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.6 or not isinstance(parent, dict):
            parent[path[-1]] = replacement(rng, planted)
        elif action < 0.75:
            del parent[path[-1]]
        elif action < 0.9:
            parent[f"{path[-1]}{rng.choice(['_', 's', '.class_path', '.init_args'])}"] = parent.pop(path[-1])
        else:
            parent[rng.choice(["class_path", "init_args", "imports", "__path__", "dict_kwargs"])] = replacement(
                rng, planted)
    return tree


def mutated_text(text: str, rng: random.Random) -> str:
    """`text` with one to four characters deleted or inserted, or cut short."""
    characters = list(text)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(len(characters) + 1)
        action = rng.random()
        if action < 0.4 and characters:
            del characters[min(position, len(characters) - 1)]
        elif action < 0.8:
            characters.insert(position, rng.choice(":-[]{}&*!|>'\"#%@` \n\tab.Z0"))
        else:
            characters = characters[:position]
    return "".join(characters)


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Path:
    """The marker file the planted modules (on the import path) create when imported; none may be."""
    with planted_modules(tmp_path, monkeypatch, PLANTED) as marker:
        yield marker


def test_a_mutated_config_is_one_line_or_valid_and_never_imports_or_writes(tmp_path, planted, monkeypatch):
    with pytest.raises(ParserBuilt):
        ParserOnly(CaptionModule, CaptionDataModule, parser_class=CaptionArgumentParser, args=["fit"],
                   auto_configure_optimizers=False)
    parser = ParserOnly.parser
    files = [packaged_configs()[fragment] for fragment in NAMED_RUNS["shapes_soft"]]
    work = tmp_path / "cwd"  # every relative path of the configs (runs/shapes ...) lands here, if anything is written
    work.mkdir()
    monkeypatch.chdir(work)
    parse(parser, ["fit", *(item for file in files for item in ("--config", str(file)))])  # the shipped ones: valid
    imported = {name.partition(".")[0] for name in sys.modules}
    rng, outcomes = random.Random(SEED), Counter()
    for index in range(CONFIG_MUTATIONS):
        chosen = rng.randrange(len(files))
        text = files[chosen].read_text(encoding="utf-8")
        mutated = (yaml.safe_dump(mutated_tree(yaml.safe_load(text), rng, PLANTED)) if rng.random() < 0.7
                   else mutated_text(text, rng))
        path = tmp_path / f"mutated-{index}.yaml"
        path.write_text(mutated, encoding="utf-8")
        configs = [str(path) if number == chosen else str(file) for number, file in enumerate(files)]
        try:
            parse(parser, ["fit", *(item for config in configs for item in ("--config", config))])
            outcomes["valid"] += 1
        except SystemExit as error:  # the parser's own error line
            line = str(error.code)
            assert line.startswith("caption: error:") and "\n" not in line, (path, mutated, line)
            outcomes["error line"] += 1
        except CaptionError as error:  # printed by `caption` as one line
            assert "\n" not in str(error), (path, mutated, str(error))
            outcomes["refused"] += 1
        assert not planted.exists() and not set(PLANTED) & set(sys.modules), (path, mutated)
        new = {name.partition(".")[0] for name in sys.modules} - imported
        assert new <= set(TRUSTED_PACKAGES), (path, mutated, new)
        assert not list(work.iterdir()), (path, mutated, "wrote", list(work.iterdir()))
    assert outcomes["valid"] and outcomes["error line"] and outcomes["refused"], outcomes


FOLDER_MUTATIONS = 300  # of model.safetensors and config.json together; about 10 ms each on the tiny export


def test_a_damaged_model_folder_is_refused_in_one_line_or_loads_as_it_was(exported, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(exported["soft"], folder)
    files = {name: (folder / name).read_bytes() for name in (WEIGHTS, CONFIG)}
    original, rng, outcomes = read_checkpoint(folder), random.Random(SEED), Counter()
    for _ in range(FOLDER_MUTATIONS):
        name = rng.choice(sorted(files))
        what, mutated = damaged(files[name], rng)
        (folder / name).write_bytes(mutated)
        try:
            loaded = read_checkpoint(folder)
        except CaptionError as error:
            message = str(error)
            assert str(folder) in message and "\n" not in message, (name, what, message)
            outcomes[f"{name} refused"] += 1
        else:
            assert same(loaded, original), f"{name}, {what}: loaded, but not as it was"
            outcomes["whole"] += 1  # JSON's whitespace: config.json's checksum is over its settings
        (folder / name).write_bytes(files[name])
    assert outcomes[f"{WEIGHTS} refused"] > FOLDER_MUTATIONS // 3 and outcomes[f"{CONFIG} refused"], outcomes


def lying_header(data: bytes, lie: str) -> bytes:
    """model.safetensors whose JSON header says something else of decoder.init_h.weight than its bytes hold."""
    size, = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    entry = header["decoder.init_h.weight"]
    if lie == "a shape of as many values":
        entry["shape"] = entry["shape"][::-1]
    elif lie == "a larger shape":
        entry["shape"] = [entry["shape"][0] * 1000, entry["shape"][1]]
    elif lie == "offsets past the end":
        entry["data_offsets"] = [entry["data_offsets"][0], len(data) * 10]
    elif lie == "overlapping offsets":
        entry["data_offsets"] = [0, entry["data_offsets"][1] - entry["data_offsets"][0]]
    else:  # a dtype of another width
        entry["dtype"] = "F64"
    text = json.dumps(header).encode("utf-8")
    return struct.pack("<Q", len(text)) + text + data[8 + size:]


LIES = ["a shape of as many values", "a larger shape", "offsets past the end", "overlapping offsets",
        "a dtype of another width"]


@pytest.mark.parametrize("checksums", [True, False], ids=["with checksums", "exported before checksums"])
@pytest.mark.parametrize("lie", LIES)
def test_a_safetensors_header_that_lies_is_one_line(exported, tmp_path, lie, checksums):
    folder = tmp_path / "model"
    shutil.copytree(exported["soft"], folder)
    (folder / WEIGHTS).write_bytes(lying_header((folder / WEIGHTS).read_bytes(), lie))
    if not checksums:  # safetensors' own checks and the shapes against the settings, without the SHA-256 to catch it
        config = json.loads((folder / CONFIG).read_text())
        config.pop("sha256")
        (folder / CONFIG).write_text(json.dumps(config))
    with pytest.raises(CaptionError) as raised:
        Captioner.from_pretrained(folder, device="cpu")
    message = str(raised.value)
    assert str(folder) in message and "\n" not in message, message


NON_FINITE = {"a NaN weight": (WEIGHTS, math.nan), "an infinite weight": (WEIGHTS, -math.inf),
              "a NaN setting": (CONFIG, "NaN"), "an infinite setting": (CONFIG, "-Infinity")}


@pytest.mark.parametrize("where", NON_FINITE)
def test_a_non_finite_value_in_a_model_folder_is_one_line(exported, tmp_path, where):
    folder = tmp_path / "model"
    shutil.copytree(exported["soft"], folder)
    name, value = NON_FINITE[where]
    config = json.loads((folder / CONFIG).read_text())
    config.pop("sha256")  # a folder whose values were never checksummed: the values themselves are judged
    text = json.dumps(config)
    if name == WEIGHTS:
        weights = load_file(folder / WEIGHTS)
        weights["decoder.init_h.weight"][0, 0] = value
        save_file(weights, folder / WEIGHTS)
    else:
        text = text.replace('"inverse_temperature": 1.0', f'"inverse_temperature": {value}')
    (folder / CONFIG).write_text(text)
    with pytest.raises(CaptionError) as raised:
        Captioner.from_pretrained(folder, device="cpu")
    message = str(raised.value)
    assert str(folder / name) in message and "\n" not in message, message
