"""The LightningModule: the captioning model (`module.model`, a `CaptionModel`), wired to its objective, decoding and
metrics.

Its settings come in typed groups, set from a config's `model:` section, one YAML mapping per group: the trained
model's (`caption.model.caption_model.ModelSettings`) and the optimizer's (`caption.training.optimization`). They are
stored in the checkpoint as plain dicts with the vocabulary, so a checkpoint alone is enough for inference:
`caption.inference.load_trained(path)` builds the same `CaptionModel` from it, weights_only=True, without this
module: the checkpoint names the weights as the model does (`checkpoint_state`), beside the objective's state.
"""

from dataclasses import asdict, replace
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import AttributeDict, rank_zero_info, rank_zero_warn
from torch import Tensor

from caption.config.keys import dotted
from caption.errors import CaptionError, CaptionWarning, CheckpointError, ConfigError
from caption.evaluation.grid import attention_grid
from caption.evaluation.metrics import TEST_METRICS
from caption.evaluation.report import GREEDY, GREEDY_METRICS, Evaluation, not_looking
from caption.evaluation.results import Result, result
from caption.evaluation.scoring import EpochCaptions
from caption.io import encoder_weights
from caption.io.class_paths import instantiate, scheduler_bases
from caption.io.device import free_memory as device_free_memory
from caption.model.attention import AttentionSettings
from caption.model.caption_model import (
    CaptionModel,
    ModelSettings,
    checkpoint_state,
    first_occurrences,
    module_state,
    typed,
)
from caption.model.captions import Caption
from caption.model.decoder import DecoderSettings
from caption.model.decoding import DecodingSettings
from caption.model.encoder import TORCHVISION_ENCODERS, EncoderSettings, annotation_shape
from caption.model.kinds import kind_of
from caption.model.objectives import (
    HardObjectiveSettings,
    LossTerms,
    SoftObjectiveSettings,
)
from caption.model.self_critical import SelfCriticalSettings, SelfCriticalTerms
from caption.model.vocabulary import Vocabulary, check_vocabulary
from caption.training.finetuning import EncoderFinetuning, load_weights
from caption.training.optimization import OptimizationSettings
from caption.training.memory import check_training_memory, training_memory
from caption.training.self_critical import SelfCritical


class NonFiniteLossError(CaptionError, FloatingPointError):
    """A NaN or infinite training loss, with model.optimization.on_nonfinite_loss: error."""


class CaptionModule(L.LightningModule):
    """Show, Attend and Tell as a LightningModule.

    Args:
        vocabulary: the words, specials first (linked from the data module by the CLI).
        encoder: the CNN (`caption.model.encoder.EncoderSettings`).
        decoder: the LSTM and its deep output (`caption.model.decoder.DecoderSettings`).
        attention: soft or hard, and f_att (`caption.model.attention.AttentionSettings`).
        soft: soft attention's objective, eq. 14 (`caption.model.objectives.SoftObjectiveSettings`); only with
            attention.kind soft (null: its defaults).
        hard: hard attention's objective, eq. 12, and its variance reduction
            (`caption.model.objectives.HardObjectiveSettings`); only with attention.kind hard (null: its defaults).
        decoding: test-time decoding (`caption.model.decoding.DecodingSettings`; diverse beams, blocking rules,
            sampling: --help-all).
        optimization: the optimizer, its step size, what to do on a non-finite loss, the weights to start from.
        self_critical: self-critical training on CIDEr-D after cross-entropy (`caption.model.self_critical`); null:
            cross-entropy (eq. 14 or eq. 12).
        lr_scheduler: set by the CLI from `lr_scheduler:` (LightningCLI's own argument group, e.g.
            `--lr_scheduler ExponentialLR --lr_scheduler.gamma 0.8`): class_path and init_args; None: constant.
        image_size: (H, W) of the encoder's training inputs, set from the data by the CLI (`data.image_size`): the
            pixel frame of the object boxes that attention accuracy scores against.
    """

    def __init__(
        self,
        *,
        vocabulary: list[str],
        encoder: EncoderSettings = EncoderSettings(),
        decoder: DecoderSettings = DecoderSettings(),
        attention: AttentionSettings = AttentionSettings(),
        soft: SoftObjectiveSettings | None = None,
        hard: HardObjectiveSettings | None = None,
        decoding: DecodingSettings = DecodingSettings(),
        optimization: OptimizationSettings = OptimizationSettings(),
        self_critical: SelfCriticalSettings | None = None,
        lr_scheduler: dict[str, Any] | None = None,
        image_size: tuple[int, int] | None = None,
    ):
        super().__init__()
        settings = ModelSettings.of(encoder=encoder, decoder=decoder, attention=attention, soft=soft, hard=hard,
                                    decoding=decoding, self_critical=self_critical)
        self.optimization = typed(OptimizationSettings, optimization, "optimization")
        # plain dicts in the checkpoint, which loads with weights_only=True
        groups = settings.as_dicts()  # the optimizer's between decoding and self_critical, as a config lists them
        self_critical_group = groups.pop("self_critical")
        self.save_hyperparameters({"vocabulary": vocabulary, **groups, "optimization": asdict(self.optimization),
                                   "self_critical": self_critical_group, "lr_scheduler": lr_scheduler,
                                   "image_size": image_size})
        # images in, captions out; a checkpoint names its weights as it does (`checkpoint_state`)
        self.model = CaptionModel(vocabulary=Vocabulary(vocabulary), settings=self.built_settings(settings),
                                  reader=encoder_weights)
        kind = kind_of(settings.attention.kind)  # eq. 12 with its baseline (hard), eq. 14 (soft)
        self.objective = kind.objective(getattr(settings, kind.group), hidden_dim=settings.decoder.hidden_dim)
        self.self_critical = None if settings.self_critical is None else SelfCritical(
            settings.self_critical, decoding=settings.decoding, vocabulary=self.model.vocabulary)
        self._epoch_captions = EpochCaptions()  # validation's and test's, scored at the epoch's end
        self._greedy_captions = EpochCaptions()  # test's, greedy beside the model's beam (validation decodes so)
        self.nonfinite_batches = 0  # batches skipped for a non-finite loss (on_nonfinite_loss: skip)
        self.not_looking: str | None = None  # why attention did not look at a validation, once said (`not_looking`)
        self.predict_num_captions = 1  # captions per image of `predict_step` (caption predict's writer sets it)
        if self.optimization.compile:  # compiles the method only: parameter names, hence checkpoints, stay the same
            self.model.decoder.step = torch.compile(self.model.decoder.step)

    def built_settings(self, settings: ModelSettings) -> ModelSettings:
        """The settings the model is built with: those given, but with model.optimization.init_from the encoder's
        weights are not read ("none"), since that checkpoint supplies every weight (`on_fit_start`), so the file
        model.encoder.weights names (stage 0's runs/shapes_encoder) need not exist here. The hyperparameters keep the
        settings as given."""
        if not self.optimization.init_from or settings.encoder.weights == "none":
            return settings
        return replace(settings, encoder=replace(settings.encoder, weights="none"))

    @property
    def hparams_initial(self) -> AttributeDict:
        """The hyperparameters loggers record, dotted (`decoder.embed_dim`, as on the command line; no clash with the
        data module's `encoder`), the vocabulary by its size only (10,000 words on COCO; the checkpoint keeps the
        words, in `hparams`)."""
        hparams = AttributeDict({key: list(value) if isinstance(value, tuple) else value  # plain YAML in hparams.yaml
                                 for key, value in dotted(super().hparams_initial).items()})
        words = hparams.pop("vocabulary", None)
        if words is not None:
            hparams["vocabulary_size"] = len(words)
        return hparams

    # -------------------------------------------------------------------------- training
    def training_step(self, batch: dict[str, Any], batch_index: int) -> Tensor | None:
        # the expected CIDEr-D of sampled captions (`caption.training.self_critical`)
        if self.self_critical is not None:
            first = first_occurrences(batch["image_id"])[0]  # one row per distinct image (U,)
            annotations = self.model.annotations(batch)[first]  # (U, L, D)
            terms: LossTerms | SelfCriticalTerms = self.self_critical.step(self.model.decoder, annotations,
                                                                           batch["image_id"][first])
            logged, rows = {}, len(first)
        else:
            terms, logged, rows = self._likelihood_terms(batch)
        if not self._finite_on_every_rank(terms, batch_index):
            return None  # Lightning then skips backward and the optimizer step; the baseline is left as it was
        if isinstance(terms, LossTerms):
            self.objective.update(terms, self._sum_over_ranks)  # hard attention: the moving-average baseline
        logged |= {f"train/{name}": value for name, value in terms.as_dict().items() if name != "tokens"}
        self.log_dict(logged, prog_bar=False, batch_size=rows)
        self.log("loss", terms.loss, prog_bar=True, logger=False, batch_size=rows)
        return terms.loss

    def _likelihood_terms(self, batch: dict[str, Any]) -> tuple[LossTerms, dict[str, Tensor], int]:
        """Eq. 14 (soft) or eq. 12 (hard) on the batch's captions, what to log beside the terms, and the rows."""
        annotations, captions = self.model.annotations(batch), batch["caption"]  # (B, L, D), (B, T+1)
        images = first_occurrences(batch["image_id"])[1] if "image_id" in batch else None  # (B,): 0..U-1
        samples = self.model.settings.hard.samples if self.model.settings.hard else 1
        if samples > 1:  # N Monte Carlo samples per caption (eq. 12)
            annotations = annotations.repeat_interleave(samples, dim=0)
            captions = captions.repeat_interleave(samples, dim=0)
            images = None if images is None else images.repeat_interleave(samples)
        box_target = batch.get("box_target")  # (B, T, L): only with a box_supervision weight (`setup`)
        if samples > 1 and box_target is not None:
            box_target = box_target.repeat_interleave(samples, dim=0)
        output = self.model.decoder(annotations, captions, images)
        targets = captions[:, 1:]
        mask = (targets != Vocabulary.PAD).float()  # (B·N, T): N samples of each caption (hard attention), else N = 1
        terms = self.objective(output, targets, mask, box_target)
        return terms, {"train/beta": (output.beta * mask).sum() / mask.sum()}, captions.shape[0]

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
        if self.optimization.on_nonfinite_loss == "error":
            raise NonFiniteLossError(
                f"non-finite training loss at {where}; this rank's loss terms: {values}. "
                "Lower model.optimization.learning_rate, set trainer.gradient_clip_val, "
                "or set model.optimization.on_nonfinite_loss: skip to skip such batches"
            )
        self.nonfinite_batches += 1
        rank_zero_warn(f"skipped a batch with a non-finite loss at {where} ({values}); {self.nonfinite_batches} so far",
                       category=CaptionWarning)
        self.log("train/nonfinite_batches", float(self.nonfinite_batches))
        return False

    def configure_callbacks(self) -> list[L.Callback]:
        """A torchvision encoder that trains (model.encoder.freeze: false) does so on its schedule
        (`caption.training.finetuning`)."""
        encoder = self.model.settings.encoder
        if encoder.freeze or encoder.name not in TORCHVISION_ENCODERS:
            return []
        rate = encoder.learning_rate or self.optimization.learning_rate
        return [EncoderFinetuning(frozen_epochs=encoder.frozen_epochs, stages=encoder.finetune_stages,
                                  learning_rate=rate)]

    def on_train_epoch_start(self) -> None:
        """Hard attention with semi_sampling_final: this epoch's semi-sampling probability, on a linear schedule."""
        hard = self.model.settings.hard
        if hard is None or hard.semi_sampling_final is None:
            return
        epochs = hard.semi_sampling_epochs or self.trainer.max_epochs
        if epochs is None or epochs < 1:
            raise ConfigError("model.hard.semi_sampling_final needs the schedule's length: set "
                              "model.hard.semi_sampling_epochs (or a positive trainer.max_epochs)")
        progress = min(1.0, self.current_epoch / max(1, epochs - 1))
        decoder = self.model.decoder
        decoder.semi_sampling = hard.semi_sampling + (hard.semi_sampling_final - hard.semi_sampling) * progress
        self.log("train/semi_sampling", decoder.semi_sampling)

    def setup(self, stage: str) -> None:
        """Before training moves the model to its device: a run whose vocabulary needs more memory than the device
        has free is refused in one line (`caption.training.memory`); with a box_supervision weight, the data's
        training captions are to carry their box targets on the encoder's grid (refused without boxes)."""
        data = self.trainer.datamodule
        if stage != "fit" or not isinstance(getattr(data, "batch_size", None), int):
            return
        if self.objective.box_supervision > 0:
            group = kind_of(self.model.settings.attention.kind).group
            image_size = tuple(data.source.image_size)
            locations, _ = annotation_shape(self.model.encoder, image_size)
            data.supervise_attention(grid=attention_grid(locations, image_size),
                                     key=f"model.{group}.box_supervision")
        device = self.trainer.strategy.root_device
        hard = self.model.settings.hard
        batch_size = data.batch_size * (hard.samples if hard else 1)
        steps = data.max_length + 1  # the words and <end>
        vocabulary_size = len(self.model.vocabulary)
        parameters = list(self.parameters())
        needed = training_memory(
            parameters=sum(parameter.numel() for parameter in parameters),
            trainable=sum(parameter.numel() for parameter in parameters if parameter.requires_grad),
            on_device=all(parameter.device == device for parameter in parameters),
            optimizer=self.optimization.optimizer, vocabulary_size=vocabulary_size, batch_size=batch_size,
            steps=steps)
        check_training_memory(needed, vocabulary_size=vocabulary_size, batch_size=batch_size, steps=steps,
                              device=device, free_memory=device_free_memory)

    def on_fit_start(self) -> None:
        """A new run with model.optimization.init_from starts from that checkpoint's weights (a resumed one has its
        own); self-critical training builds its reward from the training references."""
        init_from = self.optimization.init_from
        if init_from and self.trainer.ckpt_path is None:
            load_weights(self, init_from)
        if self.self_critical is not None:
            if not init_from and self.trainer.ckpt_path is None:
                raise ConfigError("model.self_critical fine-tunes a captioner trained with cross-entropy: set "
                                  "model.optimization.init_from to its run folder or checkpoint "
                                  "(e.g. runs/shapes_soft)")
            data = self.trainer.datamodule
            self.self_critical.build_reward(data.usable("train"), self.model.vocabulary)

    def configure_optimizers(self) -> Any:
        """The optimizer over the parameters that train now (a fine-tuned encoder joins later, in its own group:
        `caption.training.finetuning`), and the `lr_scheduler:` of the config if there is one (ReduceLROnPlateau with
        its `monitor`, e.g. val/bleu4, as LightningCLI itself would return it)."""
        parameters = [p for p in self.parameters() if p.requires_grad]
        optimization = self.optimization
        if optimization.optimizer == "rmsprop":
            optimizer = torch.optim.RMSprop(parameters, lr=optimization.learning_rate)
        else:
            # Fused Adam: one kernel per step instead of a pass per operation over every tensor (docs/measurements.md).
            # Lightning refuses gradient clipping with a fused optimizer under mixed precision: not there.
            mixed = self._trainer is not None and "mixed" in str(self.trainer.precision)
            optimizer = torch.optim.Adam(parameters, lr=optimization.learning_rate, fused=not mixed)
        if self.hparams.lr_scheduler is None:
            return optimizer
        scheduler = instantiate(self.hparams.lr_scheduler, optimizer, base=scheduler_bases(), key="model.lr_scheduler",
                                origin="the model's settings")
        return LightningCLI.configure_optimizers(self, optimizer, scheduler)

    # ------------------------------------------------------------------------ evaluation
    def _decode_batch(self, batch: dict[str, Any], beam_size: int, *, greedy_too: bool = False) -> None:
        """Caption the batch with `beam_size` for the epoch's scores; `greedy_too`: greedily as well, when the beam
        is wider (`_greedy_captions`)."""
        annotations = self.model.annotations(batch)
        self._epoch_captions.add(batch, self.captions(annotations, beam_size=beam_size))
        if greedy_too and beam_size > 1:
            self._greedy_captions.add(batch, self.captions(annotations, beam_size=1))

    def captions(self, annotations: Tensor, **decoding: Any) -> list[Caption]:
        """The model's captions of `annotations` (B, L, D) (`CaptionModel.generate` with `decoding`), a beam search
        larger than the device's free memory refused (`caption.io.device.free_memory`)."""
        decoded = self.model.generate(annotations, free_memory=device_free_memory, **decoding)
        return decoded.captions(self.model.vocabulary)

    def _log_epoch(self, split: str, *, beam_size: int, metrics: tuple[str, ...], prog_bar: bool,
                   captions: EpochCaptions | None = None, prefix: str = "") -> Evaluation:
        """Score the epoch's captions (`caption.evaluation.scoring`; `captions`, the greedy ones beside the beam's)
        and log every score as split/prefix+name."""
        data = self.trainer.datamodule  # its source says which words name which boxes
        evaluation = (self._epoch_captions if captions is None else captions).score(
            self.trainer, split=split, beam_size=beam_size, metrics=metrics, image_size=self.hparams.image_size,
            word_labels=data.source.word_labels if data is not None else {},
        )
        # equal on every rank already: sync_dist with "max" keeps them exact (and Lightning quiet)
        self.log_dict({f"{split}/{prefix}{name}": value for name, value in evaluation.logged().items()},
                      prog_bar=prog_bar, sync_dist=True, reduce_fx="max")
        return evaluation

    def _validation_scoring(self) -> tuple[int, tuple[str, ...]]:
        """The beam and metrics of validation: while fitting, greedy and BLEU-4 and CIDEr (each epoch, fast);
        `caption validate`, as `caption test` and `caption evaluate` score: the model's beam, every metric."""
        if self._trainer is not None and self.trainer.state.fn == "validate":
            return self.model.settings.decoding.beam_size, TEST_METRICS
        return 1, ("bleu4", "cider")

    def validation_step(self, batch: dict[str, Any], batch_index: int) -> None:
        self._decode_batch(batch, beam_size=self._validation_scoring()[0])

    def on_validation_epoch_end(self) -> None:
        """Validation's scores, and once a run, a warning when attention does not look
        (`caption.evaluation.report.not_looking`)."""
        beam_size, metrics = self._validation_scoring()
        evaluation = self._log_epoch("val", beam_size=beam_size, metrics=metrics, prog_bar=True)
        if self.not_looking is None and not self.trainer.sanity_checking:
            self.not_looking = not_looking(evaluation, kind=self.model.settings.attention.kind)
            if self.not_looking is not None:
                rank_zero_warn(self.not_looking, category=CaptionWarning)

    def test_step(self, batch: dict[str, Any], batch_index: int) -> None:
        self._decode_batch(batch, beam_size=self.model.settings.decoding.beam_size, greedy_too=True)

    def on_test_epoch_end(self) -> None:
        """The test scores of the model's decoding (test/...) and, with a beam, of greedy decoding beside them, as
        validation decodes while fitting (test/greedy/...: the paper's BLEU-4 and CIDEr, where the model looked)."""
        beam_size = self.model.settings.decoding.beam_size
        evaluation = self._log_epoch("test", beam_size=beam_size, metrics=TEST_METRICS, prog_bar=False)
        if beam_size > 1:
            self._log_epoch("test", beam_size=1, metrics=GREEDY_METRICS, prog_bar=False,
                            captions=self._greedy_captions, prefix=GREEDY)
        rank_zero_info(f"Example test captions (beam {beam_size}):\n{evaluation.examples()}")
        for line in evaluation.habit_warnings() if self.self_critical is not None else []:  # what SCST may teach
            rank_zero_warn(line, category=CaptionWarning)

    def predict_step(self, batch: dict[str, Any], batch_index: int) -> list[Result]:
        """`caption predict`: each image's `Result` (`caption.evaluation.results`): its id (the dataset's, or its
        position among the image files), its file (for image files) and its caption, or its `predict_num_captions`
        best."""
        if not len(batch["image_id"]):  # every image of the batch failed to load: named, and skipped
            return []
        count = self.predict_num_captions
        captions = self.captions(self.model.annotations(batch), num_captions=count)
        files = batch.get("file") or [None] * len(batch["image_id"])
        return [result(image_id, file, captions[index * count:(index + 1) * count])
                for index, (image_id, file) in enumerate(zip(batch["image_id"].tolist(), files))]

    # ----------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The weights under the CaptionModel's own names (`checkpoint_state`)."""
        checkpoint["state_dict"] = checkpoint_state(checkpoint["state_dict"])
        checkpoint["nonfinite_batches"] = self.nonfinite_batches

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse checkpoints of another project or trained on another vocabulary, by name; then the weights under
        this module's names (`module_state`), which Lightning loads next."""
        hyperparameters = checkpoint.get("hyper_parameters", {})
        if "vocabulary" not in hyperparameters:
            raise CheckpointError(
                "this checkpoint has no vocabulary in its hyperparameters: it was not written by this "
                "project's `caption fit` (or by an old version); retrain or pick another checkpoint"
            )
        check_vocabulary(hyperparameters["vocabulary"], self.model.vocabulary.itos,
                         problem="the checkpoint's vocabulary differs from the one built from this config's data",
                         fix="use the config the checkpoint was trained with")
        self.nonfinite_batches = checkpoint.get("nonfinite_batches", 0)
        checkpoint["state_dict"] = module_state(checkpoint["state_dict"])

