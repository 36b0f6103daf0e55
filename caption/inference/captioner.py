"""Caption images from Python with a trained checkpoint:

    from caption import Captioner
    captioner = Captioner.from_checkpoint("runs/shapes_soft")    # or a checkpoint file
    print(captioner("photo.jpg").text)
    captioner = Captioner.from_pretrained("exports/shapes_soft")  # a folder of `caption export`, or "owner/name"
    captioner.save_pretrained("exports/mine"); captioner.push_to_hub("owner/name")  # caption.reports.sharing's

Images may be file paths, PIL images, image files' bytes or tensors (torchvision's layout: (3, H, W) uint8, or float
in [0, 1]), one or many; many are captioned in batches and give the same captions as one at a time.
Each image gets the transform of the data the model was trained on (`CaptionSource.inference_transform`,
rebuilt from the data settings the checkpoint stores). Each `Caption` holds the text, the words, the
attention α (T×L) and gate β of every word, the hard-attention locations and the log-probability;
`num_captions=k` gives each image's k best beams instead (fewer when the search holds fewer distinct ones), and
`captioner.plot(image)` draws the paper's figure (in a notebook, the cell shows it).
"""

from __future__ import annotations

import io
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms.functional import to_pil_image

from caption.data.sources.image_files import BadImageError, read_rgb, to_rgb
from caption.data.sources.image_source import image_transform
from caption.errors import CaptionWarning, ConfigError
from caption.evaluation.overlays import NotebookFigure, Overlay, comparison_figure, overlay_figure, to_uint8
from caption.inference.inputs import (
    ENCODED,
    Captions,
    Failure,
    ImageInput,
    ImageInputError,
    OnError,
    as_inputs,
    check_call,
    check_decoding_arguments,
    check_input,
    describe_input,
    kept,
)
from caption.inference.trained import Normalization, load_trained, source_inputs
from caption.io.checkpoints import download_checkpoint
from caption.io.device import free_memory, resolved_precision
from caption.io.hub import pretrained_folder
from caption.model.caption_model import CaptionModel
from caption.model.captions import Caption
from caption.model.precision import Precision, PrecisionSetting, at_least_float32, autocast, checked_precision


def pick_device(name: str | torch.device | None) -> torch.device:
    """None or "auto": the GPU when there is one, else the CPU; otherwise the named device, checked."""
    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ConfigError(f"device {name}: {error}") from None
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"device {name}: this machine has {torch.cuda.device_count()} visible GPUs")
    return device


class Captioner:
    """A trained model with its input transform: images in, `Caption`s out.

    Args:
        module: the trained model (`caption.model.caption_model.CaptionModel`: its encoder, decoder, vocabulary and
            settings; eval mode; its device is where captioning runs), kept as `captioner.module`.
        transform: an RGB PIL image -> the encoder's input (3, H, W).
        normalization: the transform's per-channel (mean, std), to draw its inputs again.
        data: the data settings the model was trained with and where they come from (`data_settings`), if known.
        checkpoint: the checkpoint it was loaded from (the file, also for a run folder; the model folder; or the
            URL), if any.
        checkpoint_path: that checkpoint on this machine (the file, or the model folder; a URL's download), if any:
            what `save_pretrained` writes as a model folder.
        precision: "auto" (bf16-mixed where the device has bf16 matrix units, else 32-true), "32-true" or "bf16-mixed"
            (bf16 autocast; `caption.model.precision`); what it resolves to is `captioner.precision`
            (`caption.io.device.resolved_precision`).
    """

    def __init__(self, module: CaptionModel, *, transform: Callable[[Image.Image], Tensor],
                 normalization: Normalization, data: tuple[dict[str, Any], str] | None = None,
                 checkpoint: str | None = None, precision: PrecisionSetting = "auto",
                 checkpoint_path: Path | None = None):
        self.module = module.eval()
        self.checkpoint_path = checkpoint_path
        self.precision = cast(Precision, resolved_precision(checked_precision(precision), self.module.device))
        self.checkpoint = checkpoint
        self.transform = transform
        self.normalization = normalization
        self.data = data

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike, *, device: str | torch.device | None = None, sha256: str | None = None,
        config: str | os.PathLike | None = None, decoding: Mapping[str, Any] | None = None,
        precision: PrecisionSetting = "auto",
    ) -> Captioner:
        """Load a checkpoint written by `caption fit` (weights_only=True; vocabulary and settings included).

        Args:
            path: a checkpoint file; a run folder of `caption fit` (its newest best-*.ckpt, else last.ckpt, as
                `caption compare` picks it); a model folder of `caption export`; or an http(s) URL, downloaded once
                into $TORCH_HOME/hub/checkpoints.
            device: "cpu", "cuda", "cuda:1", ...; None picks the GPU when there is one.
            sha256: the URL's expected SHA-256 (required for a URL; a file that differs is refused).
            config: a YAML with a `data:` section, for checkpoints that do not store their data settings.
            decoding: decoding settings that replace the checkpoint's (`caption.model.decoding.DecodingSettings`'
                fields, e.g. {"beam_size": 3, "length_penalty": 0.5}).
            precision: "auto", "32-true" or "bf16-mixed" (as for `Captioner`).
        """
        url = str(path) if str(path).startswith(("https://", "http://")) else None
        trained = load_trained(download_checkpoint(url, sha256=sha256) if url else path, config=config,
                               decoding=decoding)
        checkpoint = url or str(trained.path)
        module, encoder = trained.module.to(pick_device(device)), trained.module.settings.encoder.name
        if trained.data is None:
            if encoder == "small_vgg":  # no preset to fall back on
                raise ConfigError(trained.data_problem or f"{path}: no data settings")
            transform = image_transform(encoder=encoder)  # the weights' preset
            return cls(module, transform=transform, normalization=(tuple(transform.mean), tuple(transform.std)),
                       checkpoint=checkpoint, precision=precision, checkpoint_path=trained.path)
        transform, normalization = source_inputs(trained.data, trained.data_origin, encoder=encoder)
        return cls(module, transform=transform, normalization=normalization, data=(trained.data, trained.data_origin),
                   checkpoint=checkpoint, precision=precision, checkpoint_path=trained.path)

    @classmethod
    def from_pretrained(
        cls, name: str | os.PathLike, *, device: str | torch.device | None = None, revision: str | None = None,
        precision: PrecisionSetting = "auto",
    ) -> Captioner:
        """Load a model folder written by `caption export` (model.safetensors, config.json: nothing is unpickled), from
        this machine or from the Hugging Face Hub; it captions as the checkpoint it was exported from does.

        Args:
            name: a local model folder, or a Hub model id "owner/name" (when no such local path exists), fetched with
                `huggingface_hub.snapshot_download` into its cache (`HF_HUB_CACHE`; with `HF_HUB_OFFLINE=1`, from
                the cache only). Needs the extra `hub` (`pip install -e ".[hub]"` in a clone).
            device: "cpu", "cuda", "cuda:1", ...; None picks the GPU when there is one.
            revision: the Hub repository's branch, tag or commit to load (default: main).
            precision: "auto", "32-true" or "bf16-mixed" (as for `Captioner`).
        """
        return cls.from_checkpoint(pretrained_folder(name, revision=revision), device=device, precision=precision)

    @property
    def device(self) -> torch.device:
        return self.module.device

    def prepare(self, image: ImageInput) -> Tensor:
        """One image -> the encoder's input (3, H, W): read (a path), made RGB, transformed. A file that cannot be
        read is a `BadImageError` naming it; an input that is no image, a TypeError or ValueError."""
        check_input(image, 0)
        try:
            return self.transform(self._rgb(image))
        except BadImageError as error:
            raise BadImageError(f"{describe_input(image)}: {error}") from None

    @staticmethod
    def _rgb(image: ImageInput) -> Image.Image:
        """A checked input as an RGB PIL image; BadImageError with the reason (not the name) for a file."""
        if isinstance(image, (str, os.PathLike)):
            return read_rgb(os.fspath(image), min_side=1)
        if isinstance(image, ENCODED):
            return read_rgb(io.BytesIO(image), min_side=1)
        if isinstance(image, Image.Image):
            return to_rgb(image)
        return to_pil_image(image.cpu()).convert("RGB")

    @torch.inference_mode()
    def annotations(self, batch: dict[str, Tensor]) -> Tensor:
        """The (B, L, D) annotations of a batch as `caption_batch` takes it, on the model's device: the encoder's for
        {"image": ...}, the cache's for {"annotations": ...}. `caption_batch({"annotations": ...})` then decodes them
        as often as asked without encoding again."""
        inputs = {key: batch[key].to(self.device) for key in ("image", "annotations") if key in batch}
        with autocast(self.device, self.precision):
            return at_least_float32(self.module.annotations(inputs))  # fp32 for any use, as a feature cache's

    @torch.inference_mode()
    def caption_batch(
        self, batch: dict[str, Tensor], *, beam_size: int | None = None, max_length: int | None = None,
        num_captions: int | None = None,
    ) -> list[Caption] | list[list[Caption]]:
        """Captions of a batch: {"image": (B, 3, H, W)} prepared images, or {"annotations": (B, L, D)} from a
        feature cache. `beam_size` (1: greedy) and `max_length` default to the checkpoint's, in the model's
        `generate`, which checks them, and refuses a beam search larger than the memory free on the device
        (`caption.io.device.free_memory`). `num_captions` = n: per image a list of its n best beams, best first (the
        beam is then at least n wide); fewer when the search holds fewer than n distinct hypotheses (a short
        `max_length`, a small vocabulary), never a repeated or impossible one (log-probability -inf)."""
        check_decoding_arguments(beam_size=beam_size, max_length=max_length, num_captions=num_captions)
        annotations = self.annotations(batch)
        with autocast(self.device, self.precision):
            decoded = self.module.generate(annotations, beam_size=beam_size, max_length=max_length,
                                           num_captions=num_captions or 1, free_memory=free_memory)
        captions = decoded.captions(self.module.vocabulary)
        if num_captions is None:
            return captions
        return [[caption for caption in captions[start:start + num_captions] if math.isfinite(caption.log_prob)]
                for start in range(0, len(captions), num_captions)]

    def __call__(
        self, images: ImageInput | Sequence[ImageInput], *, beam_size: int | None = None,
        max_length: int | None = None, num_captions: int | None = None, batch_size: int = 16,
        on_error: OnError = "raise",
    ) -> Caption | list[Caption] | Captions | None:
        """Caption one image (-> a `Caption`) or several (a sequence, or a (B, 3, H, W) tensor -> `Captions`, a list
        in the same order).

        `num_captions` = n: each image's n best beams instead of one caption, best first, each with its
        `log_prob` and attention (one image -> a list of n `Caption`s; several -> a list of such lists); fewer than n
        when the search holds fewer distinct hypotheses (`caption_batch`).

        An input that is no image (an int, a 0-d tensor, ...) is a TypeError or ValueError naming it, before any
        captioning. A file that cannot be read: with on_error="raise", a `BadImageError` (`ImageInputError`) naming
        it, that carries the captions finished before it (`.captions`); with on_error="skip", a warning naming it,
        None in its place and an entry in `Captions.failed` (for one image: None).
        """
        check_call(batch_size=batch_size, on_error=on_error, beam_size=beam_size, max_length=max_length,
                   num_captions=num_captions)
        items, many = as_inputs(images)
        for index, item in enumerate(items):
            check_input(item, index)
        captions: list[Caption | None] = [None] * len(items)
        failed: list[Failure] = []
        for start in range(0, len(items), batch_size):
            prepared = []
            for index in range(start, min(start + batch_size, len(items))):
                try:
                    prepared.append((index, self.transform(self._rgb(items[index]))))
                except BadImageError as error:
                    failure = Failure(index, describe_input(items[index]), str(error))
                    where = f"{failure.item} (input {index})" if many else failure.item
                    if on_error == "raise":
                        raise ImageInputError(f"{where}: {failure.reason}{kept(captions) if many else ''}",
                                              index=index, captions=captions) from None
                    warnings.warn(f"skipping {where}: {failure.reason}", CaptionWarning, stacklevel=2)
                    failed.append(failure)
            if prepared:
                pixels = torch.stack([tensor for _, tensor in prepared])  # (B, 3, H, W)
                decoded = self.caption_batch({"image": pixels}, beam_size=beam_size, max_length=max_length,
                                             num_captions=num_captions)
                for (index, _), caption in zip(prepared, decoded):
                    captions[index] = caption
        return Captions(captions, failed) if many else captions[0]

    def overlay(self, pixels: Tensor, caption: Caption, *, label: str = "input", title: str | None = None) -> Overlay:
        """What `caption.evaluation.overlays` draws for `caption` of the prepared image `pixels` (3, H, W)."""
        return Overlay(to_uint8(pixels, *self.normalization), caption.words, caption.alpha, caption.beta,
                       caption.locations, title=caption.text if title is None else title, label=label,
                       context=self.module.settings.decoding.hard_eval_context)

    def plot(
        self, image: ImageInput, caption: Caption | Sequence[Caption] | None = None, *, beam_size: int | None = None,
        max_length: int | None = None, num_captions: int | None = None, columns: int = 6,
    ) -> NotebookFigure:
        """The paper's figure for one image (sec. 5.4): the image as the encoder sees it, then one panel per word
        with its attention over the image and β under it. A notebook shows the returned matplotlib figure;
        `.savefig(path)` writes it.

        Args:
            image: a file path, a PIL image or a (3, H, W) tensor, as for a call.
            caption: its caption(s) if you have them already; else it is captioned here (`beam_size`,
                `max_length` and `num_captions` as for a call).
            num_captions: k: the k best beams, one block of panels each, best first, on one colour scale.
            columns: panels per row.
        """
        pixels = self.prepare(image)  # (3, H, W)
        if caption is None:
            caption = self.caption_batch({"image": pixels[None]}, beam_size=beam_size, max_length=max_length,
                                         num_captions=num_captions)[0]
        label = Path(image).name if isinstance(image, (str, os.PathLike)) else "input"
        if isinstance(caption, Caption):
            return overlay_figure(self.overlay(pixels, caption, label=label), columns=columns)
        ranked = [self.overlay(pixels, item, label=label, title=f"{rank}. {item.text}  (log p = {item.log_prob:.2f})")
                  for rank, item in enumerate(caption, start=1)]
        return comparison_figure(ranked, columns=columns)
