"""The `model:` settings before they were grouped (issue 17), and how each moved: `caption migrate-config`.

Until version 0.2 (0.1 and before) every model setting was a flat key (`model.embed_dim`); now each belongs to the group of the
module it configures (`model.decoder.embed_dim`; `caption.module.CaptionModule`). Checkpoints written before are
read as they are (`caption.checkpoints.read_checkpoint` moves their settings with `grouped`); a config file or a
command line that still uses a flat key is refused in one line naming the new key, and

    caption migrate-config configs/my_experiment.yaml --in-place

rewrites such a file, comments kept. No torch here: the command answers at once.
"""

import argparse
import re
import sys
from pathlib import Path
from typing import Any

# The flat `model.` keys of checkpoints and configs before the settings were grouped (issue 17), and where each
# lives now (README, "Settings moved in 0.2").
RENAMED = {
    "attention": "attention.kind", "attention_dim": "attention.dim", "attention_layers": "attention.layers",
    "gate": "attention.gate", "inverse_temperature": "attention.inverse_temperature",
    "encoder": "encoder.name", "encoder_weights": "encoder.weights", "freeze_encoder": "encoder.freeze",
    "encoder_frozen_epochs": "encoder.frozen_epochs", "encoder_finetune_stages": "encoder.finetune_stages",
    "encoder_learning_rate": "encoder.learning_rate", "encoder_grid": "encoder.grid",
    "encoder_channels": "encoder.channels", "encoder_kernel_sizes": "encoder.kernel_sizes",
    "encoder_coordinates": "encoder.coordinates",
    "embed_dim": "decoder.embed_dim", "hidden_dim": "decoder.hidden_dim", "init_layers": "decoder.init_layers",
    "prev_word_output": "decoder.prev_word_output", "context_output": "decoder.context_output",
    "dropout": "decoder.dropout",
    "alpha_c": "soft.alpha_c",
    "samples": "hard.samples", "reinforce_weight": "hard.reinforce_weight", "entropy_weight": "hard.entropy_weight",
    "baseline": "hard.baseline", "baseline_decay": "hard.baseline_decay", "reward": "hard.reward",
    "credit": "hard.credit", "semi_sampling": "hard.semi_sampling", "semi_sampling_final": "hard.semi_sampling_final",
    "max_caption_length": "decoding.max_caption_length", "beam_size": "decoding.beam_size",
    "length_penalty": "decoding.length_penalty", "hard_eval_context": "decoding.hard_eval_context",
    "optimizer": "optimization.optimizer", "learning_rate": "optimization.learning_rate",
    "on_nonfinite_loss": "optimization.on_nonfinite_loss", "init_from": "optimization.init_from",
    "compile": "optimization.compile",
}
GROUPS = {new.partition(".")[0] for new in RENAMED.values()}


def grouped(hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's hyperparameters with the flat keys of before 0.2 moved into their groups (`RENAMED`); the
    settings of the attention kind the model does not use (all at their defaults then) are left out."""

    def flat(key: str, value: Any) -> bool:  # "encoder" and "attention" are both a flat key and a group
        return key in RENAMED and not isinstance(value, dict)

    if not any(flat(key, value) for key, value in hyperparameters.items()):
        return hyperparameters
    moved: dict[str, Any] = {}
    for key, value in hyperparameters.items():
        group, _, name = RENAMED[key].rpartition(".") if flat(key, value) else ("", "", key)
        (moved.setdefault(group, {}) if group else moved)[name] = value
    kind = moved.get("attention", {}).get("kind", "soft")
    moved.pop("hard" if kind == "soft" else "soft", None)
    return moved


def dotted(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as {"encoder.name": ..., "decoder.embed_dim": ...}."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict) and key != "lr_scheduler":
            flat |= dotted(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def old_keys(args: list[str], files: list[str]) -> list[str]:
    """`model.` keys of before 0.2 in `args` (`--model.embed_dim`) or in the `model:` section of config `files`, each
    with its new name: "model.embed_dim (now model.decoder.embed_dim) on the command line"."""
    found = [(match.group(1), "on the command line") for arg, value in zip(args, [*args[1:], ""])
             if (match := re.fullmatch(r"--model\.(\w+)(=.*)?", arg)) and match.group(1) in RENAMED
             and not (match.group(1) in GROUPS and (match.group(2) or value).lstrip("=").startswith("{"))]
    for path in files:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError:  # the parser reports it
            continue
        found += [(key, f"in {path}") for key, _ in model_keys(lines)]
    return [f"model.{key} (now model.{RENAMED[key]}) {where}" for key, where in found]


def model_keys(lines: list[str]) -> list[tuple[str, int]]:
    """(key, line index) of each flat key of before 0.2 directly under a `model:` section of YAML `lines`."""
    keys, inside = [], False
    for index, line in enumerate(lines):
        if re.match(r"\S", line):
            inside = line.split("#")[0].strip() == "model:"
        elif inside and (match := re.match(r"  (\w+):(.*)", line)) and match.group(1) in RENAMED:
            value = match.group(2).split("#")[0].strip()
            if value or match.group(1) not in GROUPS:  # `encoder:` alone opens the group of the same name
                keys.append((match.group(1), index))
    return keys


def migrate_yaml(text: str) -> str:
    """A config's text with its flat `model:` keys moved into their groups, values and comments kept. Each group is
    written where its first key was; a comment line above a key moves with it."""
    lines = text.splitlines()
    moved = dict(model_keys(lines))
    if not moved:
        return text
    groups: dict[str, list[str]] = {}
    first_line: dict[str, int] = {}
    dropped: set[int] = set()
    for key, index in moved.items():
        group, _, name = RENAMED[key].rpartition(".")
        start = index
        while start - 1 >= 0 and lines[start - 1].strip().startswith("#") and lines[start - 1].startswith("  "):
            start -= 1  # comment lines of this key
        end = index + 1
        while end < len(lines) and lines[end].startswith("   ") and not re.match(r"  \w+:", lines[end]):
            end += 1  # a block value
        block = lines[start:end]
        block[index - start] = f"    {name}:" + lines[index].split(":", 1)[1]
        groups.setdefault(group, []).extend("  " + line if i != index - start else line for i, line in
                                            enumerate(block))
        first_line.setdefault(group, start)
        dropped.update(range(start, end))
    out = []
    for index, line in enumerate(lines):
        for group, first in first_line.items():
            if first == index:
                out += [f"  {group}:", *groups[group]]
        if index not in dropped:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str]) -> None:
    """`caption migrate-config FILE... [--in-place]`."""
    parser = argparse.ArgumentParser(prog="caption migrate-config", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", help="config files (YAML) written for caption before 0.2")
    parser.add_argument("--in-place", action="store_true", help="rewrite each file instead of printing it")
    args = parser.parse_args(argv)
    for path in args.files:
        text = Path(path).read_text(encoding="utf-8")
        migrated = migrate_yaml(text)
        if args.in_place:
            Path(path).write_text(migrated, encoding="utf-8")
            print(f"{path}: {'migrated' if migrated != text else 'nothing to migrate'}", file=sys.stderr)
        else:
            sys.stdout.write(migrated)
