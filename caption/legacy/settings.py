"""Files and command lines of caption 0.1, read by caption 0.2 and 0.3: the flat model settings and where each lives
now, and the options of describe, evaluate, compare and serve renamed to `caption fit`'s names. Removed in 0.4.

`RENAMED` maps each flat key (`model.embed_dim`) to its group's (`model.decoder.embed_dim`), `RENAMED_OPTIONS` each
option of 0.1 (`--beam_size`) to its new name. Only the readers of 0.1's files use it: the checkpoint reader
(`caption.io.checkpoints.read_checkpoint`, through `grouped` in `caption.legacy.checkpoints.upgraded`),
`caption migrate-config` (`is_old`, `moved`) and the parsers' error paths (`renamed_hint`, `renamed_option_hint`). No
torch here, so those answer at once. The migration: docs/settings.md#migration-from-01.
"""

import re
from typing import Any

from caption.errors import ConfigError

# The flat `model.` keys of 0.1's checkpoints and configs, and where each lives since 0.2.
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
# The options of `caption describe`, `evaluate`, `compare` and `serve` in 0.1, and their names since 0.2: those of
# `caption fit`, `test` and `predict` for the same knob (caption.cli.options).
RENAMED_OPTIONS = {
    "--beam_size": "--model.decoding.beam_size",
    "--max_length": "--model.decoding.max_caption_length",
    "--batch_size": "--data.eval_batch_size",
    "--num_captions": "--predictions.num_captions",
    "--out": "--predictions.out",
    "--device": "--trainer.accelerator (auto, cpu, gpu) with --trainer.devices for a GPU's index ([1]: cuda:1)",
}
MIGRATE_HINT = ("`caption migrate-config FILE --in-place` rewrites a config file (docs/settings.md, "
                "\"Migration from 0.1\")")


def is_old(key: str, value: Any) -> bool:
    """Whether `key: value` in the model settings is a flat key of 0.1. `attention` and `encoder` are both a flat key
    (a string) and a group (a mapping, or empty)."""
    return key in RENAMED and not (key in GROUPS and (value is None or isinstance(value, dict)))


def moved(settings: dict[str, Any], *, where: str) -> dict[str, Any]:
    """`settings` with each flat key of 0.1 moved into its group, merged with the group's keys where it exists already,
    each new group where its first key was. A setting given both flat and in its group, with two values, is a
    ConfigError naming both."""
    result: dict[str, Any] = {}
    given_as: dict[str, str] = {}  # new dotted name: the key that set it ("embed_dim", or "decoder.embed_dim")

    def put(group: str, name: str, value: Any, key: str) -> None:
        members = result.get(group)
        if members is None:
            members = result[group] = {}
        elif not isinstance(members, dict):
            raise ConfigError(f"{where}: model.{group} is {members!r}, not a group of settings")
        setting = f"{group}.{name}"
        if name in members and members[name] != value:
            raise ConfigError(f"{where}: model.{given_as[setting]} is {members[name]!r} but model.{key} is {value!r}: "
                              f"keep only model.{setting}")
        members[name], given_as[setting] = value, key

    for key, value in settings.items():
        if is_old(key, value):
            group, _, name = RENAMED[key].rpartition(".")
            put(group, name, value, key)
        elif key in GROUPS and isinstance(value, dict):
            for name, given in value.items():
                put(key, name, given, f"{key}.{name}")
        elif not (key in GROUPS and value is None and key in result):
            result[key] = value
    return result


def grouped(hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's hyperparameters with the flat keys of 0.1 moved into their groups; the settings of the attention
    kind the model does not use (all at their defaults then) are left out. Those of 0.2 are returned as they are."""
    if not any(is_old(key, value) for key, value in hyperparameters.items()):
        return hyperparameters
    result = moved(hyperparameters, where="checkpoint")
    kind = result.get("attention", {}).get("kind", "soft")
    result.pop("hard" if kind == "soft" else "soft", None)
    return result


def renamed_hint(message: str) -> str:
    """For a command line parser's error `message` that refuses a flat key of 0.1 (`unrecognized arguments:
    --model.embed_dim`, `Group 'model' does not accept option 'embed_dim'`, or a string given for `model.attention`
    or `model.encoder`, now groups), the sentence naming its new key; else ""."""
    keys = re.findall(r"--model\.(\w+)\b(?![.\w])", message)
    keys += re.findall(r"Group 'model' does not accept option '(\w+)'", message)
    keys += [key for key in re.findall(r'Parser key "model\.(\w+)": Unable to load config \'[^{\']*\'', message)
             if key in GROUPS]
    found = [key for key in dict.fromkeys(keys) if key in RENAMED]
    if not found:
        return ""
    moves = ", ".join(f"model.{key} is now model.{RENAMED[key]}" for key in found)
    return f"model settings were grouped in caption 0.2: {moves}; {MIGRATE_HINT}"


__all__ = ["GROUPS", "RENAMED", "grouped", "is_old", "moved", "renamed_hint"]


def renamed_option_hint(args: list[str], *, known: Any = ()) -> str:
    """For a command line `args` that a parser refused, the sentence naming the new spelling of each option in it that
    is spelled as in 0.1 (`--beam_size` or `--beam_size=3`) and not one of the parser's `known` options; else ""."""
    given = [arg.partition("=")[0] for arg in args if arg.startswith("--")]
    found = [option for option in dict.fromkeys(given) if option in RENAMED_OPTIONS and option not in known]
    if not found:
        return ""
    moves = "; ".join(f"{option} is now {RENAMED_OPTIONS[option]}" for option in found)
    return f"{moves} (since caption 0.2, the names `caption fit` and `caption predict` give the same knobs)"
