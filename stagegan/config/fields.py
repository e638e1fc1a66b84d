"""The config's field vocabulary: `option` (a field with its default, its check and its resume
rule) and the checks fields are built from, read by generic code (`build_section`,
`checked_fields`, `defaults`, `record_keys`): a new key of a section is one `option` line."""

import dataclasses

from stagegan.config.numbers import as_integer, as_number
from stagegan.config.overrides import (
    check_keys,
    check_mapping,
)
from stagegan.errors import ConfigError, shown

MAX_SEED = 2**32 - 1  # seeds: 0..MAX_SEED (`check_seed`)


def option(default, check, resume=False, null=False):
    """A config field: `default`, `check(value, key) -> value` (raises `ConfigError(key)`),
    and whether a resumed run may change it (`resume`: True or False; a stage's fields name
    their rule, see `Stage`). `null`: an explicit None is a value of its own (a stage's
    `augment: null`), not "take the default"."""
    metadata = {"default": default, "check": check, "resume": resume, "null": null}
    return dataclasses.field(default=default, metadata=metadata)


def integer(minimum=None):
    """The check of an integer of at least `minimum` (`as_integer`)."""
    return lambda value, key: as_integer(value, key, minimum)


def number_at_least(minimum):
    """The check of a finite number of at least `minimum` (`as_number`)."""
    return lambda value, key: as_number(value, key, minimum=minimum)


def required(check):
    """`check`, and a key that must be given (None: missing)."""

    def wrapped(value, key):
        if value is None:
            raise ConfigError(key, "required key is missing")
        return check(value, key)

    return wrapped


def positive_number(value, key):
    return number(value, key, positive=True)


def optional(check):
    """`check`, or None passed through."""
    return lambda value, key: None if value is None else check(value, key)


def as_given(value, key):
    """A value taken as it is: checked later, across fields (`Stage.settle`), or by its
    reader (a task option whose default is None)."""
    return value


def choice(names):
    """The check of a value that is one of `names`."""

    def check(value, key):
        if value not in names:
            known = ", ".join(map(str, names))
            raise ConfigError(key, f"must be one of {known}. Received: {value!r}")
        return value

    return check


def defaults(record):
    """`{field: default}` of a section's record (its declared fields)."""
    return {f.name: f.metadata["default"] for f in dataclasses.fields(record) if f.metadata}


def record_keys(*records):
    """The keys a YAML mapping of these records may hold: their declared fields, in order."""
    return tuple(
        dict.fromkeys(f.name for r in records for f in dataclasses.fields(r) if f.metadata)
    )


def checked_fields(record, mapping, key):
    """`{field: value}` of `record`'s declared fields (made by `option`) from the YAML mapping
    at `key` (its keys already checked): each value given (None: not given) or the field's
    default, through the field's check."""
    null = {f.name for f in dataclasses.fields(record) if f.metadata.get("null")}
    given = {n: value for n, value in mapping.items() if value is not None or n in null}
    return {
        f.name: f.metadata["check"](given.get(f.name, f.metadata["default"]), f"{key}.{f.name}")
        for f in dataclasses.fields(record)
        if f.metadata
    }


def read_record(record, value, key, /, **given):
    """`record` from the YAML mapping `value` at `key`: unknown keys refused (`record_keys`),
    each declared field given or its default, through its check (`checked_fields`); `given`:
    the fields the caller sets (a record's own `key`)."""
    check_keys(check_mapping(value, key), record_keys(record), key)
    return record(**given, **checked_fields(record, value, key))


def build_section(record, value, key):
    """The record of section `key` from its YAML mapping `value`, whose defaults the caller
    has filled in (from `defaults(record)`, defaults first, as `config.yaml` keeps them):
    unknown keys refused, each field checked."""
    fields = dataclasses.fields(record)
    check_keys(check_mapping(value, key), tuple(f.name for f in fields), key)
    return record(**{f.name: f.metadata["check"](value[f.name], f"{key}.{f.name}") for f in fields})


def string(value, key):
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"must be a non-empty string. Received: {value!r}")
    return value


def boolean(value, key):
    """true or false."""
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false. Received: {value!r}")
    return value


def check_seed(value, key):
    """A seed: an integer in 0..2**32 - 1 (Keras seeds NumPy, which takes no more); else a
    ConfigError naming `key` (a config key, or a flag such as `--seed`)."""
    value = as_integer(value, key, minimum=0, maximum=None)
    if value > MAX_SEED:
        received = shown(value)
        raise ConfigError(key, f"must be at most {MAX_SEED} (2**32 - 1). Received: {received}")
    return value


def number(value, key, positive=False):
    """A finite number (positive, if asked: `as_number`)."""
    return as_number(value, key, positive=positive)


def decay(value, key):
    """A number in [0, 1): a decay per step (an EMA's, an Adam beta)."""
    value = as_number(value, key)
    if not 0 <= value < 1:
        raise ConfigError(key, f"must be in [0, 1). Received: {value}")
    return value


def patterns(value, key):
    """Glob patterns over variable paths: one, or a non-empty list."""
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise ConfigError(key, f"must be a pattern or a list of patterns. Received: {value!r}")
    return tuple(value)


# A task's options have the type of their defaults (`stagegan.tasks.base.merge_options`), and
# their checks compare them, never convert them: an int beyond any float stays an int, for the
# memory check to name (`Task.check_memory`).


def positive(value, key):
    """A value above 0."""
    if value <= 0:
        raise ConfigError(key, f"must be positive. Received: {value!r}")
    return value


def not_negative(value, key):
    """A value of 0 or more."""
    if value < 0:
        raise ConfigError(key, f"must be 0 or more. Received: {value}")
    return value


def object_path(value, key):
    """A `package.module:function` path, as text (`stagegan.config.objects.load_object`
    imports it)."""
    if not isinstance(value, str):
        raise ConfigError(key, f"expected 'package.module:function'. Received: {value!r}")
    return value
