"""The model folder of `caption export`: no pickle anywhere in it, tied and strided weights kept, loaded from a folder
or from a Hugging Face Hub cache offline with its revisions pinned, and every missing, foreign or mismatched part
refused in one line naming the file."""

import io
import json
import math
import pickle
import shutil
import struct
import subprocess
import sys

import pytest
import torch
from kit.cli import environment, failed
from kit.data import write_image
from safetensors.torch import load, load_file, save_file

from caption import Captioner
from caption.errors import CaptionError, CaptionWarning, CheckpointError
from caption.io.checkpoints import find_checkpoint
from caption.io.model_folder import weights_bytes
from caption.model.caption_model import checkpoint_state

pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once
PICKLE_OR_ZIP = (b"\x80", b"PK\x03\x04")  # a pickle's PROTO opcode; torch.save's zip archive


class Refusing(pickle.Unpickler):
    """An unpickler that imports nothing: it reads a pickle of plain values, and fails on anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name}")


def test_tied_and_strided_weights_are_saved_each_with_its_values():
    shared = torch.arange(12.0).reshape(3, 4)
    state = {"tied.a": shared, "tied.b": shared, "view": shared[1:], "transposed": shared.t()}  # one storage, strided
    with pytest.raises(RuntimeError):  # what safetensors itself does with them
        save_file(state, "unused.safetensors")
    loaded = load(weights_bytes(state))
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name


def test_the_folder_holds_no_pickle_and_nothing_that_runs(exported):
    folder = exported["soft"]
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                               "training_config.yaml"]
    for path in folder.iterdir():
        assert not path.read_bytes().startswith(PICKLE_OR_ZIP), f"{path.name} is a pickle or a zip archive"
        with pytest.raises(pickle.UnpicklingError):  # not even a pickle of plain values (of protocol 0 or 1)
            Refusing(io.BytesIO(path.read_bytes())).load()
    data = (folder / "model.safetensors").read_bytes()
    header_size, = struct.unpack("<Q", data[:8])  # safetensors: a JSON header, then the raw tensors
    header = json.loads(data[8:8 + header_size])
    assert header.pop("__metadata__") == {"format": "pt"}
    assert all(set(entry) == {"dtype", "shape", "data_offsets"} for entry in header.values())
    config = json.loads((folder / "config.json").read_text())
    assert (config["library_name"], config["format_version"]) == ("show-attend-tell", 1)


def test_the_weights_and_settings_are_the_checkpoints(tiny_runs, exported):
    from caption.io.checkpoints import read_checkpoint

    checkpoint = read_checkpoint(find_checkpoint(tiny_runs["hard"]))
    weights = load_file(exported["hard"] / "model.safetensors")
    assert weights.keys() == checkpoint["state_dict"].keys()
    assert all(torch.equal(weights[name], tensor) for name, tensor in checkpoint["state_dict"].items())
    config = json.loads((exported["hard"] / "config.json").read_text())
    assert config["vocabulary"] == checkpoint["hyper_parameters"]["vocabulary"]
    stored = json.loads(json.dumps({key: value for key, value in checkpoint["hyper_parameters"].items()
                                    if key not in ("vocabulary", "_instantiator")}))
    # but for where the training machine kept its files: the encoder's weights are in model.safetensors
    stored["encoder"]["weights"], stored["optimization"]["init_from"] = "none", None
    assert config["model"] == stored, "every setting group as the checkpoint stores it, no path of the machine"
    source = checkpoint["datamodule_hyper_parameters"]["source"]
    assert config["data"]["source"]["class_path"] == source["class_path"]
    assert config["data"]["source"]["init_args"] == {key: value for key, value in source["init_args"].items()
                                                     if key != "root"}


def damaged(folder, tmp_path, damage: str):
    """A copy of the model folder with one `damage`, and what its error must name."""
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    config_path, weights_path = copy / "config.json", copy / "model.safetensors"
    config = json.loads(config_path.read_text())
    if damage == "a flipped byte in the weights":
        data = bytearray(weights_path.read_bytes())
        data[-len(data) // 4] ^= 0x10  # inside the last weights' values: safetensors reads it as another number
        weights_path.write_bytes(bytes(data))
        return copy, [f"{weights_path}: damaged: its bytes no longer match the SHA-256 config.json records"]
    if damage == "an edited vocabulary":
        config["vocabulary"][-1] = "tampered"
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: damaged or edited: its settings no longer match the SHA-256"]
    if damage == "a vocabulary entry that is no word":
        config["vocabulary"][2] = 7
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: vocabulary[2] is 7, not a word"]
    if damage == "an infinite setting":
        config["model"]["attention"]["inverse_temperature"] = math.inf
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: model.attention.inverse_temperature is inf, not a finite number"]
    config.pop("sha256")  # what follows makes a folder as an export before checksums, whose parts disagree
    if damage == "no weights":
        weights_path.unlink()
        return copy, [f"{copy}: no model.safetensors beside config.json"]
    if damage == "no config":
        config_path.unlink()
        return copy, [f"{copy}: model.safetensors but no config.json"]
    if damage == "another library's config":
        config_path.write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
        return copy, [f"{config_path}: no \"library_name\": \"show-attend-tell\"", "model_type 'bert'"]
    if damage == "a format from the future":
        config_path.write_text(json.dumps({**config, "format_version": 2}))
        return copy, [f"{config_path}: format_version 2 is newer", 'pip install -U "show-attend-tell @ git+']
    if damage in SOURCE_SIZES:  # edited on purpose (the checksum removed, as its message says): sizes no image has
        config["data"]["source"]["init_args"]["image_size"] = SOURCE_SIZES[damage]
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: data.source.init_args.image_size is {SOURCE_SIZES[damage]!r}, but the images "
                      "of encoder small_vgg must have whole sides of 4 (its downsampling) to 8192 pixels",
                      "model.image_size [64, 64]"]
    if damage == "a foreign class":
        config["data"]["source"]["class_path"] = "os.system"
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: data.source.class_path is 'os.system'", "refused without importing"]
    if damage == "weights cut short":
        weights_path.write_bytes(weights_path.read_bytes()[:100])
        return copy, [f"{weights_path}: not a readable safetensors file (truncated or corrupt?)"]
    weights = load_file(weights_path)
    if damage == "an all-NaN weight":
        largest = max(weights, key=lambda name: weights[name].numel())
        weights[largest] = torch.full_like(weights[largest], math.nan)
        save_file(weights, weights_path)
        config_path.write_text(json.dumps(config))
        return copy, [f"{weights_path}: weight {largest} holds {weights[largest].numel()} NaN or infinite values"]
    if damage == "a missing weight":
        del weights["decoder.output_words.bias"]
        need = ["missing decoder.output_words.bias (1)"]
    elif damage == "an unexpected weight":
        weights["decoder.extra"] = torch.zeros(2)
        need = ["unexpected decoder.extra (1)"]
    elif damage in SIZES:  # another model's settings: refused from the shapes, before the model is built
        group, key, value, named = SIZES[damage]
        if key is None:
            config["model"][group] = value
        else:
            config["model"][group][key] = value
        config_path.write_text(json.dumps(config))
        return copy, [f"{config_path}: {named}"]
    config_path.write_text(json.dumps(config))
    save_file(weights, weights_path)
    return copy, [f"{weights_path} does not fit the model {config_path} describes", *need]


# damage -> (group, key, value in config.json, what the line says): sizes the weights' shapes contradict
SIZES = {
    "another model's settings": ("decoder", "hidden_dim", 32, ("model.decoder.hidden_dim is 32, but the weights were "
                                 "trained with 16 (decoder.init_h.weight is (16, 8))")),
    "a hidden size of 1e9": ("decoder", "hidden_dim", 1e9, ("model.decoder.hidden_dim is 1000000000.0, but the weights "
                             "were trained with 16")),
    "a wider embedding": ("decoder", "embed_dim", 10**6, ("model.decoder.embed_dim is 1000000, but the weights were "
                          "trained with 8 (decoder.embedding.weight is (")),
    "a wider attention": ("attention", "dim", 10**6, ("model.attention.dim is 1000000, but the weights were trained "
                          "with 8")),
    "more attention layers": ("attention", "layers", 10**6, ("model.attention.layers is 1000000, but the weights were "
                              "trained with 1 (1 decoder.scorer.annotation_projection layers)")),
    "more f_init layers": ("decoder", "init_layers", 10**6, ("model.decoder.init_layers is 1000000, but the weights "
                           "were trained with ")),
    "other encoder channels": ("encoder", "channels", [4, 10**6, 8], (
        "model.encoder.channels is (4, 1000000, 8), but the weights were trained with (4, 8, 8)")),
    "other kernels": ("encoder", "kernel_sizes", [3, 1, 3], (
        "model.encoder.kernel_sizes is (3, 1, 3), but the weights were trained with (3, 3, 3)")),
    "another encoder": ("encoder", "name", "resnet152", ("the annotation size of model.encoder.name 'resnet152' is "
                        "2048, but the weights were trained with 8")),
}
for side in ([1, 1], [64, 10**9], [64.0, 64.0]):
    SIZES[f"an image size of {side}"] = ("image_size", None, side, (f"model.image_size is {tuple(side)!r}, but encoder "
                                         "small_vgg was trained on inputs of two whole sides (H, W) of 4 (its "
                                         "downsampling) to 8192 pixels"))

# damage -> the data source's image_size in config.json
SOURCE_SIZES = {"a negative data image size": -5, "a data image size that is text": "abc",
                "a data image size of 100000": 100000}

DAMAGES = [*SIZES, *SOURCE_SIZES,
           "no weights", "no config", "another library's config", "a format from the future", "a foreign class",
           "weights cut short", "a missing weight", "an unexpected weight",
           "a flipped byte in the weights", "an edited vocabulary", "an infinite setting", "an all-NaN weight",
           "a vocabulary entry that is no word"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_missing_or_foreign_part_is_one_line_naming_the_file(exported, tmp_path, damage):
    folder, named = damaged(exported["soft"], tmp_path, damage)
    line = failed(["evaluate", "--ckpt_path", str(folder), "--predictions.out", str(tmp_path / "out")])
    assert all(part in line for part in named), line
    with pytest.raises(CaptionError) as raised:  # CheckpointError; ForeignClassError for a class of elsewhere
        Captioner.from_pretrained(folder, device="cpu")
    assert all(part in str(raised.value) for part in named), raised.value
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("damage", ["another model's settings", "a format from the future",
                                    "a flipped byte in the weights", "an all-NaN weight",
                                    "a data image size of 100000"])
def test_the_lightning_commands_refuse_them_as_well(exported, tmp_path, damage):
    folder, named = damaged(exported["soft"], tmp_path, damage)
    line = failed(["test", "--ckpt_path", str(folder), "--trainer.accelerator", "cpu"])
    assert all(part in line for part in named), line


def test_a_folder_that_is_no_model_folder_and_a_name_that_is_no_hub_id(tiny_runs, tmp_path):
    with pytest.raises(CheckpointError, match="a folder without model.safetensors or config.json, not a model folder"):
        Captioner.from_pretrained(tiny_runs["soft"])  # a run folder: Captioner.from_checkpoint's
    with pytest.raises(CheckpointError, match="no such model folder, and not a Hugging Face Hub model id"):
        Captioner.from_pretrained(tmp_path / "missing" / "deeper" / "model")


def test_a_folder_left_by_a_stopped_export_is_called_an_incomplete_model_folder_not_a_run_folder(tmp_path):
    folder = tmp_path / "exports" / "tiny"  # `caption export` killed while it wrote the weights
    folder.mkdir(parents=True)
    (folder / ".model.safetensors.4242.lab-pc.tmp").write_bytes(b"half the weights")
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    line = failed(["describe", str(image), "--ckpt_path", str(folder), "--predictions.out", str(tmp_path / "d")])
    assert line == (f"caption: error: {folder}: an incomplete model folder of `caption export` (no model.safetensors "
                    "or config.json: the export was stopped before it finished), not a run folder: export the model "
                    f"again (caption export --ckpt_path RUN --predictions.out {folder})"), line
    (folder / ".model.safetensors.4242.lab-pc.tmp").unlink()
    with pytest.raises(CheckpointError, match="no checkpoint \\(\\*.ckpt\\) in this run folder"):
        find_checkpoint(folder)  # an empty folder: nothing says an export was there


HUB_PROGRAM = """
import json, sys
from caption import Captioner
from caption.errors import CaptionError, CaptionWarning, CheckpointError
found = {}
for revision in (None, sys.argv[2]):
    captioner = Captioner.from_pretrained("owner/name", device="cpu", revision=revision)
    caption = captioner(sys.argv[1])
    found[str(revision)] = [captioner.checkpoint, caption.text, caption.alpha.tolist()]
try:
    Captioner.from_pretrained("owner/missing", device="cpu")
except CheckpointError as error:
    found["missing"] = str(error)
print(json.dumps(found))
"""


def hub_cache(root, snapshots: dict[str, object], main: str):
    """A Hugging Face Hub cache as huggingface_hub lays it out: models--owner--name/{refs/main, snapshots/<commit>/}."""
    repo = root / "models--owner--name"
    for commit, folder in snapshots.items():
        shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(main)
    return root


def test_from_pretrained_reads_a_hub_cache_offline_with_revisions_pinned(exported, tmp_path):
    soft, hard = "1" * 40, "2" * 40  # commits: main is the hard model, the soft one an older commit
    cache = hub_cache(tmp_path / "hub", {soft: exported["soft"], hard: exported["hard"]}, main=hard)
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    run = subprocess.run([sys.executable, "-c", HUB_PROGRAM, str(image), soft], capture_output=True, text=True,
                         env=environment(changes={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}), timeout=600,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.splitlines()[-1])
    for revision, kind, commit in ((str(None), "hard", hard), (soft, "soft", soft)):
        expected = Captioner.from_checkpoint(exported[kind], device="cpu")(image)
        path, text, alpha = found[revision]
        assert path == str(cache / "models--owner--name" / "snapshots" / commit)
        assert text == expected.text and torch.equal(torch.tensor(alpha), expected.alpha), revision
    assert found["missing"].startswith("owner/missing: not in the Hugging Face cache")
    assert "HF_HUB_OFFLINE is set" in found["missing"]


def test_a_hub_id_on_a_machine_without_huggingface_hub_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails, as when it is not installed
    with pytest.raises(Exception, match=r'pip install "show-attend-tell\[hub\] @ git\+https://'):
        Captioner.from_pretrained("owner/name")


def test_push_offline_is_one_line_and_the_folder_is_still_written(tiny_runs, tmp_path, monkeypatch):
    import huggingface_hub.constants

    out = tmp_path / "export"
    monkeypatch.setenv("HF_TOKEN", "hf_offline")  # logged in, as far as can be told without the network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets on import
    line = failed(["export", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(out),
                   "--push", "owner/name"])
    assert "--push owner/name: the upload failed (OfflineModeIsEnabled: " in line and "HF_HUB_OFFLINE is set" in line
    assert f"the model folder is complete in {out}: push it again later" in line
    assert (out / "config.json").is_file()


def test_push_without_the_package_or_a_login_stops_before_any_work(tiny_runs, tmp_path, monkeypatch):
    import huggingface_hub

    out = tmp_path / "export"
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    line = failed(["export", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(out),
                   "--push", "owner/name"])
    assert "not logged in to the Hugging Face Hub: run `hf auth login` (or set HF_TOKEN)" in line
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    line = failed(["export", "--ckpt_path", str(tiny_runs["soft"]), "--predictions.out", str(out),
                   "--push", "owner/name"])
    assert 'needs huggingface_hub, which is not installed: pip install "show-attend-tell[hub] @ git+' in line
    assert 'pip install -e ".[hub]" in a clone' in line
    assert not out.exists()


def test_a_new_model_starts_from_the_folder_as_from_a_checkpoint(exported):
    """model.encoder.weights (stage 2's frozen encoder) and model.optimization.init_from take the folder."""
    from caption.io import encoder_weights
    from caption.io.model_folder import read_config
    from caption.model.encoder import EncoderSettings, build_encoder
    from caption.training.finetuning import load_weights
    from caption.training.module import CaptionModule

    folder = exported["soft"]
    weights, config = load_file(folder / "model.safetensors"), read_config(folder)
    encoder = build_encoder(EncoderSettings(**{**config["model"]["encoder"], "weights": str(folder)}),
                            reader=encoder_weights)
    assert all(torch.equal(tensor, weights[f"encoder.{name}"]) for name, tensor in encoder.state_dict().items())

    groups = {key: value for key, value in config["model"].items() if key not in ("lr_scheduler", "image_size")}
    module = CaptionModule(vocabulary=config["vocabulary"], **groups)
    load_weights(module, str(folder))
    assert all(torch.equal(tensor, weights[name]) for name, tensor in checkpoint_state(module.state_dict()).items())


def test_a_folder_exported_before_checksums_loads_without_a_word(exported, tmp_path, recwarn):
    copy = tmp_path / "model"
    shutil.copytree(exported["soft"], copy)
    config = json.loads((copy / "config.json").read_text())
    assert set(config.pop("sha256")) == {"config.json", "model.safetensors", "README.md", "training_config.yaml"}
    (copy / "config.json").write_text(json.dumps(config))
    Captioner.from_pretrained(copy, device="cpu")
    assert not [warning for warning in recwarn if "sha256" in str(warning.message).lower()]


def test_an_edited_model_card_is_one_warning_and_the_model_loads(exported, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(exported["soft"], copy)
    (copy / "README.md").write_text("edited on the Hub\n")
    with pytest.warns(CaptionWarning, match=r"README.md: damaged: .* the model card.*loaded regardless"):
        Captioner.from_pretrained(copy, device="cpu")


def test_an_edited_training_config_is_one_warning_and_the_model_loads(exported, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(exported["soft"], copy)
    (copy / "training_config.yaml").write_text("trainer: {max_epochs: 1}\n")
    with pytest.warns(CaptionWarning, match=r"training_config.yaml: damaged: .* training config.*loaded regardless") \
            as warned:
        Captioner.from_pretrained(copy, device="cpu")
    assert len([warning for warning in warned if "damaged" in str(warning.message)]) == 1
