"""Which decoding keeps looking where its words are: greedy, beam search and n-best rescorings of the beam, measured
on the same checkpoints, over seeds.

    python benchmarks/decoding.py runs/shapes_generic/soft_seed*      # several runs of one config: intervals
    python benchmarks/decoding.py runs/shapes_soft --splits test      # one run
    python benchmarks/decoding.py --smoke                             # a tiny run it trains first: checks it runs

Each run's checkpoint (a run folder stands for the one `caption compare` picks) decodes each split (`--splits`, its
own data) with every decoding below; the captions are scored as `caption evaluate` scores them: BLEU-4, CIDEr-D and
attention accuracy (the share of object words whose α peaks on the object they name). The decodings:

- `greedy`: the likeliest word at each step (what validation decodes while fitting);
- `beam 3`: the shipped default (`model.decoding.beam_size` of the shapes configs), ranked by log p;
- `beam 3, length penalty 1`: the final beams ranked by log p / length (`model.decoding.length_penalty`);
- `beam 3, focus`: the 3 final beams reranked by log p + Σ_t log max_l α_{t,l}, a caption whose every word looked at
  one place ranked above one whose attention spread (no box needed: the model's own α);
- `beam 3, MMI 0.5`: reranked by log p(y|I) − 0.5·log mean_{I'} p(y|I') over 8 other images of the batch (Li et
  al. 2016's anti-LM): a caption that fits any image, such as a generic one, ranked down;
- hard attention also greedy and beam 3 with `model.decoding.hard_eval_context: argmax` (the context of α's peak
  location, as in training, instead of the expected context).

With several runs each figure is the mean over them with a 95% interval (Student t over seeds,
`caption.reports.intervals.seed_interval`). Writes OUT/decoding.json (default runs/decoding/) and prints a table.
"""

import argparse
import json
import math
import subprocess
import sys
import warnings
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch

from _helpers import SMOKE_FIT, SMOKE_SPLITS, cpu_name

from caption.evaluation.metrics import METEOR_TIMEOUT
from caption.evaluation.scoring import captioned_batch, score_split
from caption.inference import Captioner, training_data
from caption.io.checkpoints import find_checkpoint
from caption.model.captions import Caption
from caption.model.vocabulary import Vocabulary
from caption.reports.intervals import seed_interval

BEAM = 3
OTHER_IMAGES = 8  # the images whose captions' mean probability stands for p(y) in MMI
FIGURES = ("bleu4", "cider", "attention_accuracy")


def forced_log_prob(decoder, annotations: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(tokens | annotations), each row's words forced (`Decoder.forward`), <pad> and <start> never generated
    as in the search: annotations (R, L, D), tokens (R, T) ending in <pad>."""
    start = torch.full((tokens.shape[0], 1), Vocabulary.START, dtype=torch.long, device=tokens.device)
    logits = decoder(annotations, torch.cat([start, tokens], dim=1)).logits.float()  # (R, T, V)
    logits[..., [Vocabulary.PAD, Vocabulary.START]] = float("-inf")
    word = logits.log_softmax(dim=-1).gather(2, tokens[..., None]).squeeze(2)  # (R, T)
    return word.masked_fill(tokens == Vocabulary.PAD, 0.0).sum(dim=1)


def focus(caption: Caption) -> float:
    """Σ_t log max_l α_{t,l}: 0 when every word looked at one location."""
    return float(caption.alpha.clamp_min(1e-12).amax(dim=-1).log().sum())


def mmi_priors(captioner: Captioner, annotations: torch.Tensor, beams: list[list[Caption]]) -> list[list[float]]:
    """log mean_{I'} p(y | I') of each beam y over OTHER_IMAGES other images of the batch (rolled by 1..8)."""
    vocabulary, module = captioner.module.vocabulary, captioner.module
    rows = [caption for captions in beams for caption in captions]
    owner = torch.tensor([image for image, captions in enumerate(beams) for _ in captions])
    width = max(len(caption.words) for caption in rows) + 1
    tokens = torch.full((len(rows), width), Vocabulary.PAD, dtype=torch.long)
    for row, caption in enumerate(rows):
        ids = [vocabulary.stoi.get(word, Vocabulary.UNK) for word in caption.words] + [Vocabulary.END]
        tokens[row, :len(ids)] = torch.tensor(ids)
    shifts = range(1, min(OTHER_IMAGES, annotations.shape[0] - 1) + 1)
    others = torch.stack([forced_log_prob(module.decoder, annotations[(owner + shift) % annotations.shape[0]],
                                          tokens) for shift in shifts])  # (shifts, rows)
    prior = (torch.logsumexp(others, dim=0) - math.log(len(shifts))).tolist()
    found, start = [], 0
    for captions in beams:
        found.append(prior[start:start + len(captions)])
        start += len(captions)
    return found


Rule = Callable[[Captioner, torch.Tensor, list[list[Caption]]], list[Caption]]


def reranked(score: Callable[[Caption], float]) -> Rule:
    return lambda captioner, annotations, beams: [max(captions, key=score) for captions in beams]


def mmi(weight: float) -> Rule:
    def choose(captioner: Captioner, annotations: torch.Tensor, beams: list[list[Caption]]) -> list[Caption]:
        priors = mmi_priors(captioner, annotations, beams)
        return [captions[max(range(len(captions)), key=lambda i: captions[i].log_prob - weight * prior[i])]
                for captions, prior in zip(beams, priors)]
    return choose


# name -> (beam, rule over its final beams; None: the search's own best). The length penalty's ranking of the final
# beams, log p / length^1 with <end> counted, is the search's own with model.decoding.length_penalty 1
DECODINGS: dict[str, tuple[int, Rule | None]] = {
    "greedy": (1, None),
    f"beam {BEAM}": (BEAM, None),
    f"beam {BEAM}, length penalty 1": (BEAM, reranked(lambda caption: caption.log_prob / (len(caption.words) + 1))),
    f"beam {BEAM}, focus": (BEAM, reranked(lambda caption: caption.log_prob + focus(caption))),
    f"beam {BEAM}, MMI 0.5": (BEAM, mmi(0.5)),
}


@torch.inference_mode()
def decoded_scores(captioner: Captioner, data, split: str, beam: int, rule: Rule | None) -> dict[str, float]:
    """BLEU-4, CIDEr-D and attention accuracy of one decoding of a split."""
    data.setup("test" if split == "test" else "validate")
    captioned = []
    for batch in data.test_dataloader() if split == "test" else data.val_dataloader():
        annotations = captioner.annotations(batch)  # encoded once, for the search and the rule
        if rule is None:
            captions = captioner.caption_batch({"annotations": annotations}, beam_size=beam)
        else:
            beams = captioner.caption_batch({"annotations": annotations}, beam_size=beam, num_captions=beam)
            captions = rule(captioner, annotations, beams)
        captioned += captioned_batch(batch, captions, keep_attention=True)
    evaluation = score_split(captioned, split=split, beam_size=beam, image_size=tuple(data.image_size),
                             word_labels=data.source.word_labels, metrics=("bleu4", "cider"),
                             meteor_timeout=METEOR_TIMEOUT)
    return {name: (evaluation.scores | evaluation.attention_scores()).get(name, float("nan")) for name in FIGURES}


def measure(runs: list[Path], splits: list[str]) -> dict:
    """{run: {split: {decoding: figures}}}; a hard-attention run also greedy and beam 3 with the argmax context."""
    measured = {}
    for run in runs:
        captioner = Captioner.from_checkpoint(find_checkpoint(run), device="cpu")
        data = training_data(captioner)
        measured[str(run)] = {split: {name: decoded_scores(captioner, data, split, *decoding)
                                      for name, decoding in DECODINGS.items()} for split in splits}
        if captioner.module.settings.attention.kind == "hard":
            argmax = Captioner.from_checkpoint(find_checkpoint(run), device="cpu",
                                               decoding={"hard_eval_context": "argmax"})
            for split in splits:
                for name in ("greedy", f"beam {BEAM}"):
                    measured[str(run)][split][f"{name}, argmax context"] = decoded_scores(
                        argmax, data, split, *DECODINGS[name])
    return measured


def cell(values: list[float]) -> str:
    values = [value for value in values if not math.isnan(value)]
    if not values:
        return "–"
    interval = seed_interval(values)
    return f"{interval.mean:.3f}" if interval.half_width is None else f"{interval.mean:.3f} ± {interval.half_width:.3f}"


def table(measured: dict, splits: list[str]) -> str:
    runs = list(measured.values())
    header = " | ".join(f"{split} {name}" for split in splits for name in ("BLEU-4", "CIDEr", "accuracy"))
    lines = [f"{len(runs)} run(s): mean ± 95% interval over them", "", f"| decoding | {header} |",
             "|---|" + "---:|" * (3 * len(splits))]
    for name in dict.fromkeys(name for run in runs for name in run[splits[0]]):
        cells = [cell([run[split][name][figure] for run in runs if name in run[split]]) for split in splits
                 for figure in FIGURES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def smoke_run(out: Path) -> Path:
    """A tiny soft run on a few generic shapes images, to decode."""
    data = out / "data"
    command = [sys.executable, "-m", "caption.cli", "fit", "--config", "shapes_soft", "--config", "shapes_generic",
               "--model.encoder.weights", "none", *SMOKE_FIT, "--data.source.init_args.root", str(data),
               *(f"--data.source.init_args.num_{split}={count}" for split, count in SMOKE_SPLITS.items()),
               "--trainer.default_root_dir", str(out / "soft"), "--trainer.logger.init_args.save_dir",
               str(out / "soft"), "--trainer.enable_progress_bar", "false", "--trainer.limit_test_batches", "0"]
    subprocess.run(command, check=True, capture_output=True)
    return out / "soft"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="run folders or checkpoints of one config (seeds)")
    parser.add_argument("--splits", nargs="+", default=["val", "test"], choices=("val", "test"))
    parser.add_argument("--out", type=Path, default=Path("runs/decoding"))
    parser.add_argument("--smoke", action="store_true", help="decode a tiny run it trains first")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # the tiny smoke model's "not looking"; scores are printed below
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [smoke_run(args.out)] if args.smoke else args.runs
    if not runs:
        parser.error("give run folders (or --smoke)")
    measured = measure(runs, args.splits)
    (args.out / "decoding.json").write_text(json.dumps({"date": str(date.today()), "cpu": cpu_name(),
                                                         "runs": measured}, indent=2))
    print(table(measured, args.splits))


if __name__ == "__main__":
    main()
