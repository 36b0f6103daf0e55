"""A Captioner shares itself from Python: `save_pretrained` writes the folder `caption export` writes, which
`from_pretrained` loads back to caption identically, and `push_to_hub` uploads that folder through huggingface_hub's
public API (replaced here by a stand-in: no network)."""

import json
from pathlib import Path

import huggingface_hub
import pytest
import torch
from kit.data import write_image

from caption import Captioner
from caption.cli import main
from caption.errors import CaptionError

pytestmark = pytest.mark.slow  # trains the tiny runs (conftest.py) once


class StandInHub:
    """`huggingface_hub.HfApi` as the Hub answers it, without the network: what each call was given."""

    calls: list[tuple[str, dict]] = []
    uploaded: dict[str, bytes] = {}

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, repo_id, **kwargs):
        StandInHub.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, *, folder_path, repo_id, **kwargs):
        StandInHub.calls.append(("upload_folder", {"repo_id": repo_id, **kwargs}))
        StandInHub.uploaded = {path.name: path.read_bytes() for path in Path(folder_path).iterdir()}
        return huggingface_hub.CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/1", commit_message="",
                                          commit_description="", oid="1" * 40)


@pytest.fixture
def stand_in_hub(monkeypatch):
    StandInHub.calls, StandInHub.uploaded = [], {}
    monkeypatch.setattr(huggingface_hub, "HfApi", StandInHub)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_stand_in")
    return StandInHub


def test_save_pretrained_then_from_pretrained_captions_identically(tiny_runs, tmp_path):
    image = write_image(tmp_path / "photo.png", size=(64, 64))
    for kind in ("soft", "hard"):
        captioner = Captioner.from_checkpoint(tiny_runs[kind], device="cpu", precision="32-true")
        folder = captioner.save_pretrained(tmp_path / kind)
        assert sorted(path.name for path in folder.iterdir()) == [
            "README.md", "config.json", "model.safetensors", "training_config.yaml"]
        loaded = Captioner.from_pretrained(folder, device="cpu", precision="32-true")
        expected, found = captioner(image, num_captions=2), loaded(image, num_captions=2)
        assert [caption.text for caption in found] == [caption.text for caption in expected], kind
        for want, got in zip(expected, found):
            assert torch.equal(got.alpha, want.alpha) and got.log_prob == want.log_prob
        exported = tmp_path / "cli" / kind  # the same folder name, hence the same card title
        main(["export", "--ckpt_path", str(tiny_runs[kind]), "--predictions.out", str(exported)])
        for path in exported.iterdir():  # byte for byte what `caption export` writes: card, figures, checksums
            assert (folder / path.name).read_bytes() == path.read_bytes(), path.name
        saved_again = loaded.save_pretrained(tmp_path / f"{kind}_again")  # a model folder saves itself too
        config, again = (json.loads((path / "config.json").read_text()) for path in (folder, saved_again))
        assert again["model"] == config["model"] and again["preprocessing"] == config["preprocessing"]


def test_push_to_hub_uploads_the_saved_folder(tiny_runs, stand_in_hub):
    captioner = Captioner.from_checkpoint(tiny_runs["soft"], device="cpu")
    url = captioner.push_to_hub("owner/shapes-soft", private=True)
    assert url == "https://huggingface.co/owner/shapes-soft/commit/1"
    (create, created), (upload, uploaded) = stand_in_hub.calls
    assert (create, upload) == ("create_repo", "upload_folder")
    assert created == {"repo_id": "owner/shapes-soft", "repo_type": "model", "private": True, "exist_ok": True}
    assert set(stand_in_hub.uploaded) >= {"model.safetensors", "config.json", "README.md"}
    assert "owner/shapes-soft" in stand_in_hub.uploaded["README.md"].decode()  # the card's title is the id
    assert json.loads(stand_in_hub.uploaded["config.json"])["library_name"] == "show-attend-tell"


def test_push_to_hub_without_a_login_is_one_line_before_any_work(tiny_runs, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    captioner = Captioner.from_checkpoint(tiny_runs["soft"], device="cpu")
    with pytest.raises(CaptionError, match=r"^push_to_hub\('owner/name'\): not logged in to the Hugging Face Hub"):
        captioner.push_to_hub("owner/name")
