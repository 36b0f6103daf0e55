"""Image files of every mode become the right RGB pixels; every kind of bad file is caught with its reason."""

import numpy as np
import pytest
import torch
from kit.data import gradient, write_bad_files, write_image
from PIL import Image
from torchvision import models

from caption.data.sources.image_files import BadImageError, inspect_image, read_rgb
from caption.data.sources.image_source import describe_transform, image_transform
from caption.data.sources.karpathy import KarpathySource
from caption.data.sources.records import ImageRecord

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def rgb(path, min_side=1):
    image = read_rgb(str(path), min_side=min_side)
    assert image.mode == "RGB"
    return np.asarray(image)


@pytest.mark.parametrize("mode,suffix", [("RGB", "jpg"), ("L", "jpg"), ("CMYK", "jpg"), ("P", "png"),
                                         ("RGBA", "png"), ("LA", "png"), ("1", "png"), ("I;16", "png"),
                                         ("RGB", "png"), ("L", "webp")])
def test_every_mode_becomes_rgb(tmp_path, mode, suffix):
    path = write_image(tmp_path / f"image.{suffix}", mode=mode, size=(48, 40))
    pixels = rgb(path)
    assert pixels.shape == (40, 48, 3) and pixels.dtype == np.uint8
    source = gradient((48, 40), seed=0).astype(float)
    if mode in ("RGB", "CMYK", "P", "RGBA"):  # colour kept (JPEG and a 16-colour palette are lossy)
        assert np.abs(pixels - source).mean() < 12
    if mode in ("L", "LA", "I;16"):  # grey levels kept, not clipped or darkened
        grey = np.asarray(Image.fromarray(source.astype(np.uint8)).convert("L"), dtype=float)
        assert np.abs(pixels[..., 0] - grey).mean() < 3 and (pixels[..., 0] == pixels[..., 2]).all()


def test_exact_pixels_of_special_modes(tmp_path):
    sixteen = np.array([[0, 257 * 128, 65535, 257 * 7]], dtype=np.uint16).repeat(2, axis=0)
    Image.fromarray(sixteen).save(tmp_path / "sixteen.png")
    assert Image.open(tmp_path / "sixteen.png").mode == "I;16"
    assert rgb(tmp_path / "sixteen.png")[0, :, 0].tolist() == [0, 128, 255, 7]  # rescaled, not clipped at 255

    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[0, 0] = (10, 20, 30, 255)  # opaque
    rgba[0, 1] = (10, 20, 30, 0)  # transparent: the white background
    rgba[1, 0] = (0, 0, 0, 128)  # half transparent black on white: mid grey
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "alpha.png")
    pixels = rgb(tmp_path / "alpha.png")
    assert pixels[0, 0].tolist() == [10, 20, 30] and pixels[0, 1].tolist() == [255, 255, 255]
    assert abs(int(pixels[1, 0, 0]) - 127) <= 1

    palette = Image.new("P", (2, 1))
    palette.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    palette.putpixel((0, 0), 0)
    palette.putpixel((1, 0), 1)
    palette.save(tmp_path / "palette.png", transparency=1)  # index 1 transparent
    assert rgb(tmp_path / "palette.png").tolist() == [[[255, 0, 0], [255, 255, 255]]]

    Image.new("CMYK", (2, 2), (0, 0, 0, 0)).save(tmp_path / "cmyk.tif")
    assert (rgb(tmp_path / "cmyk.tif") == 255).all()  # no ink is white


def test_exif_orientation_is_applied(tmp_path):
    pixels = np.zeros((40, 60, 3), dtype=np.uint8)
    pixels[:, :30] = (255, 0, 0)  # left half red
    pixels[:, 30:] = (0, 0, 255)  # right half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    Image.fromarray(pixels).save(tmp_path / "rotated.jpg", exif=exif, quality=95)
    upright = rgb(tmp_path / "rotated.jpg")
    assert upright.shape == (60, 40, 3)
    top, bottom = upright[5, 20], upright[-5, 20]
    assert top[0] > 200 and top[2] < 60, "the left (red) half ends on top after a clockwise turn"
    assert bottom[2] > 200 and bottom[0] < 60


def test_bad_files_are_caught_with_their_reason(tmp_path, monkeypatch):
    files = write_bad_files(tmp_path)
    expected = {
        "missing": "file not found",
        "empty": "empty file",
        "text": "not an image",
        "garbage": "not an image|cannot",
        "tiny": "1x1 pixels, smaller than min_side=32",
        "bomb": "decompression bomb",
    }
    for name, reason in expected.items():
        with pytest.raises(BadImageError, match=reason):
            inspect_image(str(files[name]), min_side=32)
        with pytest.raises(BadImageError, match=reason):
            read_rgb(str(files[name]), min_side=32)
    inspect_image(str(files["truncated"]), min_side=32)  # the header is intact...
    with pytest.raises(BadImageError, match="cannot decode.*truncated"):
        read_rgb(str(files["truncated"]), min_side=32)  # ...the data is not
    # the guard follows Pillow's limit: a 64x48 image is a "bomb" under a 1000-pixel limit
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(BadImageError, match="decompression bomb"):
        inspect_image(str(tmp_path / "good.jpg"), min_side=1)


def test_source_check_and_image_name_file_and_record(tmp_path):
    files = write_bad_files(tmp_path)
    records = [ImageRecord(i, "train", ("a caption",), file=str(path)) for i, path in enumerate(files.values())]
    records.append(ImageRecord(99, "val", ("a caption",), file=str(tmp_path / "good.jpg")))
    source = KarpathySource(annotations="unused.json", images=str(tmp_path))
    header = {bad.file for bad in source.check(records, decode=False)}
    decoded = {bad.file for bad in source.check(records, decode=True)}
    bad_files = {str(path) for name, path in files.items()}
    assert decoded == bad_files and header == bad_files - {str(files["truncated"])}
    with pytest.raises(BadImageError) as error:
        source.image(records[0])
    assert str(files["missing"]) in str(error.value) and "image 0, train" in str(error.value)
    assert source.image(records[-1]).shape == (3, 224, 224)


def test_transform_is_the_weights_preset():
    transform = image_transform()
    assert describe_transform(transform) == describe_transform(models.VGG16_Weights.IMAGENET1K_V1.transforms())
    assert describe_transform(transform) == describe_transform(models.VGG19_Weights.IMAGENET1K_V1.transforms())
    described = describe_transform(transform)
    assert described["resize_size"] == [256] and described["crop_size"] == [224]
    assert tuple(described["mean"]) == MEAN and tuple(described["std"]) == STD

    value = (200, 100, 50)  # a plain image stays plain through resize and crop: check the normalisation by hand
    output = transform(Image.new("RGB", (300, 260), value))
    assert output.shape == (3, 224, 224)
    for channel in range(3):
        expected = (value[channel] / 255 - MEAN[channel]) / STD[channel]
        torch.testing.assert_close(output[channel], torch.full((224, 224), expected), atol=1e-5, rtol=0)


def test_short_side_then_centre_crop(tmp_path):
    pixels = np.zeros((100, 200, 3), dtype=np.uint8)  # wide image: columns 0-49 and 150-199 are outside the crop
    pixels[:, :50] = 255
    pixels[:, 150:] = 255
    output = image_transform(resize_size=64, crop_size=64)(Image.fromarray(pixels))  # 100x200 -> 64x128 -> 64x64
    assert output.shape == (3, 64, 64)
    black = (0 - MEAN[0]) / STD[0]
    torch.testing.assert_close(output[0, :, 2:-2], torch.full((64, 60), black), atol=1e-4, rtol=0)
