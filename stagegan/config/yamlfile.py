"""Reading YAML: the one loader of configs, stage files and run records (limits on size,
depth and aliases; `1e-4` read as a float), the dumper that writes a config back as it was,
and one line for any YAML error. TF-free."""

import re

import yaml

from stagegan.errors import ConfigError

# Limits on what a YAML file or `--set` value may hold. Configs are a few KiB and nest a few
# levels; past these, parsing would not end (an alias bomb: 10**9 values from 600 bytes, once
# walked), overflow the stack (the composer and every walk of a config recurse) or fill memory.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 100
MAX_YAML_ALIASES = 2000
MAX_YAML_ALIAS_VALUES = 100_000  # values that aliases add, each counted expanded


class YamlLimit(yaml.YAMLError):
    """A YAML document over one of the limits above: `problem` says which, `problem_mark` where."""

    def __init__(self, problem, mark):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-4` as a float (YAML 1.1 needs `1.0e-4`), and refuses a
    document over the limits above while composing it, before anything is expanded."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._alias_values = 0
        self._expanded = {}  # id(node) -> (values, depth) of a node, aliases expanded

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._count_alias(event, node)
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise YamlLimit(
                    f"YAML nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _count_alias(self, event, node):
        mark = event.start_mark
        if node.end_mark is None:  # its collection is still open: the alias is inside it
            raise YamlLimit(f"YAML alias *{event.anchor} is used inside its own anchor", mark)
        self._aliases += 1
        if self._aliases > MAX_YAML_ALIASES:
            raise YamlLimit(f"more than {MAX_YAML_ALIASES} YAML aliases", mark)
        values, depth = self._size(node)
        self._alias_values += values
        if self._alias_values > MAX_YAML_ALIAS_VALUES:
            raise YamlLimit(
                f"YAML aliases expand to more than {MAX_YAML_ALIAS_VALUES:,} values "
                "(an alias bomb?)",
                mark,
            )
        if self._depth + depth > MAX_YAML_DEPTH:
            raise YamlLimit(f"YAML nested deeper than {MAX_YAML_DEPTH} levels", mark)

    def construct_object(self, node, deep=False):
        # A value that matches a YAML type but that Python refuses (an integer of 5,000
        # digits, month 13 of a date) is broken YAML at that node, not a crash.
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as e:
            problem = str(e).split(";")[0]  # not Python's advice on sys.set_int_max_str_digits
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    def _size(self, node):
        """`(values, depth)` of a finished node with its aliases expanded; memoised, so that
        a chain of aliases costs one visit per node, not one per expanded value."""
        known = self._expanded.get(id(node))
        if known is not None:
            return known
        children = []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        sizes = [self._size(child) for child in children]
        known = (1 + sum(v for v, _ in sizes), 1 + max((d for _, d in sizes), default=0))
        self._expanded[id(node)] = known
        return known


class ConfigDumper(yaml.SafeDumper):
    """SafeDumper that quotes what `_Loader` would read back as another type (the string
    `1e-4`), so a saved config loads as it was."""


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
for _cls in (_Loader, ConfigDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def yaml_load(text):
    """Parse YAML text with stagegan's loader.

    Raises:
        yaml.YAMLError: broken YAML; `YamlLimit` for a document over the limits (aliases,
            nesting; the caller checks the size).
    """
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def yaml_dump(value):
    """YAML text of a config (or part of one) that `yaml_load` reads back as it is."""
    return yaml.dump(value, Dumper=ConfigDumper, sort_keys=False, default_flow_style=None)


def describe_yaml_error(error, source):
    """One line for a `yaml.YAMLError` from `yaml_load` of `source` (a file, `--set value`)."""
    if isinstance(error, yaml.reader.ReaderError):
        return (
            f"{source} is not YAML text: character #x{error.character:04x} at offset "
            f"{error.position} is not allowed"
        )
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or "invalid YAML"
    if isinstance(error, YamlLimit):
        return f"{source} is refused{where}: {problem}"
    return f"broken YAML in {source}{where}: {problem}"


def read_yaml(path, key):
    """Read a YAML file into a mapping; any problem (a missing, unreadable, binary or
    over-large file, broken YAML, a document over the limits) is a ConfigError naming `key`
    and the file."""
    from stagegan.config.files import read_bytes

    data = read_bytes(path, key, MAX_YAML_BYTES, what="config file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            key, f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None
    try:
        data = yaml_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(key, describe_yaml_error(e, path)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(key, f"{path} must hold a mapping, got {type(data).__name__}")
    return data
