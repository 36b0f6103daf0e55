"""The torchvision encoders load torchvision-format weights (a file, or the official file in $TORCH_HOME
without any network) and compute exactly torchvision's own modules cut where the annotations are taken:
VGG's `features[:30]`, ResNet's layers up to layer4 (then an adaptive average pool to the grid)."""

import urllib.error

import pytest
import torch
from kit.data import resnet_weights, vgg16_weights
from torchvision import models

from caption.data.sources.image_source import describe_transform, image_transform
from caption.errors import ConfigError, EncoderWeightsError
from caption.io import encoder_weights
from caption.model.encoder import (
    TORCHVISION_RESNET,
    EncoderSettings,
    SmallVGG,
    TorchvisionResNet,
    TorchvisionVGG,
    build_encoder,
)

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
    encoder = build_encoder(EncoderSettings(name="vgg16", weights=str(weights_file)), reader=encoder_weights)
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
    encoder = TorchvisionVGG(name="vgg16", weights="imagenet", reader=encoder_weights)
    images = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(encoder(images), reference(torchvision_features, images), rtol=0, atol=0)


def test_missing_imagenet_weights_name_the_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    with pytest.raises(EncoderWeightsError) as error:
        TorchvisionVGG(name="vgg16", weights="imagenet", reader=encoder_weights)
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
            TorchvisionVGG(name="vgg16", weights=str(tmp_path / name), reader=encoder_weights)
        assert str(tmp_path / name) in str(error.value)


def test_vgg19_ends_at_relu5_4(tmp_path):
    encoder = TorchvisionVGG(name="vgg19", weights="none")
    convolutions = [layer for layer in encoder.features if isinstance(layer, torch.nn.Conv2d)]
    assert len(convolutions) == 16 and isinstance(encoder.features[-1], torch.nn.ReLU)
    assert not any(isinstance(layer, torch.nn.MaxPool2d) for layer in encoder.features[-4:])


def test_frozen_encoder_stays_in_eval_mode_without_gradients(weights_file):
    encoder = TorchvisionVGG(name="vgg16", weights=str(weights_file), freeze=True, reader=encoder_weights)
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


# ------------------------------------------------------------------------------------------ ResNet
@pytest.fixture(scope="module")
def resnet50_file(tmp_path_factory):
    return resnet_weights(tmp_path_factory.mktemp("weights") / "resnet50-random.pth")


def torchvision_resnet(name: str, weights_file, grid: int) -> torch.nn.Module:
    """torchvision's own ResNet with the file's weights, without its average pool and fc, then pooled to grid."""
    resnet = getattr(models, name)()
    resnet.load_state_dict(torch.load(weights_file, weights_only=True))  # strict: the file is complete
    return torch.nn.Sequential(*list(resnet.children())[:-2], torch.nn.AdaptiveAvgPool2d(grid)).eval()


@pytest.mark.parametrize("name", list(TORCHVISION_RESNET))
def test_resnet_annotations_have_the_documented_shape(name):
    """224x224: layer4 is 7x7x2048, pooled to 14x14 by default (L = 196) or kept at grid 7 (L = 49); D = 2048.
    The grid is one pooling layer for every ResNet: grid 7 is built for resnet50 only (resnet152 takes seconds)."""
    images = torch.randn(1, 3, 224, 224)
    grids = ((None, 196), (7, 49)) if name == "resnet50" else ((None, 196),)
    for grid, locations in grids:
        encoder = build_encoder(EncoderSettings(name=name, weights="none", grid=grid))
        with torch.no_grad():
            assert encoder(images).shape == (1, locations, 2048), (name, grid)
        assert encoder.dim == 2048 and encoder.grid == (grid or 14)
        assert not any(key.startswith(("fc.", "avgpool.")) for key in encoder.state_dict())


def test_vgg_grid_pools_conv5_and_defaults_to_the_unpooled_map(weights_file):
    images = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert (build_encoder(EncoderSettings(name="vgg16", weights=str(weights_file), grid=7),
                              reader=encoder_weights)(images).shape
                == (1, 49, 512))
        paper = build_encoder(EncoderSettings(name="vgg16", weights=str(weights_file)), reader=encoder_weights)
        assert paper(images).shape == (1, 196, 512)


@pytest.mark.parametrize("grid", [2, 4])
def test_resnet_weights_file_gives_torchvision_output(resnet50_file, grid):
    """64x64 images: layer4 is 2x2, kept at grid 2 and enlarged at grid 4, exactly as torchvision computes it."""
    encoder = build_encoder(EncoderSettings(name="resnet50", weights=str(resnet50_file), grid=grid),
                            reader=encoder_weights)
    reference = torchvision_resnet("resnet50", resnet50_file, grid)
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        annotations = encoder(images)  # (2, grid², 2048)
        expected = reference(images).flatten(2).transpose(1, 2)
    assert annotations.shape == (2, grid * grid, 2048)
    torch.testing.assert_close(annotations, expected, rtol=0, atol=0)
    saved = torch.load(resnet50_file, weights_only=True)
    assert torch.equal(encoder.state_dict()["layer4.2.bn3.running_var"], saved["layer4.2.bn3.running_var"])


def test_resnet_imagenet_weights_from_torch_home_without_network(resnet50_file, tmp_path, monkeypatch):
    folder = tmp_path / "hub" / "checkpoints"
    folder.mkdir(parents=True)
    official = models.ResNet50_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[1]
    (folder / official).symlink_to(resnet50_file)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    encoder = TorchvisionResNet(name="resnet50", weights="imagenet", grid=2, reader=encoder_weights)
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = torchvision_resnet("resnet50", resnet50_file, 2)(images).flatten(2).transpose(1, 2)
        torch.testing.assert_close(encoder(images), expected, rtol=0, atol=0)


def test_missing_resnet_imagenet_weights_name_the_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    with pytest.raises(EncoderWeightsError) as error:
        TorchvisionResNet(name="resnet101", weights="imagenet", reader=encoder_weights)
    official = models.ResNet101_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[1]
    assert official == "resnet101-63fe2227.pth"
    assert str(tmp_path / "hub" / "checkpoints" / official) in str(error.value)


def test_foreign_and_mismatched_resnet_weights_are_refused_by_name(resnet50_file, tmp_path):
    vgg = vgg16_weights(tmp_path / "vgg16.pth")
    cases = {
        (str(resnet50_file), "resnet101"): "do not fit resnet101",
        (str(vgg), "resnet50"): "not a torchvision ResNet state dict",
        (str(resnet50_file), "vgg16"): "not a torchvision VGG state dict",
        (str(tmp_path / "absent.pth"), "resnet50"): "does not exist",
    }
    for (path, name), expected in cases.items():
        with pytest.raises(EncoderWeightsError, match=expected) as error:
            build_encoder(EncoderSettings(name=name, weights=path), reader=encoder_weights)
        assert path in str(error.value)


def test_resnet_batch_norm_stays_in_eval_mode_and_frozen_without_gradients(resnet50_file):
    encoder = build_encoder(EncoderSettings(name="resnet50", weights=str(resnet50_file), grid=2),
                            reader=encoder_weights)
    encoder.train()
    assert not any(module.training for module in encoder.modules())
    assert not any(p.requires_grad for p in encoder.parameters())
    trainable = build_encoder(EncoderSettings(name="resnet50", weights="none", freeze=False, grid=2)).train()
    assert not any(module.training for module in trainable.modules())
    assert all(p.requires_grad for p in trainable.parameters())


def test_stages_split_the_encoders_from_the_input_up(weights_file):
    resnet = build_encoder(EncoderSettings(name="resnet50", weights="none", grid=2))
    assert [stage is layer for stage, layer in zip(resnet.stages[1:], (resnet.layer1, resnet.layer2,
                                                                       resnet.layer3, resnet.layer4))] == [True] * 4
    assert list(resnet.stages[0]) == [resnet.conv1, resnet.bn1]
    vgg = TorchvisionVGG(name="vgg16", weights=str(weights_file), reader=encoder_weights)
    blocks = vgg.stages
    convolutions = [sum(isinstance(layer, torch.nn.Conv2d) for layer in block) for block in blocks]
    assert convolutions == [2, 2, 3, 3, 3] and isinstance(blocks[-1][-1], torch.nn.ReLU)
    assert sum(len(block) for block in blocks) == len(vgg.features)


def test_encoder_grid_is_refused_where_it_cannot_apply():
    with pytest.raises(ConfigError, match="model.encoder.grid applies to the torchvision encoders"):
        build_encoder(EncoderSettings(name="small_vgg", weights="none", freeze=False, grid=7))
    with pytest.raises(ConfigError, match="model.encoder.grid must be >= 1"):
        build_encoder(EncoderSettings(name="resnet50", weights="none", grid=0))


@pytest.mark.parametrize("name", list(TORCHVISION_RESNET))
def test_resnet_transform_is_its_weights_preset(name):
    """IMAGENET1K_V1's preset: the paper's short side 256 and centre crop 224, ImageNet mean/std, like VGG's."""
    weights = TORCHVISION_RESNET[name][1]
    assert weights.name == "IMAGENET1K_V1"
    transform = image_transform(encoder=name)
    assert describe_transform(transform) == describe_transform(weights.transforms())
    assert describe_transform(transform) == describe_transform(image_transform())  # vgg16's
    assert image_transform(encoder=name, resize_size=72, crop_size=64).crop_size == [64]
