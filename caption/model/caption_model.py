"""The captioning model of sec. 3 as inference runs it: the encoder's annotation vectors of an image (sec. 3.1.1),
the decoder's captions of them (sec. 3.1.2, decoded by `caption.model.search`), its vocabulary and its settings.

    model = CaptionModel(vocabulary=Vocabulary(words), settings=ModelSettings.of(**groups))   # eval() before use
    decoded = model.generate(model.annotations({"image": images}))   # (B, 3, H, W) -> `Decoded`
    captions = decoded.captions(model.vocabulary)                     # a `Caption` per image

A checkpoint of `caption fit` stores the settings as plain dicts, one per group, read back by `ModelSettings.of`;
`caption.inference.load_trained` builds the model from them and loads its weights (`encoder.*`, `decoder.*`), once
`check_sizes` has found every size the settings set in the weights' shapes (`size_problem`). The LightningModule that
trains it (`caption.training.module.CaptionModule`) holds one as `model`, and its checkpoints name the weights as the
model does (`checkpoint_state`), beside the objective's state (`TRAINING_STATE`). Nothing here reads a file or asks
the machine: what does is passed in (the encoder's weights `reader`, the search's `free_memory`).
"""

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from caption.errors import CheckpointError, ConfigError
from caption.model.attention import AttentionSettings
from caption.model.captions import Decoded
from caption.model.decoder import Decoder, DecoderSettings
from caption.model.decoding import DecodingSettings
from caption.model.encoder import EncoderSettings, WeightsReader, build_encoder
from caption.model.kinds import KINDS, kind_of
from caption.model.objectives import HardObjectiveSettings, SoftObjectiveSettings
from caption.model.search import FreeMemory, generate
from caption.model.self_critical import SelfCriticalSettings
from caption.model.vocabulary import Vocabulary

# the prefixes of what a checkpoint holds beside the model's weights: the training's own state (hard attention's
# baseline), which inference leaves out
TRAINING_STATE = ("objective.",)
MODEL = "model."  # the prefix of the CaptionModel's weights in the LightningModule that trains it


def checkpoint_state(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The training module's state dict as a checkpoint stores it: the CaptionModel's weights under their own names
    (`encoder.*`, `decoder.*`, as `CaptionModel.load_state_dict` takes them), the objective's state (`objective.*`)."""
    return {name.removeprefix(MODEL): value for name, value in state.items()}


def module_state(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A checkpoint's state dict under the training module's names (`checkpoint_state` undone)."""
    return {name if name.startswith(TRAINING_STATE) else MODEL + name: value for name, value in state.items()}


@dataclass(frozen=True)
class ModelSettings:
    """The settings of a trained model, typed, group by group as in a config's `model:` section: what builds its
    encoder and decoder and decodes with them, and the objective it was trained on (the optimizer's settings are the
    training's alone: `caption.training.optimization`)."""

    encoder: EncoderSettings
    decoder: DecoderSettings
    attention: AttentionSettings
    soft: SoftObjectiveSettings | None  # soft attention only
    hard: HardObjectiveSettings | None  # hard attention only
    decoding: DecodingSettings
    self_critical: SelfCriticalSettings | None = None  # null: cross-entropy training

    @classmethod
    def of(cls, **groups: Any) -> "ModelSettings":
        """The groups as dataclasses (a checkpoint stores plain dicts; a group not given: its defaults, or None for an
        optional one), the objective group of the attention kind (`caption.model.kinds`) given its defaults when
        unset; a ConfigError for an unknown kind, a group of another kind, or a setting a group does not have."""
        settings = {field.name: typed(field.type, groups[field.name], field.name) if field.name in groups
                    else unset(field.type) for field in fields(cls)}
        name = settings["attention"].kind
        kind = kind_of(name)
        for group in ("soft", "hard"):
            if group != kind.group and settings[group] is not None:
                kinds = " or ".join(sorted(other for other, entry in KINDS.items() if entry.group == group))
                raise ConfigError(f"model.{group} only applies to model.attention.kind: {kinds} (this run's is "
                                  f"{name}): leave model.{group} unset (null)")
        settings[kind.group] = settings[kind.group] or kind.settings()
        if settings["self_critical"] is not None and settings[kind.group].box_supervision > 0:
            raise ConfigError(f"model.{kind.group}.box_supervision weighs a term of the cross-entropy objective, which "
                              "model.self_critical replaces with CIDEr-D: supervise the attention in the stage before "
                              f"and leave model.{kind.group}.box_supervision at 0 here")
        return cls(**settings)

    def as_dicts(self) -> dict[str, dict[str, Any] | None]:
        """Each group as a plain dict (None for the objective of the other kind), for the checkpoint."""
        return {name: None if value is None else asdict(value) for name, value in vars(self).items()}


def typed(kind: Any, value: Any, key: str) -> Any:
    """`value` (a dataclass, a plain dict as checkpoints store it, or None) as the dataclass `kind` (`X | None`: X)."""
    kind = next((arg for arg in getattr(kind, "__args__", ()) if arg is not type(None)), kind)
    if value is None or isinstance(value, kind):
        return value
    unknown = set(value) - {field.name for field in fields(kind)}
    if unknown:
        raise ConfigError(f"model.{key} has no setting {', '.join(sorted(unknown))}: see `caption fit --help`")
    return kind(**value)


def unset(kind: Any) -> Any:
    """A group not given: None when it is optional (`X | None`), else its defaults."""
    return None if type(None) in getattr(kind, "__args__", ()) else kind()


def first_occurrences(ids: Tensor) -> tuple[Tensor, Tensor]:
    """For ids (B,): the index of each distinct id's first row (U,) and, per row, which distinct id it holds (B,)."""
    distinct, rows = torch.unique(ids, return_inverse=True)  # (U,), (B,)
    positions = torch.arange(len(ids), device=ids.device)
    first = torch.full_like(distinct, len(ids)).scatter_reduce(0, rows, positions, reduce="amin")
    return first, rows


def batch_annotations(encoder: nn.Module, batch: Mapping[str, Any], *, freeze: bool) -> Tensor:
    """(B, L, D) annotations of a batch: from the cache when the batch has them, else through the CNN (without its
    gradient when `freeze`), which sees each distinct image of the batch once (a training batch holds one row per
    caption, often five per image: `data.batch_by_image`)."""
    if "annotations" in batch:
        return batch["annotations"].float()
    with torch.set_grad_enabled(torch.is_grad_enabled() and not freeze):
        if "image_id" not in batch:  # images from outside the dataset
            return encoder(batch["image"])  # (B, L, D)
        first, rows = first_occurrences(batch["image_id"])  # (U,), (B,)
        return encoder(batch["image"][first])[rows]  # (U, L, D) -> (B, L, D)


def build_decoder(settings: ModelSettings, *, vocabulary_size: int, annotation_dim: int) -> Decoder:
    """The decoder of `settings` (the LSTM, f_att and φ of its attention kind, the deep output) over `vocabulary_size`
    words (V, specials included) and annotations of `annotation_dim` (D); hard attention semi-samples as its objective
    says."""
    phi = kind_of(settings.attention.kind).phi(eval_context=settings.decoding.hard_eval_context)
    hard_only = {"semi_sampling": settings.hard.semi_sampling} if settings.hard else {}
    return Decoder(vocab_size=vocabulary_size, annotation_dim=annotation_dim, settings=settings.decoder,
                   attention=settings.attention, phi=phi, **hard_only)


class CaptionModel(nn.Module):
    """The encoder and decoder of `settings` over `vocabulary`: images in, captions out.

    Args:
        vocabulary: the words, specials first.
        settings: every group of the model's settings (`ModelSettings`).
        reader: what reads the encoder's weights when model.encoder.weights is not "none"
            (`caption.model.encoder.WeightsReader`).
    """

    def __init__(self, *, vocabulary: Vocabulary, settings: ModelSettings, reader: WeightsReader | None = None):
        super().__init__()
        self.vocabulary = vocabulary
        self.settings = settings
        self.encoder = build_encoder(settings.encoder, reader=reader)
        self.decoder = build_decoder(settings, vocabulary_size=len(vocabulary), annotation_dim=self.encoder.dim)

    @property
    def device(self) -> torch.device:
        """Where the weights are, hence where captioning runs."""
        return next(self.parameters()).device

    def annotations(self, batch: Mapping[str, Any]) -> Tensor:
        """(B, L, D) annotations of {"image": (B, 3, H, W)} or {"annotations": (B, L, D)} (`batch_annotations`)."""
        return batch_annotations(self.encoder, batch, freeze=self.settings.encoder.freeze)

    def generate(self, annotations: Tensor, *, beam_size: int | None = None, max_length: int | None = None,
                 num_captions: int = 1, free_memory: FreeMemory | None = None) -> Decoded:
        """Captions of annotations (B, L, D): the model's decoding settings, unless `beam_size` or `max_length` is
        given (its blocking rules, diverse groups and bad endings among this vocabulary's words always); `num_captions`
        = n: the n best of each image; with `free_memory`, a beam search larger than the memory free is refused
        (`caption.model.search.generate`)."""
        return generate(self.decoder, annotations, decoding=self.settings.decoding, vocabulary=self.vocabulary,
                        beam_size=beam_size, max_length=max_length, num_captions=num_captions,
                        free_memory=free_memory)


def check_sizes(hyperparameters: Mapping[str, Any], weights: Mapping[str, Tensor], *,
                origin: str | os.PathLike) -> None:
    """A CheckpointError naming `origin`, the file the settings were read from (a checkpoint, a model folder's
    config.json), when a size `hyperparameters` set is not the one `weights` have (`size_problem`): before a model
    of that size is built."""
    problem = size_problem(hyperparameters, {name: tuple(tensor.shape) for name, tensor in weights.items()})
    if problem is not None:
        raise CheckpointError(f"{origin}: {problem}")


MAX_IMAGE_SIDE = 8192  # the largest input side a model's settings may name: 4x the 2048 of the largest ones trained
# the total downsampling of each torchvision encoder's annotations: VGG's conv5 (4 max-pools), ResNet's layer4
DOWNSAMPLING = {"vgg16": 16, "vgg19": 16, "resnet50": 32, "resnet101": 32, "resnet152": 32}
ANNOTATION_DIM = {"vgg16": 512, "vgg19": 512, "resnet50": 2048, "resnet101": 2048, "resnet152": 2048}
Shapes = Mapping[str, tuple[int, ...]]


def size_problem(hyperparameters: Mapping[str, Any], shapes: Shapes) -> str | None:
    """What is wrong when a size the settings set (the vocabulary's, the decoder's, f_att's, the encoder's channels,
    kernels and annotation size, the input image's) differs from the one the weights of `shapes` were trained with,
    or names an input the encoder cannot have been trained on; None when they agree. Read from the settings and the
    weights' shapes alone: nothing is built."""
    groups = {field.name: hyperparameters[field.name] for field in fields(ModelSettings)
              if field.name in hyperparameters}
    settings = ModelSettings.of(**groups)  # dataclasses only: their range checks, no tensor
    found = [*decoder_sizes(settings, len(hyperparameters.get("vocabulary") or ()), shapes),
             *encoder_sizes(settings.encoder, shapes)]
    mismatch = next(((key, value, trained, weight) for key, value, trained, weight in found
                     if trained is not None and not same_size(value, trained)), None)
    if mismatch is not None:
        key, value, trained, weight = mismatch
        return (f"{key} is {value!r}, but the weights were trained with {trained!r} ({weight}): the settings are not "
                "those of these weights; export the model again")
    return input_size_problem(settings.encoder, hyperparameters.get("image_size"))


def same_size(value: Any, trained: Any) -> bool:
    """Whether a setting's `value` is the `trained` one, in type too (1e9 read from JSON is a float, 16.0 no int)."""
    if isinstance(trained, tuple):
        return isinstance(value, tuple) and len(value) == len(trained) and all(map(same_size, value, trained))
    return type(value) is type(trained) and value == trained


SizeEvidence = tuple[str, Any, Any, str]  # (setting's key, its value, what the weights say, the weight that says it)


def axis(shapes: Shapes, weight: str, index: int) -> tuple[Any, str]:
    """The size along `index` of weight `weight` (None when it is not there) and how to name it."""
    shape = shapes.get(weight)
    if shape is None or len(shape) <= index:
        return None, weight
    return shape[index], f"{weight} is {shape}"


def numbered(shapes: Shapes, prefix: str, suffix: str = ".weight") -> list[str]:
    """The weights `prefix`N`suffix` of `shapes`, by N."""
    names = [name for name in shapes if name.startswith(prefix) and name.endswith(suffix)
             and name[len(prefix):-len(suffix)].isdigit()]
    return sorted(names, key=lambda name: int(name[len(prefix):-len(suffix)]))


def decoder_sizes(settings: ModelSettings, vocabulary_size: int, shapes: Shapes) -> list[SizeEvidence]:
    """The decoder's and f_att's sizes beside those of the weights (`decoder.*`)."""
    decoder, attention = settings.decoder, settings.attention
    evidence = [("the vocabulary's size", vocabulary_size, *axis(shapes, "decoder.embedding.weight", 0)),
                ("model.decoder.embed_dim", decoder.embed_dim, *axis(shapes, "decoder.embedding.weight", 1)),
                ("model.decoder.hidden_dim", decoder.hidden_dim, *axis(shapes, "decoder.init_h.weight", 0)),
                ("model.attention.dim", attention.dim, *axis(shapes, "decoder.scorer.score.weight", 1))]
    if "decoder.init_h.weight" in shapes:
        init = numbered(shapes, "decoder.init_hidden_layers.")
        projections = numbered(shapes, "decoder.scorer.annotation_projection.")
        evidence += [("model.decoder.init_layers", decoder.init_layers, len(init) + 1,
                      f"{len(init)} decoder.init_hidden_layers"),
                     ("model.attention.layers", attention.layers, len(projections),
                      f"{len(projections)} decoder.scorer.annotation_projection layers")]
    return evidence


def encoder_sizes(encoder: EncoderSettings, shapes: Shapes) -> list[SizeEvidence]:
    """The encoder's sizes beside those of the weights: small_vgg's channels, kernels and input channels, a
    torchvision encoder's annotation size (D, as f_init reads it: `decoder.init_h.weight`)."""
    annotation_dim, weight = axis(shapes, "decoder.init_h.weight", 1)
    if encoder.name in ANNOTATION_DIM:
        return [(f"the annotation size of model.encoder.name {encoder.name!r}", ANNOTATION_DIM[encoder.name],
                 annotation_dim, weight)]
    convolutions = [name for name in numbered(shapes, "encoder.features.") if len(shapes[name]) == 4]
    if not convolutions:
        return []
    named = f"{len(convolutions)} convolutions encoder.features.*.weight"
    kernels = encoder.kernel_sizes if encoder.kernel_sizes is not None else (3,) * len(encoder.channels)
    return [("model.encoder.channels", tuple(encoder.channels), tuple(shapes[name][0] for name in convolutions), named),
            ("model.encoder.kernel_sizes", tuple(kernels), tuple(shapes[name][2] for name in convolutions), named),
            ("model.encoder.coordinates", encoder.coordinates, shapes[convolutions[0]][1] == 5,
             f"{convolutions[0]} is {shapes[convolutions[0]]}")]


def downsampling(encoder: EncoderSettings) -> int:
    """How many input pixels one annotation steps over: small_vgg's max-pools, VGG's 16, ResNet's 32."""
    return DOWNSAMPLING.get(encoder.name, 2 ** (len(encoder.channels) - 1))


def input_size_problem(encoder: EncoderSettings, image_size: Any) -> str | None:
    """What is wrong with the model's `image_size` (H, W of the inputs it was trained on; None: not recorded): not
    two whole numbers, smaller than the encoder's downsampling (no annotation at all) or larger than
    `MAX_IMAGE_SIDE`; None when it could have been trained on."""
    if image_size is None:
        return None
    least = downsampling(encoder)
    sides = tuple(image_size) if isinstance(image_size, (list, tuple)) else ()
    if len(sides) == 2 and all(type(side) is int and least <= side <= MAX_IMAGE_SIDE for side in sides):
        return None
    return (f"model.image_size is {image_size!r}, but encoder {encoder.name} was trained on inputs of two whole "
            f"sides (H, W) of {least} (its downsampling) to {MAX_IMAGE_SIDE} pixels: the settings are damaged; "
            "export the model again")
