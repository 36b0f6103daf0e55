"""The LightningModule: encoder + decoder, wired to the objectives, decoding and metrics.

Every hyperparameter is an explicit keyword argument here, set from YAML (`model:` section) and
stored in the checkpoint with the vocabulary, so a checkpoint alone is enough for inference:

    module = CaptionModule.load_from_checkpoint(path, weights_only=True)
"""

from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI, instantiate_class
from lightning.pytorch.utilities import AttributeDict, rank_zero_info, rank_zero_warn
from torch import Tensor

from caption.attention import AttentionKind, HardEvalContext
from caption.decoder import Decoder
from caption.decoding import Caption, Decoded, beam_search, greedy
from caption.encoder import TORCHVISION_ENCODERS, EncoderName, build_encoder
from caption.errors import CaptionError, CheckpointError, ConfigError
from caption.evaluation import EpochCaptions
from caption.finetuning import EncoderFinetuning, check_finetuning, load_weights
from caption.metrics import METRICS
from caption.objectives import OBJECTIVES, BaselineKind, Credit, LossTerms, Reward
from caption.report import Evaluation
from caption.text import Vocabulary, vocabulary_difference


def first_occurrences(ids: Tensor) -> tuple[Tensor, Tensor]:
    """For ids (B,): the index of each distinct id's first row (U,) and, per row, which distinct id it holds (B,)."""
    distinct, rows = torch.unique(ids, return_inverse=True)  # (U,), (B,)
    positions = torch.arange(len(ids), device=ids.device)
    first = torch.full_like(distinct, len(ids)).scatter_reduce(0, rows, positions, reduce="amin")
    return first, rows


class NonFiniteLossError(CaptionError, FloatingPointError):
    """A NaN or infinite training loss, with model.on_nonfinite_loss: error."""


def check_settings(
    *, beam_size: int, max_caption_length: int, samples: int, probabilities: dict[str, float],
    weights: dict[str, float], rates: dict[str, float],
) -> None:
    """ConfigError naming the `model.` key whose value cannot work, before any training or decoding."""
    for key, value in {"beam_size": beam_size, "max_caption_length": max_caption_length, "samples": samples}.items():
        if value < 1:
            raise ConfigError(f"model.{key} must be >= 1, got {value}")
    for key, value in probabilities.items():
        if not 0 <= value <= 1:
            raise ConfigError(f"model.{key} is a probability: it must be in [0, 1], got {value}")
    for key, value in weights.items():
        if not value >= 0:
            raise ConfigError(f"model.{key} must be >= 0, got {value}")
    for key, value in rates.items():
        if not value > 0:
            raise ConfigError(f"model.{key} must be > 0, got {value}")


class CaptionModule(L.LightningModule):
    """Show, Attend and Tell as a LightningModule.

    Args:
        vocabulary: the words, specials first (linked from the data module by the CLI).
        attention: "soft" (eq. 14) or "hard" (eq. 12).
        encoder: "vgg16", "vgg19" (torchvision, paper), "resnet50", "resnet101", "resnet152" (torchvision, layer4)
            or "small_vgg" (built-in data, from scratch).
        encoder_weights: "imagenet", "none" or a path to a torchvision-format state dict.
        freeze_encoder: keep the CNN fixed all run (the paper); required for the feature cache. False: it trains,
            on the schedule of the three settings below (`caption.finetuning`).
        encoder_frozen_epochs: with freeze_encoder false: epochs the encoder stays frozen before it trains.
        encoder_finetune_stages: with freeze_encoder false: how many of the encoder's 5 stages train, from the
            top (ResNet: layer4 is 1, layer2-4 is 3; VGG: conv blocks); None: all.
        encoder_learning_rate: with freeze_encoder false: the encoder's learning rate (None: learning_rate).
        encoder_grid: torchvision encoders: average-pool the last conv map to grid × grid, L = grid² (None:
            ResNets 14, VGG unpooled, H/16 × W/16).
        encoder_channels: small_vgg only: channels of each conv block.
        encoder_kernel_sizes: small_vgg only: convolution size of each block (None: 3 everywhere); sets how
            much of the image one annotation sees (`caption.encoder.SmallVGG.receptive_field`).
        encoder_coordinates: small_vgg only: add x and y as input channels, so annotations know their place.
        embed_dim: m, the word embedding size (also the deep output's hidden size, eq. 7).
        hidden_dim: n, the LSTM size.
        attention_dim: size of the hidden layer of f_att (eq. 4).
        attention_layers: linear layers on the annotation side of f_att (original code: n_layers_att).
        init_layers: layers of f_init (eq. 5; 1 = one tanh layer, more adds ReLU layers first).
        gate: use the gate β of sec. 4.2.1 on the context.
        prev_word_output: add E y_{t-1} in the deep output (eq. 7; original code: prev2out).
        context_output: add L_z ẑ_t in the deep output (eq. 7; original code: ctx2out).
        dropout: dropout probability on h_t and on the deep output's hidden layer.
        inverse_temperature: multiplies the attention logits before the softmax (0: uniform α).
        semi_sampling: hard attention: probability per image of training on the expected context (sec. 4.1: 0.5).
        hard_eval_context: hard attention at validation, test and inference: "expected" (original code),
            "argmax" or "sample".
        alpha_c: soft attention: λ of the doubly stochastic regulariser (eq. 14) per caption; 0 turns it off
            (original code: alpha_c·B/L per caption; see `caption.objectives`).
        samples: hard attention: Monte Carlo samples N per caption (eq. 12).
        reinforce_weight: hard attention: λ_r per caption (original code: 0.1·B, 6.4 at B = 64).
        entropy_weight: hard attention: λ_e per caption (original code: 0.002·B, 0.128 at B = 64).
        baseline_decay: hard attention: moving-average decay of the baseline (paper: 0.9).
        reward: hard attention: "mean" per-token (original code) or "sum" (paper) log-likelihood.
        credit: hard attention, beyond the paper: "caption" (paper: each location gets the caption's reward) or
            "step" (only the words it can affect); see `caption.objectives`.
        baseline: hard attention: "moving_average" (paper), or beyond it "leave_one_out" (samples >= 2) or
            "learned" (b(h_{t-1})); see `caption.objectives`.
        semi_sampling_final: hard attention, beyond the paper: semi-sampling moves linearly from semi_sampling
            in the first epoch to this in the last (trainer.max_epochs); None: constant (paper).
        optimizer: "adam" (paper: Flickr30k, COCO) or "rmsprop" (paper: Flickr8k).
        learning_rate: optimizer step size.
        lr_scheduler: set by the CLI from `lr_scheduler:` (LightningCLI's own argument group, e.g.
            `--lr_scheduler ExponentialLR --lr_scheduler.gamma 0.8`): class_path and init_args; None: constant.
        max_caption_length: words generated at most when decoding.
        beam_size: beam width for test-time decoding (validation always decodes greedily).
        length_penalty: rank final beams by log p / length^length_penalty.
        on_nonfinite_loss: when the loss is NaN/inf on any rank: stop, naming the step and the loss terms
            ("error"), or skip the batch on every rank and count it in train/nonfinite_batches ("skip").
        compile: torch.compile the decoder step (the per-word recurrence of training and decoding).
        image_size: (H, W) of the encoder's training inputs, set from the data by the CLI
            (`data.image_size`): the pixel frame of the object boxes that attention accuracy scores against.
        init_from: a checkpoint of this project whose weights a new `fit` starts from (stage 2 of the two-stage
            recipe: fresh optimizer, epochs and steps); a run resumed with --ckpt_path keeps its own weights.
    """

    def __init__(
        self,
        *,
        vocabulary: list[str],
        attention: AttentionKind = "soft",
        encoder: EncoderName = "vgg16",
        encoder_weights: str = "imagenet",
        freeze_encoder: bool = True,
        encoder_frozen_epochs: int = 0,
        encoder_finetune_stages: int | None = None,
        encoder_learning_rate: float | None = None,
        encoder_grid: int | None = None,
        encoder_channels: tuple[int, ...] = (16, 32, 64, 128),
        encoder_kernel_sizes: tuple[int, ...] | None = None,
        encoder_coordinates: bool = False,
        embed_dim: int = 512,
        hidden_dim: int = 1800,
        attention_dim: int = 512,
        attention_layers: int = 1,
        init_layers: int = 1,
        gate: bool = True,
        prev_word_output: bool = True,
        context_output: bool = True,
        dropout: float = 0.5,
        inverse_temperature: float = 1.0,
        alpha_c: float = 1.0,
        samples: int = 1,
        reinforce_weight: float = 6.4,
        entropy_weight: float = 0.128,
        semi_sampling: float = 0.5,
        baseline_decay: float = 0.9,
        reward: Reward = "mean",
        credit: Credit = "caption",
        baseline: BaselineKind = "moving_average",
        semi_sampling_final: float | None = None,
        hard_eval_context: HardEvalContext = "expected",
        optimizer: Literal["adam", "rmsprop"] = "adam",
        learning_rate: float = 1e-3,
        lr_scheduler: dict[str, Any] | None = None,
        max_caption_length: int = 20,
        beam_size: int = 3,
        length_penalty: float = 0.0,
        on_nonfinite_loss: Literal["error", "skip"] = "error",
        compile: bool = False,
        image_size: tuple[int, int] | None = None,
        init_from: str | None = None,
    ):
        super().__init__()
        check_settings(
            beam_size=beam_size, max_caption_length=max_caption_length, samples=samples,
            probabilities={"dropout": dropout, "semi_sampling": semi_sampling, "baseline_decay": baseline_decay,
                           "semi_sampling_final": 0.0 if semi_sampling_final is None else semi_sampling_final},
            weights={"alpha_c": alpha_c, "reinforce_weight": reinforce_weight, "entropy_weight": entropy_weight,
                     "length_penalty": length_penalty, "inverse_temperature": inverse_temperature},  # 0: uniform α
            rates={"learning_rate": learning_rate},
        )
        hard_only = {"samples": samples > 1, "credit": credit != "caption", "baseline": baseline != "moving_average",
                     "semi_sampling_final": semi_sampling_final is not None}
        if attention != "hard" and any(hard_only.values()):
            keys = ", ".join(f"model.{key}" for key, set_ in hard_only.items() if set_)
            raise ConfigError(f"{keys} only make sense with model.attention: hard (this run is {attention})")
        check_finetuning(encoder=encoder, freeze_encoder=freeze_encoder, frozen_epochs=encoder_frozen_epochs,
                         stages=encoder_finetune_stages, learning_rate=encoder_learning_rate)
        self.save_hyperparameters()
        self.vocabulary = Vocabulary(vocabulary)
        self.encoder = build_encoder(
            encoder, weights=encoder_weights, freeze=freeze_encoder, grid=encoder_grid, channels=encoder_channels,
            kernel_sizes=encoder_kernel_sizes, coordinates=encoder_coordinates,
        )
        self.decoder = Decoder(
            vocab_size=len(self.vocabulary),
            annotation_dim=self.encoder.dim,
            embed_dim=embed_dim,
            hidden_dim=hidden_dim,
            attention_dim=attention_dim,
            attention=attention,
            attention_layers=attention_layers,
            init_layers=init_layers,
            gate=gate,
            prev_word_output=prev_word_output,
            context_output=context_output,
            dropout=dropout,
            inverse_temperature=inverse_temperature,
            semi_sampling=semi_sampling,
            hard_eval_context=hard_eval_context,
        )
        weights = {
            "soft": {"alpha_c": alpha_c},
            "hard": {"reinforce_weight": reinforce_weight, "entropy_weight": entropy_weight,
                     "baseline_decay": baseline_decay, "reward": reward, "credit": credit, "baseline": baseline,
                     "samples": samples, "hidden_dim": hidden_dim},
        }
        self.objective = OBJECTIVES[attention](**weights[attention])  # eq. 14 or eq. 12, with its weights
        self._epoch_captions = EpochCaptions()  # validation's and test's, scored at the epoch's end
        self.nonfinite_batches = 0  # batches skipped for a non-finite loss (on_nonfinite_loss: skip)
        if compile:  # compiles the method only: parameter names, hence checkpoints, stay the same
            self.decoder.step = torch.compile(self.decoder.step)

    @property
    def hparams_initial(self) -> AttributeDict:
        """The hyperparameters loggers record: the vocabulary by its size only (10,000 words on COCO; the
        checkpoint keeps the words, in `hparams`)."""
        hparams = super().hparams_initial
        words = hparams.pop("vocabulary", None)
        if words is not None:
            hparams["vocabulary_size"] = len(words)
        return hparams

    # ----------------------------------------------------------------------------- model
    def annotations(self, batch: dict[str, Any]) -> Tensor:
        """(B, L, D) annotations: from the cache when the batch has them, else through the CNN, which sees each
        distinct image of the batch once (a training batch holds one row per caption, often five per image:
        `data.batch_by_image`)."""
        if "annotations" in batch:
            return batch["annotations"].float()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.hparams.freeze_encoder):
            if "image_id" not in batch:  # images from outside the dataset
                return self.encoder(batch["image"])  # (B, L, D)
            first, rows = first_occurrences(batch["image_id"])  # (U,), (B,)
            return self.encoder(batch["image"][first])[rows]  # (U, L, D) -> (B, L, D)

    def generate(
        self, annotations: Tensor, *, beam_size: int | None = None, max_length: int | None = None,
        num_captions: int = 1,
    ) -> Decoded:
        """Captions for a batch of annotations: greedy when the beam size is 1, else beam search.
        `beam_size` and `max_length` default to the model's `beam_size` and `max_caption_length`;
        `num_captions` = n > 1: the n best beams of each image, best first (B·n rows; the beam at least n wide)."""
        beam_size = max(self.hparams.beam_size, num_captions) if beam_size is None else beam_size
        max_length = self.hparams.max_caption_length if max_length is None else max_length
        check_settings(beam_size=beam_size, max_caption_length=max_length, samples=1, probabilities={}, weights={},
                       rates={})
        if not 1 <= num_captions <= beam_size:
            raise ConfigError(f"num_captions must be between 1 and the beam size ({beam_size}), got {num_captions}")
        if beam_size == 1:
            return greedy(self.decoder, annotations, max_length=max_length)
        return beam_search(
            self.decoder, annotations, beam_size=beam_size, max_length=max_length,
            length_penalty=self.hparams.length_penalty, num_best=num_captions,
        )

    # -------------------------------------------------------------------------- training
    def training_step(self, batch: dict[str, Any], batch_index: int) -> Tensor | None:
        annotations, captions = self.annotations(batch), batch["caption"]  # (B, L, D), (B, T+1)
        if self.hparams.samples > 1:  # N Monte Carlo samples per caption (eq. 12)
            annotations = annotations.repeat_interleave(self.hparams.samples, dim=0)
            captions = captions.repeat_interleave(self.hparams.samples, dim=0)
        output = self.decoder(annotations, captions)
        targets = captions[:, 1:]
        mask = (targets != Vocabulary.PAD).float()  # (B, T)
        terms = self.objective(output, targets, mask)
        if not self._finite_on_every_rank(terms, batch_index):
            return None  # Lightning then skips backward and the optimizer step; the baseline is left as it was
        self.objective.update(terms, self._sum_over_ranks)  # hard attention: the moving-average baseline
        logged = {f"train/{name}": value for name, value in terms.as_dict().items() if name != "tokens"}
        logged["train/beta"] = (output.beta * mask).sum() / mask.sum()
        self.log_dict(logged, prog_bar=False, batch_size=captions.shape[0])
        self.log("loss", terms.loss, prog_bar=True, logger=False, batch_size=captions.shape[0])
        return terms.loss

    def _sum_over_ranks(self, value: Tensor) -> Tensor:
        return self.trainer.strategy.reduce(value, reduce_op="sum") if self._trainer is not None else value

    def _finite_on_every_rank(self, terms: LossTerms, batch_index: int) -> bool:
        """False (skip) or NonFiniteLossError (error) when the loss is NaN/inf on any rank. The decision is
        all-reduced, so every rank skips or stops together and DDP never waits on a rank that left."""
        nonfinite = not bool(torch.isfinite(terms.loss))
        if self._trainer is not None:
            nonfinite = self.trainer.strategy.reduce_boolean_decision(nonfinite, all=False)
        if not nonfinite:
            return True
        values = ", ".join(f"{name}={value.item():.4g}" for name, value in terms.as_dict().items())
        where = f"global step {self.global_step} (epoch {self.current_epoch}, batch {batch_index})"
        if self.hparams.on_nonfinite_loss == "error":
            raise NonFiniteLossError(
                f"non-finite training loss at {where}; this rank's loss terms: {values}. Lower model.learning_rate, "
                "set trainer.gradient_clip_val, or set model.on_nonfinite_loss: skip to skip such batches"
            )
        self.nonfinite_batches += 1
        rank_zero_warn(f"skipped a batch with a non-finite loss at {where} ({values}); {self.nonfinite_batches} so far")
        self.log("train/nonfinite_batches", float(self.nonfinite_batches))
        return False

    def configure_callbacks(self) -> list[L.Callback]:
        """A torchvision encoder that trains (freeze_encoder: false) does so on its schedule (`caption.finetuning`)."""
        if self.hparams.freeze_encoder or self.hparams.encoder not in TORCHVISION_ENCODERS:
            return []
        rate = self.hparams.encoder_learning_rate or self.hparams.learning_rate
        return [EncoderFinetuning(frozen_epochs=self.hparams.encoder_frozen_epochs,
                                  stages=self.hparams.encoder_finetune_stages, learning_rate=rate)]

    def on_train_epoch_start(self) -> None:
        """Hard attention with semi_sampling_final: this epoch's semi-sampling probability, on a linear schedule."""
        final = self.hparams.semi_sampling_final
        if final is not None:  # set only with hard attention (refused otherwise)
            progress = self.current_epoch / max(1, (self.trainer.max_epochs or 1) - 1)
            start = self.hparams.semi_sampling
            self.decoder.semi_sampling = start + (final - start) * min(1.0, progress)
            self.log("train/semi_sampling", self.decoder.semi_sampling)

    def on_fit_start(self) -> None:
        """A new run with model.init_from starts from that checkpoint's weights (a resumed one has its own)."""
        if self.hparams.init_from and self.trainer.ckpt_path is None:
            load_weights(self, self.hparams.init_from)

    def configure_optimizers(self) -> Any:
        """The optimizer over the parameters that train now (a fine-tuned encoder joins later, in its own group:
        `caption.finetuning`), and the `lr_scheduler:` of the config if there is one (ReduceLROnPlateau with its
        `monitor`, e.g. val/bleu4, as LightningCLI itself would return it)."""
        parameters = [p for p in self.parameters() if p.requires_grad]
        if self.hparams.optimizer == "rmsprop":
            optimizer = torch.optim.RMSprop(parameters, lr=self.hparams.learning_rate)
        else:
            # Fused Adam: one kernel per step instead of ~10 passes over every tensor (CPU step at (a): -11%).
            # Lightning refuses gradient clipping with a fused optimizer under mixed precision: not there.
            mixed = self._trainer is not None and "mixed" in str(self.trainer.precision)
            optimizer = torch.optim.Adam(parameters, lr=self.hparams.learning_rate, fused=not mixed)
        if self.hparams.lr_scheduler is None:
            return optimizer
        scheduler = instantiate_class(optimizer, self.hparams.lr_scheduler)
        return LightningCLI.configure_optimizers(self, optimizer, scheduler)

    # ------------------------------------------------------------------------ evaluation
    def _decode_batch(self, batch: dict[str, Any], beam_size: int) -> None:
        self._epoch_captions.add(batch, self.generate(self.annotations(batch), beam_size=beam_size).captions(
            self.vocabulary))

    def _log_epoch(self, split: str, *, beam_size: int, metrics: tuple[str, ...], prog_bar: bool) -> Evaluation:
        """Score the epoch's captions (`caption.evaluation`) and log every score as split/name."""
        evaluation = self._epoch_captions.score(self.trainer, split=split, beam_size=beam_size, metrics=metrics,
                                                image_size=self.hparams.image_size)
        # equal on every rank already: sync_dist with "max" keeps them exact (and Lightning quiet)
        self.log_dict({f"{split}/{name}": value for name, value in evaluation.logged().items()}, prog_bar=prog_bar,
                      sync_dist=True, reduce_fx="max")
        return evaluation

    def validation_step(self, batch: dict[str, Any], batch_index: int) -> None:
        self._decode_batch(batch, beam_size=1)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", beam_size=1, metrics=("bleu4", "cider"), prog_bar=True)

    def test_step(self, batch: dict[str, Any], batch_index: int) -> None:
        self._decode_batch(batch, beam_size=self.hparams.beam_size)

    def on_test_epoch_end(self) -> None:
        evaluation = self._log_epoch("test", beam_size=self.hparams.beam_size, metrics=METRICS, prog_bar=False)
        rank_zero_info(f"Example test captions (beam {self.hparams.beam_size}):\n{evaluation.examples()}")

    def predict_step(self, batch: dict[str, Any], batch_index: int) -> list[tuple[int | str, Caption]]:
        """`caption predict`: (image id, or file name for a folder of images, caption) for each image."""
        if not len(batch["image_id"]):  # every image of the batch failed to load: named, and skipped
            return []
        keys = batch["file"] if "file" in batch else batch["image_id"].tolist()
        return list(zip(keys, self.generate(self.annotations(batch)).captions(self.vocabulary)))

    # ----------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["nonfinite_batches"] = self.nonfinite_batches

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse checkpoints of another project or trained on another vocabulary, by name."""
        hyperparameters = checkpoint.get("hyper_parameters", {})
        if "vocabulary" not in hyperparameters:
            raise CheckpointError(
                "this checkpoint has no vocabulary in its hyperparameters: it was not written by this "
                "project's `caption fit` (or by an old version); retrain or pick another checkpoint"
            )
        if hyperparameters["vocabulary"] != self.hparams.vocabulary:
            raise CheckpointError(
                "the checkpoint's vocabulary differs from the one built from this config's data "
                f"({vocabulary_difference(hyperparameters['vocabulary'], self.hparams.vocabulary)}): "
                "use the config the checkpoint was trained with"
            )
        self.nonfinite_batches = checkpoint.get("nonfinite_batches", 0)
        state = checkpoint.get("state_dict", {})
        if "baseline.value" in state:  # written before the baseline moved into the hard-attention objective
            baseline = state.pop("baseline.value")
            if self.hparams.attention == "hard":
                state["objective.baseline.value"] = baseline
