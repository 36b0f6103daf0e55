"""The model card of an exported model (README.md of `caption export`'s folder), generated from its run.

    card = model_card(facts)     # CardFacts: the model's settings, its data, its test figures and its run

On top, the YAML metadata block the Hugging Face Hub reads (library_name, license, tags, pipeline_tag, datasets,
metrics and, with test figures, the model-index of its results); below: what the model is (the paper, soft or hard
attention, the encoder, the data), how to install show-attend-tell (from its source: the Source URL of its
package metadata or pyproject.toml) and load the model, how it was trained (the run's saved config), its test figures in
the layout of `caption compare`'s table with the paper's Table 1 beside them for COCO and Flickr, intended use and
limits, and the citation from CITATION.cff. The test figures come from the run's logs (the last `test/*` row of its
metrics.csv: `caption fit` tests its best checkpoint) or from a metrics.json of `caption evaluate`.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from caption.errors import CaptionError
from caption.evaluation.metrics import METRICS
from caption.evaluation.ptb_tokenizer import PTB_JAVA, PTB_PYTHON
from caption.evaluation.report import METRIC_NAMES, format_score
from caption.io.install import DISTRIBUTION, source_url
from caption.io.model_folder import LIBRARY, TRAINING_CONFIG
from caption.io.provenance import Provenance
from caption.model.precision import SETTINGS as PRECISIONS
from caption.model.caption_model import ModelSettings
from caption.reports.table import PAPER_METRICS, PAPER_TABLE_1, dataset_name
from caption.training.optimization import OptimizationSettings

COLUMNS = (*METRICS, "attention_accuracy", "alpha_entropy")  # the card's test table
DATASET_NAMES = {"coco": "COCO", "flickr8k": "Flickr8k", "flickr30k": "Flickr30k", "shapes": "shapes (built-in)"}
# the Hub's metric type of each figure; attention accuracy is a metric of its own, not the classification "accuracy"
HUB_METRICS = {"bleu1": "bleu", "bleu2": "bleu", "bleu3": "bleu", "bleu4": "bleu", "meteor": "meteor",
               "rouge_l": "rouge", "cider": "cider", "attention_accuracy": "attention_accuracy"}
# the Hub's datasets of the data the paper used, for the card's `datasets`; COCO's is the Karpathy-split COCO on the
# Hub, the split the paper and this project train and test on
HUB_DATASETS = {"coco": "yerevann/coco-karpathy", "flickr8k": "jxie/flickr8k", "flickr30k": "nlphuji/flickr30k"}
SCORED_SPLITS = ("val", "test")  # the splits `caption evaluate` scores
TOKENIZERS = (PTB_JAVA, PTB_PYTHON)  # what a metrics.json says its captions were tokenised with
SHOWN_CHARACTERS = 60  # of a value refused in a metrics.json
DEVICE_CHARACTERS = 200  # the longest device a metrics.json's provenance may name ("cpu (AMD EPYC 7B13 ...)")
PAPER = "[Show, Attend and Tell](https://arxiv.org/abs/1502.03044) (Xu et al., ICML 2015)"


@dataclass(frozen=True)
class TestFigures:
    """A model's measured test figures, by their logged names (bleu1 ... alpha_entropy; None: not measured)."""

    scores: dict[str, float | None]
    origin: str  # the file they come from, and what wrote it
    split: str = "test"
    beam_size: int | None = None
    images: int | None = None
    tokenizer: str | None = None
    made: Provenance | None = None  # how they were computed, when the file records it (metrics.json's "provenance")


@dataclass(frozen=True)
class CardFacts:
    """What the card says about one model."""

    name: str
    settings: ModelSettings
    optimization: OptimizationSettings
    vocabulary_size: int
    data: dict[str, Any] | None  # the data settings it was trained with, if recorded
    version: str  # of show-attend-tell, which exported it
    test: TestFigures | None = None
    epoch: int | None = None  # the checkpoint's, counted from 0 as in its file name
    steps: int | None = None  # the optimizer steps it was trained for
    config: str | None = None  # the run's saved config, relative to the run folder (in the folder as TRAINING_CONFIG)
    lr_scheduler: dict[str, Any] | None = None
    license: str = "mit"
    preprocessing: dict[str, Any] | None = None  # config.json's, when the input transform is described there
    made: Provenance | None = None  # the training run's precision setting and seed; the exporting code and device


def last_test_row(metrics_csv: Path, *, run: Path | None = None) -> TestFigures | None:
    """The last row of a CSVLogger's metrics.csv with `test/*` figures, or None when the run logged no test.

    metrics_csv: the run's logged metrics.
    run: the run folder, which the card names the file relative to (the card names no folder of this machine);
        None: the file's name alone.
    """
    try:
        with metrics_csv.open(newline="", encoding="utf-8") as file:
            rows = [row for row in csv.DictReader(file) if any(key.startswith("test/") and value
                                                               for key, value in row.items() if key)]
    except (OSError, csv.Error, UnicodeDecodeError):
        return None
    if not rows:
        return None
    scores = {name: number(rows[-1].get(f"test/{name}")) for name in COLUMNS}
    return TestFigures(scores, origin=f"{run_relative(metrics_csv, run=run)} of the run folder, the last test the run "
                       "logged")


def run_relative(path: Path, *, run: Path | None) -> str:
    """`path` relative to the run folder `run` (logs/version_0/metrics.csv), else its name alone."""
    try:
        return path.resolve().relative_to(run.resolve()).as_posix() if run is not None else path.name
    except ValueError:
        return path.name


def evaluated(metrics_json: Path) -> TestFigures:
    """The figures of a metrics.json written by `caption evaluate`; a CaptionError naming the file and the key when
    one is not what `caption evaluate` writes (a figure that is no finite number >= 0, a split other than val or test,
    a count of images or a beam size that is no whole number >= 1, another tokenizer)."""
    try:
        report = json.loads(metrics_json.read_text(encoding="utf-8"))
        figures = report["metrics"]
        if not isinstance(figures, dict):
            raise TypeError(f"its metrics are {type(figures).__name__}, not an object")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CaptionError(f"--metrics {metrics_json}: not a metrics.json of `caption evaluate` ({error})") from None
    where = f"--metrics {metrics_json}"
    scores = {name: measured_figure(figures.get(name), key=f"metrics.{name}", where=where) for name in COLUMNS}
    return TestFigures(scores, origin=f"{metrics_json.name} of `caption evaluate`",
                       split=one_of(report.get("split"), SCORED_SPLITS, key="split", where=where),
                       beam_size=whole_count(report.get("beam_size"), key="beam_size", where=where),
                       images=whole_count(report.get("images"), key="images", where=where),
                       tokenizer=one_of(report.get("tokenizer"), TOKENIZERS, key="tokenizer", where=where,
                                        required=False),
                       made=recorded_provenance(report.get("provenance"), where=where))


def recorded_provenance(value: Any, *, where: str) -> Provenance | None:
    """The "provenance" of a metrics.json (`caption.io.provenance.Provenance.record`), None when absent; a
    CaptionError naming the file and the key when a field is not what `caption evaluate` writes.

    value: the record as read.
    where: the file, for the error.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise not_as_evaluated(value, expected="an object", key="provenance", where=where)
    checks = {"precision": lambda found: found in (None, *PRECISIONS),
              "seed": lambda found: found is None or isinstance(found, int) and not isinstance(found, bool),
              "commit": lambda found: found is None or isinstance(found, str) and 0 < len(found) <= 64
              and all(character in "0123456789abcdef" for character in found),
              "modified": lambda found: found is None or isinstance(found, bool),
              "device": lambda found: isinstance(found, str) and 0 < len(found) <= DEVICE_CHARACTERS
              and found.isprintable()}
    for key, check in checks.items():
        if not check(value.get(key)):
            raise not_as_evaluated(value.get(key), expected="what `caption evaluate` records there",
                                   key=f"provenance.{key}", where=where)
    return Provenance(**{key: value.get(key) for key in checks})


def measured_figure(value: Any, *, key: str, where: str) -> float | None:
    """A figure of a metrics.json: a finite number >= 0, or None (null or absent: not measured).

    value: the figure as read.
    key: its key in the file, for the error.
    where: the file, for the error.
    """
    if value is None:
        return None
    try:
        figure = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of hundreds of digits
        figure = math.inf
    if not math.isfinite(figure) or figure < 0:
        raise not_as_evaluated(value, expected="a finite number >= 0", key=key, where=where)
    return figure


def whole_count(value: Any, *, key: str, where: str) -> int | None:
    """A count of a metrics.json (images, beam size): a whole number >= 1, or None when absent.

    value: the count as read.
    key: its key in the file, for the error.
    where: the file, for the error.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise not_as_evaluated(value, expected="a whole number >= 1", key=key, where=where)
    return value


def one_of(value: Any, choices: tuple[str, ...], *, key: str, where: str, required: bool = True) -> str | None:
    """A named setting of a metrics.json (its split, its tokenizer): one of `choices`.

    value: the name as read.
    choices: the names `caption evaluate` writes.
    key: its key in the file, for the error.
    where: the file, for the error.
    required: whether it must be there (else None when absent).
    """
    if value is None and not required:
        return None
    if value not in choices:
        raise not_as_evaluated(value, expected=f"one of {', '.join(choices)}", key=key, where=where)
    return value


def not_as_evaluated(value: Any, *, expected: str, key: str, where: str) -> CaptionError:
    """The error of a value of a metrics.json that is not what `caption evaluate` writes.

    value: the value as read (shown by its repr, cut short).
    expected: what `caption evaluate` writes there.
    key: its key in the file.
    where: the file.
    """
    shown = repr(value) if len(repr(value)) <= SHOWN_CHARACTERS else repr(value)[:SHOWN_CHARACTERS] + "..."
    return CaptionError(f"{where}: {key} is {shown}, not {expected} as `caption evaluate` writes; measure it again "
                        "with `caption evaluate` or fix the file")


def number(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def model_card(facts: CardFacts) -> str:
    """README.md of the model folder: the Hub's metadata block, then the card."""
    return f"---\n{yaml.safe_dump(metadata(facts), sort_keys=False, allow_unicode=True)}---\n\n{body(facts)}"


def dataset_of(facts: CardFacts) -> str | None:
    return None if facts.data is None else dataset_name(facts.data)


def metadata(facts: CardFacts) -> dict[str, Any]:
    """The YAML block the Hub reads, built with `huggingface_hub.ModelCardData` and its `EvalResult`s when
    huggingface_hub is installed (an optional extra), else written by hand to the same dict."""
    try:
        from huggingface_hub import EvalResult, ModelCardData
    except ImportError:
        return hand_written_metadata(facts)
    results = [EvalResult(task_type="image-to-text", task_name="Image captioning", dataset_type=dataset_type,
                          dataset_name=dataset_title, dataset_split=split, metric_type=HUB_METRICS[name],
                          metric_name=METRIC_NAMES[name], metric_value=value)
               for name, value, dataset_type, dataset_title, split in eval_results(facts)]
    fields = metadata_fields(facts)
    return ModelCardData(**fields, model_name=facts.name, eval_results=results or None).to_dict()


def metadata_fields(facts: CardFacts) -> dict[str, Any]:
    """The metadata but the model-index: library, license, language, pipeline, tags, metrics, the Hub's datasets."""
    kind, dataset = facts.settings.attention.kind, dataset_of(facts)
    fields: dict[str, Any] = {
        "library_name": LIBRARY,
        "license": facts.license,
        "language": "en",
        "pipeline_tag": "image-to-text",
        "tags": ["image-captioning", "show-attend-tell", f"{kind}-attention", "visual-attention", "pytorch",
                 "lightning"],
        "metrics": sorted(set(HUB_METRICS.values())),
    }
    if dataset in HUB_DATASETS:  # none for the built-in data or the user's own
        fields["datasets"] = [HUB_DATASETS[dataset]]
    return fields


def eval_results(facts: CardFacts) -> list[tuple[str, float, str, str, str]]:
    """(metric, value in %, dataset type, dataset name, split) of each measured figure the Hub has a metric for."""
    if facts.test is None:
        return []
    dataset = dataset_of(facts)
    dataset_type = HUB_DATASETS.get(dataset or "", dataset or "custom")
    dataset_title = DATASET_NAMES.get(dataset or "", "its own data")
    return [(name, round(100 * value, 2), dataset_type, dataset_title, facts.test.split)
            for name, value in ((name, number(value)) for name, value in facts.test.scores.items())
            if value is not None and name in HUB_METRICS]


def hand_written_metadata(facts: CardFacts) -> dict[str, Any]:
    """The metadata as `ModelCardData.to_dict` writes it, for an install without huggingface_hub."""
    found = metadata_fields(facts)
    results = eval_results(facts)
    if results:
        _, _, dataset_type, dataset_title, split = results[0]
        found["model-index"] = [{"name": facts.name, "results": [{
            "task": {"type": "image-to-text", "name": "Image captioning"},
            "dataset": {"name": dataset_title, "type": dataset_type, "split": split},
            "metrics": [{"type": HUB_METRICS[name], "value": value, "name": METRIC_NAMES[name]}
                        for name, value, *_ in results],
        }]}]
    return found


def body(facts: CardFacts) -> str:
    settings, dataset = facts.settings, dataset_of(facts)
    kind = settings.attention.kind
    source = (facts.data or {}).get("source") or {}
    data = DATASET_NAMES.get(dataset or "", f"`{source.get('class_path', 'unrecorded data')}`")
    encoder = f"`{settings.encoder.name}` encoder ({'frozen' if settings.encoder.freeze else 'trained'})"
    lines = [
        f"# {facts.name}",
        "",
        (f"An image captioner of {PAPER} with **{kind} attention**: a {encoder}, an LSTM decoder of "
         f"{settings.decoder.hidden_dim} units attending over its annotation vectors, trained on {data} with a "
         f"vocabulary of {facts.vocabulary_size} words. Exported by `caption export` of show-attend-tell "
         f"{facts.version}."),
        "",
        "## Use",
        "",
        *install_lines(source_url()),
        "",
        "```python",
        "from caption import Captioner   # show-attend-tell[hub], installed as above",
        f'captioner = Captioner.from_pretrained("{facts.name if "/" in facts.name else "path/to/this/folder"}")'
        + ("   # or this folder" if "/" in facts.name else ""),
        'print(captioner("photo.jpg").text)',
        'captioner.plot("photo.jpg").savefig("attention.png")     # where it looked, word by word',
        "```",
        "",
        preprocessing_line(facts.preprocessing),
        "",
        ("From the command line, with this folder: `caption describe --ckpt_path FOLDER photo.jpg --predictions.out "
         "figures`; `caption evaluate --ckpt_path FOLDER --split test --predictions.out eval` scores it on its data."),
        "",
        "## Training",
        "",
        *training(facts),
        "",
        "## Test figures",
        "",
        *test_table(facts, dataset),
        "",
        "## How it was made",
        "",
        *how_made(facts),
        "",
        "## Intended use and limits",
        "",
        "- For research and teaching: reproducing the paper, and seeing where a captioner looks for each word.",
        (f"- It knows only the {facts.vocabulary_size} words of its training captions, and describes images like "
         f"those it was trained on{' (synthetic shapes, not photographs)' if dataset == 'shapes' else ''}; other "
         "images get captions that may be wrong, with no warning."),
        ("- Captions repeat what the training data says, its biases included; do not use them to decide about people "
         "or as the sole description of an image for someone who cannot see it."),
        ("- config.json names no file of the machine it was trained on (the run's config, with its data paths, is "
         "the training config); pass `--config` to evaluate it on your copy of the data."),
        "",
        "## Files",
        "",
        ("`model.safetensors` (the weights only: loading runs no code), `config.json` (the settings, the vocabulary "
         "the data settings and the input's `preprocessing`), "
         + (f"`{TRAINING_CONFIG}` (the config the run was trained with), " if facts.config is not None else "")
         + "this card. The format: docs/sharing.md of show-attend-tell."),
        "",
        "## Citation",
        "",
        "```bibtex",
        citation(),
        "```",
    ]
    return "\n".join(lines) + "\n"


def preprocessing_line(preprocessing: dict[str, Any] | None) -> str:
    """One line of how an image becomes the model's input (config.json's `preprocessing`), for use outside
    `Captioner`, which does it."""
    if preprocessing is None:
        return "Inputs: prepared by `Captioner` as in training (config.json describes no preprocessing for them)."
    resize, (height, width) = preprocessing["resize"], preprocessing["crop"]["size"]
    size = resize["size"]
    resized = (f"the shorter side resized to {size}" if isinstance(size, int) else f"resized to {size[1]}×{size[0]}")
    return (f"Inputs (config.json's `preprocessing`; `Captioner` does it): {preprocessing['channel_order']}, "
            f"{resized} ({resize['interpolation']}), centre-cropped to {width}×{height}, scaled to 0..1, normalised "
            f"with mean {fmt(preprocessing['mean'])} and std {fmt(preprocessing['std'])}.")


def fmt(values: list[float]) -> str:
    """Per-channel values as (0.485, 0.456, 0.406)."""
    return "(" + ", ".join(f"{value:.4g}" for value in values) + ")"


def install_lines(url: str | None) -> list[str]:
    """How to install show-attend-tell with the Hub extra: from its source (it is on no package index yet), then from
    the index once it is published there."""
    published = f'once it is published on PyPI, `pip install "{DISTRIBUTION}[hub]"`'
    if url is None:
        return [(f"Install {DISTRIBUTION} from its source with the `hub` extra (`pip install -e \".[hub]\"` in a "
                 f"clone); {published}.")]
    return [(f"Install {DISTRIBUTION} from its source with the `hub` extra: `pip install \"{DISTRIBUTION}[hub] @ "
             f"git+{url}\"` (or `git clone {url}`, then `pip install -e \".[hub]\"` in it); {published}.")]


def training(facts: CardFacts) -> list[str]:
    settings = facts.settings
    objective = (f"eq. 14 with λ = {settings.soft.alpha_c}" if settings.soft is not None else
                 f"eq. 12 with {settings.hard.samples} sample(s), λ_r = {settings.hard.reinforce_weight}, "
                 f"λ_e = {settings.hard.entropy_weight}")
    schedule = "constant" if facts.lr_scheduler is None else f"`{facts.lr_scheduler.get('class_path')}`"
    length = ", ".join(part for part in (f"{facts.steps} steps" if facts.steps is not None else "",
                                         f"saved in epoch {facts.epoch} (from 0)" if facts.epoch is not None else "")
                       if part)
    lines = [
        f"- objective: {objective}; optimizer {facts.optimization.optimizer}, learning rate "
        f"{facts.optimization.learning_rate}, schedule {schedule}" + (f"; {length}" if length else ""),
        f"- decoding: beam {settings.decoding.beam_size}, at most {settings.decoding.max_caption_length} words",
    ]
    if facts.config is not None:
        lines.append(f"- the run saved its whole config as `{facts.config}`, in this folder as `{TRAINING_CONFIG}`: "
                     f"`caption fit --config {TRAINING_CONFIG}` trains it again (with the data at the paths it names)")
    else:
        lines.append("- the run's config was not found beside its checkpoint")
    return lines


def test_table(facts: CardFacts, dataset: str | None) -> list[str]:
    """The test figures in %, as `caption compare`'s table, with the paper's Table 1 for this data."""
    test, kind = facts.test, facts.settings.attention.kind
    if test is None:
        return [("No test figures were recorded for this run: `caption evaluate --ckpt_path FOLDER --split test "
                 "--predictions.out eval` measures them, and `caption export ... --metrics eval/metrics.json` puts "
                 "them here.")]
    scores = {name: number(test.scores.get(name)) for name in COLUMNS}  # None: not measured (METEOR without Java)
    cells = ["–" if scores[name] is None else f"{scores[name]:.2f}" if name == "alpha_entropy"
             else format_score(scores[name]) for name in COLUMNS]
    about = ", ".join(part for part in (
        f"{test.split} split", f"{test.images} images" if test.images else "",
        f"beam {test.beam_size}" if test.beam_size else "", f"tokenizer {test.tokenizer}" if test.tokenizer else "",
    ) if part)
    lines = [(f"Measured on the {about}; from {test.origin}. coco-caption scores (pycocoevalcap) in %; attention "
              "accuracy: the share of generated object words whose attention peaks on the object they name; α "
              "entropy per step in nats."), "",
             "| model | " + " | ".join(METRIC_NAMES[name] for name in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS),
             f"| this model ({kind}) | " + " | ".join(cells) + " |"]
    paper = PAPER_TABLE_1.get(dataset or "", {}).get(kind)
    if paper is not None:
        lines.append(f"| {kind} attention (paper, Table 1) | "
                     + " | ".join([*paper, *["–"] * (len(COLUMNS) - len(PAPER_METRICS))]) + " |")
    return lines


def how_made(facts: CardFacts) -> list[str]:
    """The training run's precision setting and seed, how the test figures were computed (when their file says)
    and the code that exported the model: its commit (and whether its tree was modified) and its device."""
    made, test = facts.made, facts.test
    if made is None:
        return ["- not recorded"]
    seed = "unknown" if made.seed is None else made.seed
    precision = made.precision or "unknown"
    auto = (" (auto: bf16-mixed where the machine had bf16 matrix units, else 32-true)"
            if precision == "auto" else "")
    lines = [f"- training: precision {precision}{auto}, seed {seed} (from the run's saved config)"]
    if test is not None and test.made is not None:
        lines.append(f"- test figures: {test.made.line()}")
    elif test is not None:
        lines.append(f"- test figures: precision, commit and device not recorded in {test.origin}")
    lines.append(f"- exported with show-attend-tell {facts.version}, {made.code_line()}")
    return lines


def citation() -> str:
    """BibTeX of the paper and of this implementation, from the package's CITATION.cff."""
    try:
        cff = yaml.safe_load((resources.files("caption") / "CITATION.cff").read_text(encoding="utf-8"))
        paper = cff["preferred-citation"]
        authors = " and ".join(f"{a['family-names']}, {a['given-names']}" for a in paper["authors"])
        first_word = "".join(filter(str.isalnum, paper["title"].split()[0])).lower()
        key = f"{paper['authors'][0]['family-names'].lower()}{paper['year']}{first_word}"
        entries = [
            f"@inproceedings{{{key},", f"  title = {{{paper['title']}}},", f"  author = {{{authors}}},",
            f"  booktitle = {{{paper['collection-title']}}},", f"  volume = {{{paper['volume']}}},",
            f"  pages = {{{paper['start']}--{paper['end']}}},", f"  year = {{{paper['year']}}},",
            f"  publisher = {{{paper['publisher']['name']}}},", f"  url = {{{paper['url']}}},", "}",
            "", "@software{show_attend_tell,", f"  title = {{{cff['title']}}},",
            "  author = {" + " and ".join(f"{{{a['name']}}}" for a in cff["authors"]) + "},",
            f"  license = {{{cff['license']}}},", "}",
        ]
    except (OSError, KeyError, TypeError, yaml.YAMLError):  # a package without its CITATION.cff
        return "% see CITATION.cff of show-attend-tell"
    return "\n".join(entries)
