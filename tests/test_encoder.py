"""The torchvision VGG encoder loads torchvision-format weights (a file, or the official file in
$TORCH_HOME without any network) and computes exactly torchvision's own `features[:30]`."""

import urllib.error

import pytest
import torch
from image_data import vgg16_weights
from torchvision import models

from caption.encoder import EncoderWeightsError, SmallVGG, TorchvisionVGG, build_encoder

OFFICIAL_FILE = "vgg16-397923af.pth"  # the file name in VGG16_Weights.IMAGENET1K_V1.url


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    return vgg16_weights(tmp_path_factory.mktemp("weights") / "vgg16-random.pth", full=True)


@pytest.fixture(scope="module")
def torchvision_features(weights_file):
    """torchvision's own VGG16 with the same weights, cut where the paper takes the annotations."""
    vgg = models.vgg16()
    vgg.load_state_dict(torch.load(weights_file, weights_only=True))  # strict: the file is complete
    return vgg.features[:30].eval()


def reference(features, images):
    return features(images).flatten(2).transpose(1, 2)  # (B, D, h, w) -> (B, L, D)


def no_network(*args, **kwargs):
    raise urllib.error.URLError("no network in tests")


def test_official_url_file_name():
    assert models.VGG16_Weights.IMAGENET1K_V1.url.endswith("/" + OFFICIAL_FILE)


def test_weights_file_gives_torchvision_features(weights_file, torchvision_features):
    encoder = build_encoder("vgg16", weights=str(weights_file), freeze=True)
    images = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        annotations = encoder(images)
        assert annotations.shape == (2, 4 * 5, 512)
        torch.testing.assert_close(annotations, reference(torchvision_features, images), rtol=0, atol=0)
        paper = encoder(torch.randn(1, 3, 224, 224))
    assert paper.shape == (1, 196, 512), "14x14x512 at 224x224: L = 196, D = 512 (the paper)"
    assert encoder.dim == 512


def test_imagenet_weights_from_torch_home_without_network(weights_file, torchvision_features, tmp_path, monkeypatch):
    folder = tmp_path / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / OFFICIAL_FILE).symlink_to(weights_file)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    encoder = TorchvisionVGG(name="vgg16", weights="imagenet")
    images = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(encoder(images), reference(torchvision_features, images), rtol=0, atol=0)


def test_missing_imagenet_weights_name_the_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    with pytest.raises(EncoderWeightsError) as error:
        TorchvisionVGG(name="vgg16", weights="imagenet")
    message = str(error.value)
    assert OFFICIAL_FILE in message and str(tmp_path / "hub" / "checkpoints" / OFFICIAL_FILE) in message
    assert "$TORCH_HOME/hub/checkpoints/" in message


def test_unusable_weights_files_are_named(tmp_path):
    layers = models.vgg.make_layers(models.vgg.cfgs["E"])
    vgg19 = {f"features.{key}": value for key, value in layers.state_dict().items()}
    torch.save(vgg19, tmp_path / "vgg19.pth")
    torch.save([1, 2, 3], tmp_path / "list.pth")
    (tmp_path / "text.pth").write_text("not a checkpoint")
    cases = {"vgg19.pth": "do not fit vgg16", "list.pth": "not a torchvision VGG state dict",
             "text.pth": "cannot read", "absent.pth": "does not exist"}
    for name, expected in cases.items():
        with pytest.raises(EncoderWeightsError, match=expected) as error:
            TorchvisionVGG(name="vgg16", weights=str(tmp_path / name))
        assert str(tmp_path / name) in str(error.value)


def test_vgg19_ends_at_relu5_4(tmp_path):
    encoder = TorchvisionVGG(name="vgg19", weights="none")
    convolutions = [layer for layer in encoder.features if isinstance(layer, torch.nn.Conv2d)]
    assert len(convolutions) == 16 and isinstance(encoder.features[-1], torch.nn.ReLU)
    assert not any(isinstance(layer, torch.nn.MaxPool2d) for layer in encoder.features[-4:])


def test_frozen_encoder_stays_in_eval_mode_without_gradients(weights_file):
    encoder = TorchvisionVGG(name="vgg16", weights=str(weights_file), freeze=True)
    encoder.train()
    assert not encoder.training and not any(p.requires_grad for p in encoder.parameters())


@pytest.mark.parametrize("kernel_sizes", [(3, 3, 3, 3), (3, 3, 3, 1), (3, 3, 1, 1), (3, 1, 1, 1)])
def test_small_vgg_receptive_field_is_measured(kernel_sizes):
    """The pixels that can change one annotation span `receptive_field` pixels: found by lighting one pixel at
    a time (positive weights, so a bright pixel wins every max-pool on its way up)."""
    encoder = SmallVGG(channels=(2, 2, 2, 2), kernel_sizes=kernel_sizes).eval()
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.fill_(0.1)
        blank = encoder(torch.zeros(1, 3, 64, 64))[0, 4 * 8 + 4]  # the annotation of cell (4, 4)
        reach = []
        for x in range(64):
            image = torch.zeros(1, 3, 64, 64)
            image[..., 32, x] = 1000.0
            reach.append(not torch.equal(encoder(image)[0, 4 * 8 + 4], blank))
    assert sum(reach) == encoder.receptive_field


def test_small_vgg_coordinates_tell_annotations_apart():
    """With x, y input channels, a blank image gives a different annotation at every location."""
    torch.manual_seed(0)
    plain = SmallVGG(channels=(4, 8), kernel_sizes=(1, 1)).eval()
    placed = SmallVGG(channels=(4, 8), kernel_sizes=(1, 1), coordinates=True).eval()
    blank = torch.zeros(2, 3, 16, 16)
    assert placed(blank).shape == plain(blank).shape == (2, 64, 8)
    assert torch.unique(plain(blank)[0], dim=0).shape[0] == 1  # 1×1 convolutions: every place looks the same
    assert torch.unique(placed(blank)[0], dim=0).shape[0] == 64
