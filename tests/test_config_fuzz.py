"""Fuzzing the config parser with Hypothesis: whatever value sits at whatever key, and whatever
`--set` string is given, `stagegan.load` returns a `RunConfig` (that survives the trip through
a run's `config.yaml`) or raises `stagegan.ConfigError` with a key and a one-line message;
never anything else.

The suite runs a few dozen examples per test (a few seconds); `STAGEGAN_FUZZ_EXAMPLES=3000
pytest -q tests/test_config_fuzz.py` runs more.
"""

import copy
import json
import os
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stagegan
from stagegan.config.schema import (
    AUGMENT_DEFAULTS,
    AUGMENT_OPS,
    EMA_DEFAULTS,
    EVAL_DEFAULTS,
    INIT_DEFAULTS,
    OPTIMIZER_TYPES,
    REQUIRED_TOP_LEVEL,
    SCHEDULE_KEYS,
    STAGE_KEYS,
    TOP_LEVEL_DEFAULTS,
    UNTIL_KEYS,
    UPDATE_KEYS,
    parse_config,
)
from stagegan.config.yamlfile import yaml_load
from stagegan.tasks import make_task
from stagegan.tasks.base import RandomStreams
from stagegan.tasks.completion import Completion
from stagegan.tasks.mog2d import Mog2D
from stagegan.tasks.unconditional import Unconditional
from stagegan.training.trainer import held_counts

EXAMPLES = int(os.environ.get("STAGEGAN_FUZZ_EXAMPLES", "75"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing left on disk
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

BASE = {
    "name": "fuzz",
    "task": "mog2d",
    "batch_size": 8,
    "optimizers": {
        "d": {"type": "sgd", "learning_rate": 0.1},
        "g": {"type": "adam", "learning_rate": {"schedule": "linear", "initial": 0.1, "steps": 9}},
        "new": {
            "type": "adam",
            "learning_rate": {
                "schedule": "exponential",
                "initial": 0.1,
                "steps": 9,
                "decay_rate": 0.5,
            },
        },
    },
    "augment": {"ops": ["color"], "p": 0.5},
    "ema": {"decay": 0.9},
    "eval": {"every": 2},
    "stages": [
        {
            "name": "d",
            "steps": 3,
            "until": {"metric": "discriminator/d_loss", "below": 0.5, "check_every": 1},
            "updates": [
                {"train": "discriminator/*", "loss": "d_loss", "optimizer": "d"},
                {"train": "generator/*", "loss": "g_loss", "optimizer": {"type": "sgd"}},
            ],
        },
        {
            "name": "joint",
            "steps": 4,
            "mode": "simultaneous",
            "augment": None,
            "updates": [
                {"train": ["discriminator/*"], "loss": {"d_loss": 1}, "optimizer": "d"},
                {"train": ["generator/*"], "loss": {"g_loss": 0.5}, "every": 2, "optimizer": "g"},
            ],
        },
    ],
}


def key_paths():
    """Every key a config knows, as a `--set` key path: the top level and its sections, the
    built-in tasks' options, and the keys of stages, updates, untils, optimizers, schedules."""
    paths = list(REQUIRED_TOP_LEVEL)

    def walk(prefix, mapping):
        for key, default in mapping.items():
            path = f"{prefix}.{key}" if prefix else key
            paths.append(path)
            if isinstance(default, dict):
                walk(path, default)

    walk("", TOP_LEVEL_DEFAULTS)
    for section, defaults in (
        ("ema", EMA_DEFAULTS),
        ("eval", EVAL_DEFAULTS),
        ("init", INIT_DEFAULTS),
        ("augment", AUGMENT_DEFAULTS),
        ("checkpoint.keep_best", {"metric": None, "mode": None}),  # hardening round 4
    ):
        walk(section, defaults)
    for task in TASKS:
        walk("", task.defaults)
    optimizers = ["optimizers.d", "optimizers.g", "optimizers.new"]
    for i, stage in enumerate(BASE["stages"]):
        key = f"stages[{i}]"
        paths += [f"{key}.{name}" for name in STAGE_KEYS]
        paths += [f"{key}.until.{name}" for name in UNTIL_KEYS]
        walk(f"{key}.augment", AUGMENT_DEFAULTS)
        for j in range(len(stage["updates"])):
            update = f"{key}.updates[{j}]"
            paths += [update, *(f"{update}.{name}" for name in UPDATE_KEYS)]
            optimizers.append(f"{update}.optimizer")
    for optimizer in optimizers:
        paths += [f"{optimizer}.{name}" for name in ("type", "learning_rate", "beta_1")]
        paths += [f"{optimizer}.learning_rate.{name}" for name in sorted(SCHEDULE_FIELDS)]
    return sorted(set(paths))


def likely_values():
    """{key name: values it takes in the defaults and the base config}: the fuzzer mostly
    changes one key of a valid config to a near-valid value, so parsing gets past it."""
    found = {}

    def walk(value, name=None):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, key)
        elif isinstance(value, list):
            for item in value:
                walk(item, name)
            found.setdefault(name, []).append(value)
        else:
            found.setdefault(name, []).append(value)

    for mapping in (TOP_LEVEL_DEFAULTS, EMA_DEFAULTS, EVAL_DEFAULTS, AUGMENT_DEFAULTS, BASE):
        walk(mapping)
    for task in TASKS:
        walk(task.defaults)
    found["type"] += list(OPTIMIZER_TYPES)
    found["schedule"] = list(SCHEDULE_KEYS)
    found["mode"] = ["min", "max", "sequential", "simultaneous"]
    found["ops"] = [list(AUGMENT_OPS), *AUGMENT_OPS]
    for name in ("steps", "check_every", "min_steps", "patience", "every", "repeat", "warmup"):
        found.setdefault(name, []).extend([1, 2, 3, 5, 0])
    for name in ("initial", "final", "decay_rate", "p", "target", "min_delta", "below", "above"):
        found.setdefault(name, []).extend([0.1, 0.5, 0.9, 0.0, 1])
    return {name: values for name, values in found.items() if name is not None}


TASKS = (Mog2D, Completion, Unconditional)
RNGS = RandomStreams(0)
SCHEDULE_FIELDS = {"schedule", "warmup"}
for _required, _optional in SCHEDULE_KEYS.values():
    SCHEDULE_FIELDS |= {*_required, *_optional}
KEY_PATHS = key_paths()
LIKELY = likely_values()
NAMES = sorted({re.split(r"[.\[]", path)[-1] for path in KEY_PATHS})
WORDS = [
    *sorted({v for values in LIKELY.values() for v in values if isinstance(v, str)}),
    "alternating",
    "three_phase",
    "generator/*",
    "discriminator/*",
    "d_loss",
    "g_loss",
    "discriminator/d_loss",
    "fid",
    "1e-4",
    "0x10",
    "1_000",
    "",
    " ",
    "a\nb",
    "\x00",
    "~",
    "~nobody/x",
    "null",
    "yes",
]
INTEGERS = st.one_of(
    st.integers(-3, 12),
    st.integers(),
    st.sampled_from([2**31, 2**32 - 1, 2**32, 2**63, 2**64, -(2**63), 10**30, 10**400]),
)
FLOATS = st.one_of(
    st.floats(),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1e-300, 1e300, 5e-324, float("inf"), float("nan")]),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), INTEGERS, FLOATS, st.text(max_size=12), st.sampled_from(WORDS)
)
KEYS = st.one_of(st.sampled_from(NAMES), st.text(max_size=8), st.integers(-2, 3), st.none())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def value_for(path):
    """A value for `path`: one it takes elsewhere (likely valid), a scalar, or anything."""
    likely = LIKELY.get(re.split(r"[.\[]", path)[-1])
    options = [st.sampled_from(likely)] * 2 if likely else []
    return st.one_of(*options, SCALARS, VALUES).map(copy.deepcopy)


CHANGES = st.sampled_from(KEY_PATHS).flatmap(lambda p: st.tuples(st.just(p), value_for(p)))


# YAML text as a `--set` value or a file holds it: tags, anchors, flow collections, broken bits.
YAML_SNIPPETS = [
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!omap [a: 1, b: 2]",
    "!!pairs [a: 1, a: 2]",
    "!!timestamp 2020-01-01",
    "2020-13-45",
    "1" + "0" * 5000,
    "2020-01-01 10:00:00",
    "!!python/object/apply:os.system [echo]",
    "!!str 3",
    "!!int '3'",
    "!!float 1",
    "&a [1, *a]",
    "&a {x: *a}",
    "*undefined",
    "{<<: {a: 1}, b: 2}",
    "[1, 2",
    "{a: 1",
    "'unclosed",
    "--- 1\n--- 2",
    "a: b: c",
    "? [1, 2]\n: 3",
    "{[1]: 2}",
    ".nan",
    "-.inf",
    "0o17",
    "0b101",
    "1:30",
    "1e400",
    "+1",
    "~",
    "",
    "[" * 200 + "]" * 200,
]
YAML_TEXT = st.one_of(st.sampled_from(YAML_SNIPPETS), st.text(max_size=20), st.sampled_from(WORDS))


def set_path(raw, path, value):
    """Put `value` at `path` in `raw`, making (or replacing) the mappings and lists on the way;
    a list index past the end appends."""
    parts = [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p != ""]
    node = raw
    for part, following in zip(parts, [*parts[1:], None], strict=True):
        if isinstance(node, list) and part >= len(node):
            node.append(None)
            part = len(node) - 1
        if following is None:
            node[part] = value
            return
        kind = list if isinstance(following, int) else dict
        if not isinstance(node[part] if isinstance(node, list) else node.get(part), kind):
            node[part] = kind()
        node = node[part]


def mappings(value, found=None):
    """Every mapping inside `value` (random extra keys go into one of them)."""
    found = [] if found is None else found
    if isinstance(value, dict):
        found.append(value)
        for item in value.values():
            mappings(item, found)
    elif isinstance(value, list):
        for item in value:
            mappings(item, found)
    return found


def assert_clean(error):
    """A ConfigError as the CLI needs it: a key, and one line."""
    assert isinstance(error.key, str) and error.key, repr(error)
    assert len(f"stagegan: error: {error}".splitlines()) == 1, repr(str(error))


def check_outcome(load):
    """`load()` gives a RunConfig that round-trips through YAML, or a clean ConfigError."""
    try:
        config = load()
    except stagegan.ConfigError as e:
        assert_clean(e)
        return
    saved = config.to_yaml()
    again = parse_config(yaml_load(saved))
    assert again.raw == config.raw, saved
    assert again.stages == config.stages and again.optimizers == config.optimizers, saved


@FUZZ
@given(
    changes=st.lists(CHANGES, min_size=1, max_size=2),
    extra=st.lists(st.tuples(st.integers(0, 10**6), KEYS, VALUES), max_size=1),
)
def test_any_value_at_any_key_loads_or_names_the_key(changes, extra):
    raw = copy.deepcopy(BASE)
    for path, value in changes:
        set_path(raw, path, value)
    for where, key, value in extra:
        targets = mappings(raw)
        targets[where % len(targets)][key] = value
    check_outcome(lambda: stagegan.load(raw))


TASK_PATHS = [path for path in KEY_PATHS if path.split(".")[0] in ("data", "model", "loss")]


@FUZZ
@given(
    task=st.sampled_from([task.name for task in TASKS]),
    changes=st.lists(
        st.sampled_from(TASK_PATHS).flatmap(lambda p: st.tuples(st.just(p), value_for(p))),
        min_size=1,
        max_size=2,
    ),
)
def test_any_task_option_makes_the_task_or_names_the_key(task, changes):
    """The task's own checks of `data`, `model` and `loss` and the memory check of what
    they would allocate (run when the trainer is built, before any network), on configs
    that `stagegan.load` accepted."""
    raw = {**copy.deepcopy(BASE), "task": task, "augment": None}
    for path, value in changes:
        set_path(raw, path, value)
    try:
        config = stagegan.load(raw)
        options = {"data": config.data, "model": config.model, "loss": config.loss}
        task = make_task(config.task, options, RNGS)
        # Hardening round 4: the memory check of what the options would allocate.
        task.check_memory(config.batch_size, held_counts(config, task))
    except stagegan.ConfigError as e:
        assert_clean(e)


@FUZZ
@given(
    sets=st.lists(
        st.one_of(
            st.tuples(st.sampled_from(KEY_PATHS), YAML_TEXT).map("=".join),
            CHANGES.map(lambda kv: f"{kv[0]}={json.dumps(kv[1], default=repr)}"),
            st.text(max_size=30),
            st.from_regex(r"[a-z_]{1,8}(\[[-+0-9]{0,3}\])?(\.[a-z_0-9]{0,8}){0,3}=.{0,10}"),
        ),
        min_size=1,
        max_size=3,
    ),
    stages=st.sampled_from([BASE["stages"], "alternating", None, [], "missing_schedule"]),
)
def test_any_set_string_loads_or_names_the_key(sets, stages):
    raw = copy.deepcopy(BASE)
    if stages is None:
        del raw["stages"]
    else:
        raw["stages"] = copy.deepcopy(stages)
    check_outcome(lambda: stagegan.load(raw, sets))


@FUZZ
@given(
    content=st.one_of(
        YAML_TEXT.map(str.encode), st.text(max_size=60).map(str.encode), st.binary(max_size=40)
    ),
    key=st.sampled_from([*TOP_LEVEL_DEFAULTS, *REQUIRED_TOP_LEVEL]),
)
def test_any_yaml_file_loads_or_names_the_file(tmp_path_factory, content, key):
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    # The bytes as the whole file, and as the value of one key of a valid file.
    for data in (content, yaml.safe_dump(BASE).encode() + f"\n{key}: ".encode() + content):
        path.write_bytes(data)
        check_outcome(lambda: stagegan.load(str(path)))


# Hardening round 5: the doors added since round 4, each fuzzed the same way: whatever comes
# in gives a value or a ConfigError with a key and one line, never anything else.
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["chief", "worker", "ps", "type", "index", "127.0.0.1:1", "a:0"]),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(st.sampled_from(["cluster", "task", "type", "index", "worker"]), st.text()),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=12,
)
NEAR_TF_CONFIG = st.builds(
    lambda cluster, task, extra: {"cluster": cluster, "task": task, **extra},
    st.dictionaries(
        st.sampled_from(["chief", "worker", "ps", "evaluator"]),
        st.lists(st.sampled_from(["127.0.0.1:1", "127.0.0.1:2", "h:0", "h:70000", "x"]), max_size=3)
        | JSON,
        max_size=3,
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["chief", "worker", "ps"]) | JSON, "index": JSON}
    ),
    st.dictionaries(st.sampled_from(["rpc_layer", "environment", "other"]), JSON, max_size=1),
)


@FUZZ
@given(spec=st.one_of(NEAR_TF_CONFIG, JSON), text=st.text(max_size=30))
def test_any_tf_config_gives_a_task_or_names_tf_config(spec, text):
    from stagegan.config.cluster import parse_tf_config

    for raw in (json.dumps(spec), text):
        try:
            cluster, task_type, index = parse_tf_config(raw)
        except stagegan.ConfigError as e:
            assert_clean(e)
            assert e.key == "TF_CONFIG"
        else:
            assert 0 <= index < len(cluster[task_type]) and type(index) is int


NUMBERS = st.one_of(
    st.integers(-(10**500), 10**500),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "9" * 400, "0x10", " 3 ", "1_000", "٣"]),
    JSON,
)


@FUZZ
@given(value=NUMBERS)
def test_any_number_given_anywhere_is_a_finite_number_or_names_its_key(value):
    """Flags, config values, environment variables and API arguments: one checked way in."""
    from stagegan.cli.main import parse_duration
    from stagegan.config.numbers import as_integer, as_number, parse_number
    from stagegan.run.reading import check_walk

    attempts = [
        lambda: as_number(value, "k", minimum=0),
        lambda: as_integer(value, "k", minimum=1),
        lambda: parse_number(value, "k"),
        lambda: parse_number(value, "k", integer=True, minimum=0),
        lambda: parse_duration(f"{value}s"),
        lambda: check_walk(10, value, None),
        lambda: check_walk(10, None, value),
    ]
    for attempt in attempts:
        try:
            result = attempt()
        except stagegan.ConfigError as e:
            assert_clean(e)
        else:
            assert result is None or (isinstance(result, (int, float)) and abs(result) < 2e308)
