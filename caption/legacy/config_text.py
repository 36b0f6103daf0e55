"""A config of caption 0.1 rewritten with its model settings in their groups, as text: values, comments and YAML style
kept (`caption migrate-config`, in `caption.cli.migrate_config`, reads and writes the files).

The flat keys of 0.1 (found with `caption.legacy.settings.is_old`, moved as `caption.legacy.settings.moved` moves them)
are moved line by line into their groups; the result is parsed again and must give the moved settings, else the file
is refused in one line naming the keys to move by hand. No torch here: the command answers at once.
"""

import re
from typing import Any

import yaml

from caption.errors import ConfigError
from caption.legacy.settings import GROUPS, RENAMED, is_old, moved


def settings_location(data: Any, *, where: str) -> tuple[str, ...] | None:
    """The keys leading to a config's model settings (`model`, or `model.init_args` beside a class_path), or None
    when it has no model section."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        return None
    if "class_path" not in model:
        return ("model",)
    beside = [key for key, value in model.items() if is_old(key, value)]
    if beside:
        raise ConfigError(f"{where}: model.{beside[0]} is beside model.class_path: move it under model.init_args "
                          f"as model.init_args.{RENAMED[beside[0]]}")
    return ("model", "init_args") if isinstance(model.get("init_args"), dict) else None


def old_keys_in(data: Any, *, where: str) -> list[str]:
    """The flat keys of 0.1 in a config's model settings."""
    location = settings_location(data, where=where)
    if location is None:
        return []
    settings = data[location[0]] if len(location) == 1 else data[location[0]][location[1]]
    return [key for key, value in settings.items() if is_old(key, value)]


def migrated_data(data: dict[str, Any], location: tuple[str, ...], *, where: str) -> dict[str, Any]:
    """The config's parsed settings as they must read after the migration."""
    if len(location) == 1:
        return data | {"model": moved(data["model"], where=where)}
    return data | {"model": data["model"] | {"init_args": moved(data["model"]["init_args"], where=where)}}


def mapping_node(node: yaml.Node, path: tuple[str, ...]) -> yaml.MappingNode | None:
    """The mapping node at `path` under `node` (the one of the last key of that name, as the loader takes it)."""
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            return None
        found = [value for name, value in node.value if isinstance(name, yaml.ScalarNode) and name.value == key]
        if not found:
            return None
        node = found[-1]
    return node if isinstance(node, yaml.MappingNode) else None


def key_column(node: yaml.Node, path: tuple[str, ...]) -> int:
    """The column of the last key of `path` (`model:`, or `init_args:`), whose block the settings are indented under."""
    for key in path[:-1]:
        node = next(value for name, value in node.value if name.value == key)
    return next(name for name, _ in node.value if name.value == path[-1]).start_mark.column


def is_filler(line: str) -> bool:
    """A blank or comment-only line."""
    return not line.strip() or line.lstrip().startswith("#")


def indentation(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


class Refused(Exception):
    """A layout the line editor does not handle: the file is refused with the keys to move by hand."""


def entry_spans(lines: list[str], mapping: yaml.MappingNode) -> list[tuple[int, int]]:
    """(first line, last line) of each entry of a block `mapping`: its key's line with the comment lines right above
    it, down to the last line of its value (trailing blank and comment lines left out)."""
    indent = mapping.value[0][0].start_mark.column
    keys = [name.start_mark.line for name, _ in mapping.value]
    for (name, _), line in zip(mapping.value, keys):
        if name.start_mark.column != indent or lines[line][:indent].strip():
            raise Refused("a key that does not start its own line")
    end = keys[-1] + 1  # the mapping ends at the first content line indented less than its keys
    while end < len(lines) and (is_filler(lines[end]) or indentation(lines[end]) >= indent):
        end += 1
    starts = []
    for index, line in enumerate(keys):
        floor = keys[index - 1] if index else mapping.start_mark.line - 1
        while line - 1 > floor and lines[line - 1].strip().startswith("#"):
            line -= 1
        starts.append(line)
    spans = []
    for index, first in enumerate(starts):
        last = (starts[index + 1] if index + 1 < len(starts) else end) - 1
        while last > keys[index] and is_filler(lines[last]):
            last -= 1
        spans.append((first, last))
    return spans


def inline_comment(line: str, value: yaml.Node) -> str:
    """The comment after a one-line `value` on `line` ("# ..."), or ""."""
    rest = line[value.end_mark.column:] if value.start_mark.line == value.end_mark.line else ""
    return rest.strip() if rest.strip().startswith("#") else ""


def edit_block(lines: list[str], mapping: yaml.MappingNode, old: set[str], step: int,
               groups_after: dict[str, Any]) -> list[str]:
    """`lines` with the `old` keys of block `mapping` moved into their groups, comments moved with their keys; a group
    written in flow style is rewritten from `groups_after` (the groups' settings after the move)."""
    spans = entry_spans(lines, mapping)
    indent = mapping.value[0][0].start_mark.column
    entries = [(name, value, span) for (name, value), span in zip(mapping.value, spans)]
    if len({name.value for name, _, _ in entries}) != len(entries):
        raise Refused("a key given twice")
    removed: set[int] = set()
    replaced: dict[int, str] = {}
    inserted: dict[tuple[int, int], list[str]] = {}  # (line, 0 before it / 1 after it): lines
    targets: dict[str, tuple[int, int, int]] = {}  # group: (line, 0/1, indentation of its keys)
    for name, value, (first, last) in entries:  # the groups there already
        if name.value in old or name.value not in GROUPS:
            continue
        line = lines[name.start_mark.line]
        if isinstance(value, yaml.MappingNode) and value.flow_style:
            if value.start_mark.line != value.end_mark.line or value.start_mark.line != name.start_mark.line:
                raise Refused(f"model.{name.value} is written in flow style over several lines")
            flow = yaml.safe_dump(groups_after[name.value], default_flow_style=True, sort_keys=False,
                                  width=1 << 30).strip()
            replaced[name.start_mark.line] = line[:value.start_mark.column] + flow + line[value.end_mark.column:]
            targets[name.value] = (-1, 0, 0)
        elif isinstance(value, yaml.MappingNode):
            targets[name.value] = (last, 1, value.value[0][0].start_mark.column)
        else:  # `group:` or `group: null`: emptied, its keys follow it
            if value.start_mark.line != name.start_mark.line:
                raise Refused(f"model.{name.value} is empty in an unusual layout")
            replaced[name.start_mark.line] = (line[:value.start_mark.column].rstrip()
                                              + line[value.end_mark.column:])
            targets[name.value] = (name.start_mark.line, 1, indent + step)
    for name, value, (first, last) in entries:
        if name.value not in old:
            continue
        group, _, new_name = RENAMED[name.value].rpartition(".")
        key_line = name.start_mark.line
        if group not in targets:  # a new group, where its first key was
            inserted[(first, 0)] = [" " * indent + f"{group}:"]
            targets[group] = (first, 0, indent + step)
        line, side, child = targets[group]
        if line < 0:  # merged into a flow-style group: the key's comment lines stay, its line comment follows the group
            removed.update(range(key_line, last + 1))
            comment = inline_comment(lines[key_line], value)
            group_line = next(key.start_mark.line for key, _, _ in entries if key.value == group)
            if comment:
                replaced[group_line] = replaced[group_line] + "  " + comment
            continue
        block = lines[first:last + 1]
        block[key_line - first] = " " * indent + new_name + lines[key_line][name.end_mark.column:]
        removed.update(range(first, last + 1))
        inserted.setdefault((line, side), []).extend(
            " " * (child - indent) + text if text.strip() else text for text in block)
    out: list[str] = []
    for index, line in enumerate(lines):
        out += inserted.get((index, 0), [])
        if index not in removed:
            out.append(replaced.get(index, line))
        out += inserted.get((index, 1), [])
    return out


def edit_flow(text: str, mapping: yaml.MappingNode, settings: dict[str, Any]) -> str:
    """`text` with the flow-style `mapping` ({...}) replaced by `settings` in flow style; refused if it holds
    comments."""
    span = text[mapping.start_mark.index:mapping.end_mark.index]
    if re.search(r"(^|\s)#", span):
        raise Refused("comments inside a flow-style model section")
    flow = yaml.safe_dump(settings, default_flow_style=True, sort_keys=False, width=1 << 30).strip()
    return text[:mapping.start_mark.index] + flow + text[mapping.end_mark.index:]


def migrate_yaml(text: str, *, where: str = "config") -> str:
    """A config's text with its flat model keys of 0.1 moved into their groups, values and comments kept; the text
    itself when it has none. The result is checked: it parses to the same settings, moved, or a ConfigError names
    the keys to move by hand."""
    try:
        data = yaml.safe_load(text)
        old = old_keys_in(data, where=where)
        if not old:
            return text
        location = settings_location(data, where=where)
        expected = migrated_data(data, location, where=where)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where}: not valid YAML ({yaml_problem(error)})") from None
    by_hand = "; ".join(f"model.{key} -> model.{RENAMED[key]}" for key in old)
    try:
        mapping = mapping_node(root, location)
        if mapping is None or not mapping.value:
            raise Refused("the model section is not written as a mapping")
        settings = expected["model"] if len(location) == 1 else expected["model"]["init_args"]
        if mapping.flow_style:
            result = edit_flow(text, mapping, settings)
        else:
            present = {name.value for name, _ in mapping.value}
            if not set(old) <= present:
                raise Refused("keys that come from a YAML merge key (<<) or alias")
            newline = "\r\n" if "\r\n" in text else "\n"
            step = mapping.value[0][0].start_mark.column - key_column(root, location)
            lines = edit_block(text.splitlines(), mapping, set(old), step, settings)
            result = newline.join(lines) + (newline if text.endswith(("\n", "\r")) else "")
        if yaml.safe_load(result) != expected:
            raise Refused("its layout")
    except (Refused, yaml.YAMLError) as error:
        reason = str(error) if isinstance(error, Refused) else "its layout"
        raise ConfigError(f"{where}: has settings of caption 0.1 that migrate-config cannot move here ({reason}): "
                          f"move them by hand: {by_hand}") from None
    return result


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in a few words, with its line: "expected a single document ..., line 3"."""
    mark = getattr(error, "problem_mark", None)
    problem = " ".join(part for part in (getattr(error, "context", None), getattr(error, "problem", None)) if part)
    return " ".join(f"{problem or error}{f', line {mark.line + 1}' if mark is not None else ''}".split())
