"""The override grammar (`--set key.path=value`, `stages[+]=...`) and the raw config's walks
(key paths, stage files read into the config, nesting and finiteness checks). TF-free."""

import copy
import math
import re

import yaml

from stagegan.config.resources import builtin_names, find_yaml
from stagegan.config.yamlfile import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    YamlLimit,
    describe_yaml_error,
    read_yaml,
    yaml_load,
)
from stagegan.errors import ConfigError

STAGE_FILE_KEYS = ("description", "optimizers", "stages")

_INDEX = re.compile(r"\[(-?\d+|\+)\]")
APPEND = "+"  # `stages[+]=...`: append to a list


def parse_key_path(path):
    """`stages[1].updates.0.every` -> ['stages', 1, 'updates', 0, 'every']; `stages[-1]` ->
    ['stages', -1] (the last); `stages[+]` -> ['stages', '+'] (append; only as the last part)."""
    if not path.isprintable():
        raise ConfigError("--set", f"malformed key path {path!r}")
    parts = []
    for piece in _INDEX.sub(r".\1", path).split("."):
        if piece == "":
            raise ConfigError("--set", f"malformed key path {path!r}")
        parts.append(int(piece) if re.fullmatch(r"-?\d+", piece) else piece)
    if APPEND in parts[:-1]:
        raise ConfigError(path, "--set: [+] (append) may only end a key path")
    return parts


def unshare(value):
    """A deep copy in which no mapping or list appears twice (YAML aliases become copies),
    and tuples (YAML's `!!pairs`, `!!omap`) are lists, as a saved config reads them back."""
    if isinstance(value, dict):
        return {key: unshare(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [unshare(item) for item in value]
    return copy.deepcopy(value)


def check_nesting(value, key):
    """Refuse a config value given as a Python object (the API) that YAML could not give: one
    nested deeper than `MAX_YAML_DEPTH`, holding itself, or holding more than a million values
    once shared parts are counted each time (every walk of a config recurses, and copies)."""
    stack, count = [(value, ())], 0
    while stack:
        item, ancestors = stack.pop()
        count += 1
        if count > 1_000_000:
            raise ConfigError(key, "holds more than 1,000,000 values")
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if id(item) in ancestors:
            raise ConfigError(key, f"holds itself (a {type(item).__name__} inside itself)")
        if len(ancestors) >= MAX_YAML_DEPTH:
            raise ConfigError(key, f"is nested deeper than {MAX_YAML_DEPTH} levels")
        stack.extend((child, (*ancestors, id(item))) for child in children)


def check_finite(value, parts=()):
    """Refuse NaN and Inf anywhere in a raw config (`.nan`, `.inf` in YAML), naming the key:
    no option of stagegan takes one, and one that slipped through would fail far from here."""
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite(item, (*parts, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_finite(item, (*parts, index))
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(format_key_path(parts), f"must be a finite number. Received: {value}")


def format_key_path(parts):
    """`['stages', 1, 'steps']` -> `stages[1].steps`. A name that is empty or not printable
    is shown quoted (`data.'a\\nb'`), so that an error naming it stays one line."""
    text = ""
    for part in parts:
        if (isinstance(part, int) and not isinstance(part, bool)) or part == APPEND:
            text += f"[{part}]"
            continue
        name = str(part)
        if not name or not name.isprintable() or name != name.strip():
            name = repr(part)
        text += f".{name}" if text else name
    return text


def override(raw, overrides, sections):
    """Apply `key.path=value` overrides to a raw config (returns a new mapping); `sections`:
    the top-level keys' defaults (a mapping, or None, for a section: an absent or null one
    that a path reaches into starts from its defaults).

    A path that reaches into `stages` or `optimizers` while `stages` is still a file reference
    reads that file first, so `--set stages[2].steps=100` works with `stages: glcic`, and
    `--set optimizers.d.learning_rate=1e-4` reaches the file's named optimizers. YAML anchors
    are unshared first, so setting one use of an aliased mapping changes that use only.
    `[+]` at the end of a path appends to a list: `--set 'stages[+]={name: more, ...}'`;
    `[-1]` is a list's last item.
    """
    raw = unshare(raw)
    for item in overrides:
        if isinstance(item, tuple):  # (key path, value): the Python API's, value as it is
            path_text, value = item
            parts = parse_key_path(path_text)
            value = unshare(value)
        else:
            path_text, parts, value = _parse_override(item)
        if parts[0] in ("stages", "optimizers") and len(parts) > 1:
            _inline_stage_file(raw, parts[0])
        node = _override_parent(raw, parts, path_text, sections)
        last = parts[-1]
        if last == APPEND or isinstance(last, int):
            _check_index(node, parts, len(parts) - 1)
            if last == APPEND:
                node.append(value)
                continue
        elif not isinstance(node, dict):
            raise ConfigError(path_text, "--set: parent is not a mapping")
        node[last] = value
    return raw


def _parse_override(item):
    """`key.path=value` -> `(path text, key path parts, value parsed as YAML)`."""
    if "=" not in item:
        raise ConfigError("--set", f"expected key.path=value, got {item!r}")
    path_text, value_text = item.split("=", 1)
    path_text = path_text.strip()
    parts = parse_key_path(path_text)
    if len(value_text) > MAX_YAML_BYTES:
        raise ConfigError(path_text, f"--set value is longer than {MAX_YAML_BYTES >> 20} MiB")
    try:
        value = _restore_surrogates(yaml_load(_hide_surrogates(value_text)))
    except YamlLimit as e:
        raise ConfigError(path_text, describe_yaml_error(e, "--set value")) from None
    except yaml.YAMLError:
        raise ConfigError(path_text, f"--set value is not valid YAML: {value_text!r}") from None
    return path_text, parts, unshare(value)


# Command-line bytes that are not UTF-8 (a folder name, say) reach Python as lone surrogates
# (`surrogateescape`), which YAML refuses; they stand in for themselves while the value parses.
_SURROGATES = re.compile("[\udc80-\udcff]")
_STAND_INS = re.compile("[\U0010ff80-\U0010ffff]")
_STAND_IN = 0x10FF80 - 0xDC80


def _hide_surrogates(text):
    return _SURROGATES.sub(lambda m: chr(ord(m.group()) + _STAND_IN), text)


def _restore_surrogates(value):
    if isinstance(value, str):
        return _STAND_INS.sub(lambda m: chr(ord(m.group()) - _STAND_IN), value)
    if isinstance(value, dict):
        return {_restore_surrogates(k): _restore_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_surrogates(item) for item in value]
    return value


def _inline_stage_file(raw, section):
    """Before an override reaches into `stages` or `optimizers`: read a stage file that
    `stages` still names, so its stages and named optimizers can be changed."""
    if not isinstance(raw.get("stages"), str):
        return
    stages, file_optimizers = read_stage_file(raw["stages"])
    if section == "stages":
        raw["stages"] = unshare(stages)
    given = check_mapping(raw.get("optimizers") or {}, "optimizers")
    raw["optimizers"] = {**unshare(file_optimizers), **given}


def _override_parent(raw, parts, path_text, sections):
    """The mapping or list that an override's last key path part is set in."""
    node = raw
    for depth, part in enumerate(parts[:-1]):
        if isinstance(part, int):
            _check_index(node, parts, depth)
            node = node[part]
            continue
        where = format_key_path(parts[: depth + 1])
        if not isinstance(node, dict):
            raise ConfigError(where, f"--set: {format_key_path(parts[:depth])} is not a mapping")
        section = sections.get(part, 0) if depth == 0 else 0
        if (section is None or isinstance(section, dict)) and node.get(part) is None:
            # An absent or null section starts from its defaults (`ema`: none, so {}).
            node[part] = copy.deepcopy(section or {})
        following = parts[depth + 1]
        if node.get(part) is None and (following == APPEND or isinstance(following, int)):
            _check_index(None, parts, depth + 1)  # `stages[0]` with no stages
        if part not in node:
            raise ConfigError(where, "--set: unknown key")
        node = node[part]
    return node


def _check_index(node, parts, depth):
    """Refuse an override whose `parts[depth]` (an index, or `+` to append) cannot apply to
    `node`, naming the key path up to it and saying why: no such list, not a list, out of
    range."""
    where, parent = format_key_path(parts[: depth + 1]), format_key_path(parts[:depth])
    index = parts[depth]
    if node is None:
        what = "to append to" if index == APPEND else "to index"
        raise ConfigError(where, f"--set: the config has no {parent} list {what}")
    if not isinstance(node, list):
        raise ConfigError(where, f"--set: {parent} is not a list. Received: {node!r}")
    if index != APPEND and not -len(node) <= index < len(node):
        items = f"has {len(node)} items ({parent}[0] to {parent}[{len(node) - 1}])"
        raise ConfigError(
            where, f"--set: index out of range: {parent} {items if node else 'is empty'}"
        )


def read_stage_file(reference):
    """The `(stages, named optimizers)` of a stage file (`stages: NAME` or a path)."""
    path = find_yaml("stages", reference)
    if path is None:
        raise ConfigError(
            "stages",
            f"no such stage file or built-in schedule: {reference!r} "
            f"(built-in: {', '.join(builtin_names('stages'))})",
        )
    data = read_yaml(path, "stages")
    check_keys(data, STAGE_FILE_KEYS, f"stages ({path})")
    if "stages" not in data:
        raise ConfigError("stages", f"{path} has no 'stages' list")
    return data["stages"], check_mapping(data.get("optimizers", {}), f"optimizers ({path})")


def check_keys(mapping, allowed, key):
    """Refuse a key of `mapping` (at `key`) that is not in `allowed`."""
    for name in mapping:
        if name not in allowed:
            where = format_key_path((key, name) if key else (name,))
            raise ConfigError(where, f"unknown key (known: {', '.join(allowed) or 'none'})")


def check_mapping(value, key):
    if not isinstance(value, dict):
        raise ConfigError(key, f"must be a mapping. Received: {value!r}")
    return value
