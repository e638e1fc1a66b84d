"""Run configs: YAML in, typed frozen records out, validated in one pass.

Nothing here imports TensorFlow, so a broken file is reported in well under a second. What can
only be checked once the networks exist (variable patterns, loss-term names, optimizer options,
`devices.towers: auto`) is checked by `stagegan.training.trainer.Trainer` before the first
step runs.

A run config (every key but `task`, `batch_size` and `stages` has a default):

    name: mog-ring
    seed: 0
    deterministic: false
    task: mog2d                  # built-in task name, or "package.module:factory"
    data: {layout: ring}         # task options, checked by the task
    model: {}
    loss: {}
    batch_size: 256              # the global batch, split evenly across towers
    devices: {towers: auto, variables: auto}   # auto: CPU, one GPU, or mirrored over several
    optimizers: {g: {type: adam, learning_rate: 1.0e-4}}
    stages: alternating          # a file in stages/, a path, or an inline list
    checkpoint: {every: 1000, keep: 3}
    log: {every: 100, tensorboard: true, histograms: 0, progress: auto}
    samples: {every: 500, count: null, seed: null, ema: true}   # null: no sample dumps
    ema: null                    # {decay: 0.999, start: 0, network: generator}
    eval: null                   # {every: 0, count: null, features: null}: eval in train
    guard: {policy: skip, max_consecutive: 20}   # NaN/Inf guard: skip, stop or off
    augment: null                # {ops: [color, translation, cutout], p: 1.0, target: null}
"""

import copy
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import ClassVar

from stagegan.config.numbers import as_integer, as_number
from stagegan.config.overrides import (
    check_finite,
    check_keys,
    check_mapping,
    format_key_path,
    override,
    read_stage_file,
)
from stagegan.config.resources import builtin_names, find_yaml
from stagegan.config.yamlfile import read_yaml, yaml_dump
from stagegan.errors import ConfigError

MODES = ("sequential", "simultaneous")
# `type:` of an optimizer spec -> its Keras class in `keras.optimizers`.
OPTIMIZER_TYPES = {
    "sgd": "SGD",
    "adam": "Adam",
    "adamw": "AdamW",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "lion": "Lion",
}
# The optimizer an update gets when it names none: private to that update (DCGAN's settings).
DEFAULT_OPTIMIZER = {"type": "adam", "learning_rate": 2.0e-4, "beta_1": 0.5}
MAX_SEED = 2**32 - 1  # seeds: 0..MAX_SEED (`check_seed`)

GUARD_POLICIES = ("skip", "stop", "off")
REQUIRED_TOP_LEVEL = ("task", "batch_size", "stages")
# Augmentation ops (`stagegan.core.augment`) -> the uniform numbers each draws per image, besides
# its gate.
AUGMENT_OPS = {
    "color": 3,
    "translation": 2,
    "cutout": 2,
    "xflip": 0,
    "rotate90": 1,
    "xint": 2,
    "brightness": 1,
    "contrast": 1,
    "saturation": 1,
    "scale": 1,
    "rotate": 1,
    "aniso": 1,
    "xfrac": 2,
    "hue": 1,
    "lumaflip": 1,
}
INHERIT = "inherit"  # a stage without `augment:` uses the run's
UNTIL_CHECK_EVERY = 100
METRIC_MODES = ("auto", "min", "max")  # auto: the direction the metric declares
# Keras 3's defaults of what `lazy: true` scales, per optimizer type (a test checks them).
LAZY_DEFAULTS = {
    "sgd": {"learning_rate": 0.01},
    "adam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999},
    "adamw": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999},
    "rmsprop": {"learning_rate": 0.001},
    "adagrad": {"learning_rate": 0.001},
    "adamax": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999},
    "nadam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999},
    "lion": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.99},
}


# Records ------------------------------------------------------------------------------------


# The schema --------------------------------------------------------------------------------
# A section's record is its schema: each field carries its default, its check and whether
# `--set` may change it on resume (`option`). `build_section` walks the fields; the defaults
# (`defaults`) and resume's rules (`resumable_keys`) are read from the same fields. A new key
# of such a section is one `option` line.


def option(default, check, resume=False, null=False):
    """A config field: `default`, `check(value, key) -> value` (raises `ConfigError(key)`),
    and whether a resumed run may change it (`resume`: True or False; a stage's fields name
    their rule, see `Stage`). `null`: an explicit None is a value of its own (a stage's
    `augment: null`), not "take the default"."""
    metadata = {"default": default, "check": check, "resume": resume, "null": null}
    return dataclasses.field(default=default, metadata=metadata)


def integer(minimum=None):
    return lambda value, key: _integer(value, key, minimum)


def number(value, key):
    return _number(value, key)


def number_at_least(minimum):
    def check(value, key):
        value = _number(value, key)
        if value < minimum:
            raise ConfigError(key, f"must be at least {minimum:g}. Received: {value:g}")
        return value

    return check


def required(check):
    """`check`, and a key that must be given (None: missing)."""

    def wrapped(value, key):
        if value is None:
            raise ConfigError(key, "required key is missing")
        return check(value, key)

    return wrapped


def positive_number(value, key):
    return _number(value, key, positive=True)


def optional(check):
    """`check`, or None passed through."""
    return lambda value, key: None if value is None else check(value, key)


def choice(names):
    def check(value, key):
        if value not in names:
            raise ConfigError(key, f"must be one of {', '.join(names)}. Received: {value!r}")
        return value

    return check


def boolean(value, key):
    return _boolean(value, key)


def string(value, key):
    return _string(value, key)


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


def build_section(record, value, key):
    """The record of section `key` from its YAML mapping `value`, whose defaults the caller
    has filled in (from `defaults(record)`, defaults first, as `config.yaml` keeps them):
    unknown keys refused, each field checked."""
    fields = dataclasses.fields(record)
    check_keys(check_mapping(value, key), tuple(f.name for f in fields), key)
    return record(**{f.name: f.metadata["check"](value[f.name], f"{key}.{f.name}") for f in fields})


@dataclass(frozen=True, kw_only=True)
class LearningRateSchedule:
    """A learning-rate schedule (`learning_rate: {schedule: ...}`), driven by the optimizer's
    own iteration count: the updates it has applied (see `stagegan.core.optimizers.schedule`).
    One record a kind (`SCHEDULES`, picked by `schedule:`); each key is a field declared
    once, in the kind it belongs to, with its default and check (`option`; `required`: no
    default), and `check` holds the checks across fields. A new key is one field.

    Attributes:
        initial: the rate after warm-up.
        warmup: iterations of linear warm-up from 0 to `initial` before the schedule starts.
    """

    kind: ClassVar[str] = "constant"
    initial: float = option(None, required(positive_number))
    warmup: int = option(0, integer(0))

    def check(self, key):
        """The checks across fields."""

    def describe(self):
        """`linear(0.0005 -> 0 over 2000 iterations, warm-up 100)`."""
        warmup = f", warm-up {self.warmup}" if self.warmup else ""
        return f"{self.kind}({self.words()}{warmup})"

    def words(self):
        return f"{self.initial:g}"


@dataclass(frozen=True, kw_only=True)
class LinearSchedule(LearningRateSchedule):
    """From `initial` down to `final` over `steps` iterations, in a straight line."""

    kind: ClassVar[str] = "linear"
    steps: int = option(None, required(integer(1)))
    final: float = option(0.0, number)

    def check(self, key):
        if not 0 <= self.final <= self.initial:
            raise ConfigError(
                f"{key}.final",
                f"must be between 0 and initial ({self.initial:g}). Received: {self.final:g}",
            )

    def words(self):
        return f"{self.initial:g} -> {self.final:g} over {self.steps} iterations"


@dataclass(frozen=True, kw_only=True)
class CosineSchedule(LinearSchedule):
    """From `initial` down to `final` over `steps` iterations, along half a cosine."""

    kind: ClassVar[str] = "cosine"


@dataclass(frozen=True, kw_only=True)
class ExponentialSchedule(LearningRateSchedule):
    """`initial` multiplied by `decay_rate` every `steps` iterations (smoothly, or in steps
    with `staircase`)."""

    kind: ClassVar[str] = "exponential"
    steps: int = option(None, required(integer(1)))
    decay_rate: float = option(None, required(positive_number))
    staircase: bool = option(False, boolean)

    def words(self):
        staircase = ", staircase" if self.staircase else ""
        return f"{self.initial:g} x {self.decay_rate:g} every {self.steps} iterations{staircase}"


SCHEDULES = {
    r.kind: r for r in (LearningRateSchedule, LinearSchedule, CosineSchedule, ExponentialSchedule)
}
# The keys of each kind: required, and optional with their defaults (derived from the fields).
SCHEDULE_KEYS = {
    name: (
        tuple(f.name for f in dataclasses.fields(r) if f.metadata["default"] is None),
        {f.name: f.default for f in dataclasses.fields(r) if f.metadata["default"] is not None},
    )
    for name, r in SCHEDULES.items()
}


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer: its Keras type and constructor options (learning_rate, beta_1, ...)."""

    type: str
    options: tuple  # sorted (name, value) pairs
    lazy: int = 0  # n of the `lazy: true` updates it serves: options already scaled for it

    def kwargs(self):
        return dict(self.options)


def patterns(value, key):
    """Glob patterns over variable paths: one, or a non-empty list."""
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise ConfigError(key, f"must be a pattern or a list of patterns. Received: {value!r}")
    return tuple(value)


def loss_weights(value, key):
    """`(term, weight)` pairs from a term's name (weight 1) or a mapping of terms to weights."""
    loss = check_mapping({value: 1.0} if isinstance(value, str) else value, key)
    if not loss:
        raise ConfigError(key, "must name at least one loss term")
    for term in loss:
        if not isinstance(term, str) or not term:
            raise ConfigError(key, f"loss term names must be strings. Received: {term!r}")
    return tuple((term, _number(w, format_key_path((key, term)))) for term, w in loss.items())


@dataclass(frozen=True, kw_only=True)
class Update:
    """One update of a stage: which variables it trains, on which loss, with which optimizer.

    Each key of an update is a field declared once with its default and its check (`option`);
    `parse_update` reads them and `settle` holds what spans fields and the run (the default
    name, `lazy`'s scaling, the stage's mode, the optimizer's resolution). A new key is one
    field.

    Attributes:
        train: glob patterns over Keras variable paths (`generator/*`).
        loss: (term, weight) pairs; the update minimises the weighted sum of the task's terms
            (for a lazy update, the config's weights times `every`).
        optimizer: key into `RunConfig.optimizers` (once settled; as written before).
        repeat: how many times it runs per stage step (sequential mode only).
        every: it runs only on stage steps divisible by `every`.
        lazy: StyleGAN2's lazy regularisation (`lazy: true`, see `_lazy_optimizers`).
        name: a label for logs, unique within the stage (default: the first pattern's scope).
        key: where it sits in the config, for error messages.
    """

    key: str
    train: tuple = option(None, required(patterns))
    loss: tuple = option(None, required(loss_weights))
    repeat: int = option(1, integer(1))
    every: int = option(1, integer(1))
    lazy: bool = option(False, boolean)
    optimizer: object = option(None, lambda value, key: value)  # resolved by `settle`
    name: object = option(None, optional(string))

    def settle(self, mode, named, optimizers, shared):
        """The update as the run trains it, in a stage of `mode`: its name, its loss weights
        (`lazy: true` multiplies them by `every`, StyleGAN2's gain), its optimizer's key (a
        name in `named`, shared, or an inline spec, private: added to `optimizers`)."""
        key, weights = self.key, self.loss
        if self.lazy:
            if self.every < 2:
                raise ConfigError(
                    f"{key}.lazy",
                    "needs every: n > 1 (a lazy regulariser runs every n steps, its loss x n). "
                    f"Received: every {self.every}",
                )
            weights = tuple((term, weight * self.every) for term, weight in weights)
        if mode == "simultaneous" and self.repeat != 1:
            raise ConfigError(
                f"{key}.repeat", "must be 1 in a simultaneous stage (one forward pass per step)"
            )
        spec = self.optimizer
        if isinstance(spec, str) and spec in named:
            optimizer = spec  # named: state shared with every update that names it
            optimizers[spec] = named[spec]
            shared.add(spec)
        elif isinstance(spec, str) and spec.lower() not in OPTIMIZER_TYPES:
            known = ", ".join(sorted(named)) or "none"
            raise ConfigError(
                f"{key}.optimizer", f"unknown optimizer {spec!r} (named optimizers: {known})"
            )
        else:
            optimizer = key  # inline or omitted: private to this update
            optimizers[key] = _parse_optimizer(
                DEFAULT_OPTIMIZER if spec is None else spec, f"{key}.optimizer"
            )
        name = self.name or self.train[0].split("/", 1)[0].strip("*?[]") or "update"
        return dataclasses.replace(self, loss=weights, optimizer=optimizer, name=name)

    def is_active(self, stage_step):
        """Whether this update runs on the given (0-based) step within its stage."""
        return stage_step % self.every == 0


UPDATE_KEYS = record_keys(Update)


@dataclass(frozen=True, kw_only=True)
class Until:
    """A stage's end condition (`until:`), checked after every `check_every` steps of the
    stage once `min_steps` are done; the stage's `steps` stay its upper bound. A `Threshold`
    or a `Plateau`.

    Each key of `until:` is a field declared once, here or in the subclass whose kind it
    belongs to, with its default and its check (`option`); `parse_until` reads them, and
    `check` holds the checks across fields. A new key is one field.
    """

    key: str  # the config key of this `until` (not a key of it)
    check_every: int = option(UNTIL_CHECK_EVERY, integer(1))
    min_steps: int = option(0, integer(0))
    # best: the stage's end rolls back to the best checkpoint
    restore: object = option(None, optional(choice(("best",))))

    def check(self, steps):
        """The checks across fields, for a stage of at most `steps` steps."""
        if self.min_steps >= steps:
            raise ConfigError(
                f"{self.key}.min_steps",
                f"must be below the stage's steps ({steps}). Received: {self.min_steps}",
            )

    def condition(self):
        raise NotImplementedError

    def describe(self):
        """`d/d_fake_accuracy (mean since the last check) > 0.9, checked every 100 steps`."""
        after = f" from stage step {self.min_steps}" if self.min_steps else ""
        restore = "; at its end, restore the best checkpoint" if self.restore else ""
        return f"{self.condition()}, checked every {self.check_every} steps{after}{restore}"


@dataclass(frozen=True, kw_only=True)
class Threshold(Until):
    """`until: {metric: ..., above|below: ...}`: the mean of a logged step metric
    (`<update>/<term>`, `/loss`, `/grad_norm`) over the steps since the last check is above
    (`sign` ">") or below ("<") `value`."""

    metric: str = option(None, string)
    above: object = option(None, optional(number))
    below: object = option(None, optional(number))

    def check(self, steps):
        super().check(steps)
        if (self.above is None) == (self.below is None):
            raise ConfigError(self.key, "a metric threshold needs exactly one of above or below")

    @property
    def sign(self):
        return ">" if self.above is not None else "<"

    @property
    def value(self):
        return self.above if self.above is not None else self.below

    def condition(self):
        return f"{self.metric} (mean since the last check) {self.sign} {self.value:g}"

    def holds(self, mean):
        return mean > self.value if self.sign == ">" else mean < self.value


@dataclass(frozen=True, kw_only=True)
class Plateau(Until):
    """`until: {eval: ...}`: an evaluation metric has not improved by more than `min_delta`
    for `patience` checks in a row (`mode`: min or max, which way is better; auto until the
    run resolves it from the metric's declaration)."""

    eval: str = option(None, string)
    patience: int = option(3, integer(1))
    min_delta: float = option(0.0, number_at_least(0))
    mode: str = option("auto", choice(METRIC_MODES))

    def condition(self):
        better = {"min": "lower", "max": "higher"}.get(self.mode, "auto: as declared,")
        return (
            f"eval {self.eval} ({better} is better) has not improved by more than "
            f"{self.min_delta:g} for {self.patience} checks"
        )


# Every key an `until:` may hold: the fields of its kinds, in their order.
UNTIL_KEYS = record_keys(Threshold, Plateau)


def augment_ops(value, key):
    """`augment.ops`: one op or a list, each known, none twice."""
    ops = [value] if isinstance(value, str) else value
    if not isinstance(ops, list | tuple) or not ops:
        raise ConfigError(key, f"must be a non-empty list of ops. Received: {ops!r}")
    for op in ops:
        if not isinstance(op, str) or op not in AUGMENT_OPS:
            raise ConfigError(key, f"unknown op {op!r} (known: {', '.join(AUGMENT_OPS)})")
    if len(set(ops)) != len(ops):
        raise ConfigError(key, f"names an op twice. Received: {list(ops)!r}")
    return tuple(ops)


def probability(value, key):
    p = _number(value, key)
    if not 0 <= p <= 1:
        raise ConfigError(key, f"must be between 0 and 1. Received: {p:g}")
    return p


def r_t(value, key):
    target = _number(value, key)
    if not -1 < target < 1:
        raise ConfigError(key, f"must be between -1 and 1 (an r_t). Received: {target:g}")
    return target


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """An `augment:` section (see `stagegan.core.augment`): differentiable augmentation of every
    image a discriminator sees.

    Attributes:
        ops: op names, in the order they are applied.
        p: each op's probability per image; the starting value when adaptive.
        target: the r_t that an adaptive p aims at (ADA: 0.6), or None for a fixed p.
        speed: images over which an adaptive p can move by 1 (ADA: 500,000).
        interval: discriminator updates between adjustments of an adaptive p.
        key: where it was given (`augment`, `stages[1].augment`); one augmenter, with its own
            p, per key.
    """

    ops: tuple = option(("color", "translation", "cutout"), augment_ops)
    p: float = option(1.0, probability)
    target: object = option(None, optional(r_t))
    speed: int = option(100000, integer(1))
    interval: int = option(4, integer(1))
    key: str

    @property
    def adaptive(self):
        return self.target is not None

    def describe(self):
        """`color, translation, cutout; p 1`, or how an adaptive p moves."""
        if self.adaptive:
            how = (
                f"p adaptive from {self.p:g} towards r_t {self.target:g} (adjusted every "
                f"{self.interval} D updates by up to batch x {self.interval} / {self.speed})"
            )
        else:
            how = f"p {self.p:g}"
        return f"{', '.join(self.ops)}; {how}"


AUGMENT_DEFAULTS = defaults(AugmentConfig)


def update_list(value, key):
    """A stage's updates, before each is read (`Stage.settle`): a non-empty list."""
    if not isinstance(value, list) or not value:
        raise ConfigError(key, "must be a non-empty list of updates")
    return value


def as_given(value, key):
    """A value read later, across fields (`Stage.settle`)."""
    return value


# A stage's fields that `--set` may change on resume, and when (`Stage`, `run.resume`).
WHILE_RUNNING = "while_running"  # until a later stage begins, not below the steps run
BEFORE_START = "before_start"  # while the stage has not begun


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One stage: `steps` stage steps, each running `updates` in `mode`; with `until` (a
    `Threshold` or a `Plateau`, else None) it may end earlier. `augment`: the `AugmentConfig`
    its discriminator inputs go through (the run's unless the stage sets its own), or None.

    Each key of a stage is a field declared here, with its default, its check and its rule on
    resume (`WHILE_RUNNING`, `BEFORE_START`, else never); `settle` reads the fields that
    depend on others (the updates on the mode and the run's optimizers, `until` on the steps,
    `augment` on the run's, `fade_in` on the resolution). A new stage key is one field.
    """

    key: str  # the config key of this stage (`stages[i]`)
    name: str = option(None, required(string))
    steps: int = option(None, required(integer(1)), resume=WHILE_RUNNING)
    mode: str = option("sequential", choice(MODES))
    updates: tuple = option(None, required(update_list))
    until: object = option(None, as_given, resume=BEFORE_START)
    augment: object = option(INHERIT, as_given, null=True)
    resolution: object = option(None, optional(integer(4)))  # the side it trains at (progressive)
    fade_in: bool = option(False, boolean)  # a transition stage: the new blocks fade in
    # its global batch (None: the run's `batch_size`; `RunConfig.batch_of`)
    batch_size: object = option(None, optional(integer(1)), resume=BEFORE_START)

    def settle(self, named, optimizers, shared, augment):
        """The stage with its updates, `until` and `augment` read (`augment`: the run's),
        and the checks across fields."""
        key, updates, names = self.key, [], set()
        for j, update_raw in enumerate(self.updates):
            update = parse_update(
                update_raw, f"{key}.updates[{j}]", self.mode, named, optimizers, shared
            )
            if update.name in names:
                update = dataclasses.replace(update, name=f"{update.name}{j}")
            names.add(update.name)
            updates.append(update)
        until = None if self.until is None else parse_until(self.until, f"{key}.until", self.steps)
        own = self.augment
        stage_augment = augment if own == INHERIT else _parse_augment(own, f"{key}.augment")
        if self.fade_in and self.resolution is None:
            raise ConfigError(
                f"{key}.fade_in", "needs the stage's resolution (stages[i].resolution)"
            )
        return dataclasses.replace(self, updates=tuple(updates), until=until, augment=stage_augment)


STAGE_KEYS = record_keys(Stage)


def batch_key(stage):
    """The config key of a stage's global batch: its own `stages[i].batch_size`, else the
    run's `batch_size`."""
    return "batch_size" if stage.batch_size is None else f"{stage.key}.batch_size"


def batch_sizes(stages, batch_size):
    """`{config key: global batch}`: the run's `batch_size` (samples and evaluations use it
    too) and the stages' own (`stages[i].batch_size`), each to be checked under its key."""
    own = {batch_key(s): s.batch_size for s in stages if s.batch_size is not None}
    return {"batch_size": batch_size, **own}


def stage_resume_rule(name):
    """When `--set` may change a stage's key `name` on resume: `WHILE_RUNNING`,
    `BEFORE_START`, or None (never, but for what the run's other rules allow)."""
    fields = {f.name: f for f in dataclasses.fields(Stage) if f.metadata}
    return fields[name].metadata["resume"] or None if name in fields else None


def _towers(towers, key):
    if isinstance(towers, bool):
        raise ConfigError(key, f"must be an int, 'auto' or a list. Received: {towers!r}")
    if isinstance(towers, int):
        if towers < 1:
            raise ConfigError(key, f"must be at least 1. Received: {towers}")
        return towers
    if isinstance(towers, str):
        if towers != "auto":
            raise ConfigError(key, f"must be an int, 'auto' or a list. Received: {towers!r}")
        return towers
    if isinstance(towers, list):
        if not towers or not all(isinstance(d, str) and d for d in towers):
            raise ConfigError(
                key, f"must be a non-empty list of device names. Received: {towers!r}"
            )
        if len(set(towers)) != len(towers):
            raise ConfigError(key, f"lists a device twice: {towers!r}")
        return tuple(towers)
    raise ConfigError(key, f"must be an int, 'auto' or a list. Received: {towers!r}")


STRATEGIES = ("towers", "mirrored", "central_storage", "multi_worker", "parameter_server", "auto")


def _precision(precision, key):
    if not (isinstance(precision, bool) or precision in ("float16", "bfloat16")):
        raise ConfigError(
            key,
            "must be float16, bfloat16 or false (true: float16 on GPUs, bfloat16 on CPUs). "
            f"Received: {precision!r}",
        )
    return precision


@dataclass(frozen=True)
class DevicesConfig:
    """`devices:`. `auto`: the layout that suits the visible devices (`placement`)."""

    towers: object = option("auto", _towers, resume=True)  # int, "auto", or device names
    variables: str = option("auto", string, resume=True)  # a device name, or "auto"
    strategy: str = option("auto", choice(STRATEGIES), resume=True)
    jit: bool = option(False, boolean, resume=True)  # compile each replica's pass with XLA
    # False | "float16" | "bfloat16" | True (see `precision`)
    mixed_precision: object = option(False, _precision)


def _check_parameter_server(devices):
    """`parameter_server` decides where each step runs (one worker) and where the variables
    live (the parameter servers); XLA cannot read variables on another task."""
    if devices.strategy != "parameter_server":
        return
    for key, value in (("towers", devices.towers), ("variables", devices.variables)):
        if value != "auto" and not (key == "towers" and value == 1):  # one device a step
            raise ConfigError(
                f"devices.{key}",
                "not with devices.strategy: parameter_server (each step runs on one worker, "
                "the variables live on the parameter servers); leave it auto"
                + (" or 1" if key == "towers" else "")
                + f". Received: {value!r}",
            )
    if devices.jit:
        raise ConfigError(
            "devices.jit",
            "XLA cannot read variables that live on parameter servers; "
            "not with devices.strategy: parameter_server",
        )


def _keep_best(value, key):
    return _parse_keep_best(value)


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = option(1000, integer(0), resume=True)  # 0: at stage ends and the run's end
    keep: int = option(3, integer(1))
    keep_best: object = option(None, _keep_best)  # a KeepBest, or None


@dataclass(frozen=True)
class KeepBest:
    """`checkpoint.keep_best: {metric: fid, mode: min}`: the checkpoint of the best in-train
    evaluation (`eval:`, or an `until` plateau's) is tagged `best` and never rotated away.
    `mode`: min | max, which way is better (auto until the run resolves it from the metric's
    declaration)."""

    metric: str = option(None, required(string))
    mode: str = option("auto", choice(METRIC_MODES))

    def describe(self):
        better = {"min": "lowest", "max": "highest"}.get(self.mode, "best")
        return f"keep best: the checkpoint of the {better} eval {self.metric}, tagged best"


PROGRESS = ("auto", "bar", "lines")
CONSOLE = ("brief", "full")


@dataclass(frozen=True)
class LogConfig:
    """Console, `metrics.jsonl` and TensorBoard output.

    `every`: log (console, metrics, TensorBoard scalars) every this many steps and at stage
    ends. `histograms`: weight and gradient histograms every this many steps (0: at stage ends
    only). `progress`: `bar` (a live progress bar), `lines` (plain log lines) or `auto` (a bar
    when stdout is a terminal). `console`: `brief` (the stage, step, the losses the updates
    train on, speed and ETA) or `full` (every logged value, as `metrics.jsonl` has them).
    """

    every: int = option(100, integer(1), resume=True)
    tensorboard: bool = option(True, boolean)
    histograms: int = option(0, integer(0), resume=True)
    progress: str = option("auto", choice(PROGRESS))
    console: str = option("brief", choice(CONSOLE), resume=True)


@dataclass(frozen=True)
class SamplesConfig:
    """Sample dumps: every `every` steps (0: stage ends only) and at every stage end, `count`
    samples (None: the task's `sample_count`) from inputs fixed at the start of the run from
    `seed` (None: the run seed). `ema`: sample from the EMA weights when the run has an EMA."""

    every: int = option(500, integer(0), resume=True)
    count: int = option(None, optional(integer(1)))
    seed: int = option(None, optional(lambda value, key: check_seed(value, key)))
    ema: bool = option(True, boolean)


def _metric_names(value, key):
    """`eval.metrics`: metrics added to the task's own, each a name declared with
    `stagegan.register_metric` or `package.module:function` (checked when the run is built)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ConfigError(key, f"must be a list of metric names. Received: {value!r}")
    return tuple(_string(name, f"{key}[{i}]") for i, name in enumerate(value))


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation inside `train`: at every stage end, and every `every` steps when > 0.
    `count`: samples to evaluate (None: the task's default); `features`: a feature extractor
    `package.module:function` for FID/KID; `batch_size`: images per forward pass in
    evaluations and sample dumps (None: the run's `batch_size`; see `runfolder.samples.chunk_size`);
    `metrics`: metrics added to the task's own (`stagegan.evaluation.registry`). Evaluation
    reads the weights and writes only its own records: all of it may change on resume."""

    every: int = option(0, integer(0), resume=True)
    count: object = option(None, optional(integer(4)), resume=True)
    features: object = option(None, optional(string), resume=True)
    batch_size: object = option(None, optional(integer(1)), resume=True)
    metrics: object = option(None, _metric_names, resume=True)  # a tuple, or None: none


@dataclass(frozen=True)
class GuardConfig:
    """The NaN/Inf guard. Every update's loss terms and gradients are checked for finiteness
    inside the step, in every tower. `skip`: a non-finite update is not applied (and logged);
    after `max_consecutive` skips in a row of one update the run stops. `stop`: the run stops
    at the first one. `off`: no check (for measuring the guard's cost; checkpoints are still
    never written with non-finite weights)."""

    policy: str = option("skip", choice(GUARD_POLICIES))
    max_consecutive: int = option(20, integer(1))


def _init_run(value, key):
    if value is None:
        raise ConfigError(key, "required key is missing (the run folder to start from)")
    return _string(value, key)


def _patterns(only, key):
    if isinstance(only, str):
        only = [only]
    if not isinstance(only, list) or not only or not all(isinstance(p, str) and p for p in only):
        raise ConfigError(key, f"must be a pattern or a list of patterns. Received: {only!r}")
    return tuple(only)


@dataclass(frozen=True)
class InitConfig:
    """A warm start (`train --init-from RUN`): the networks (and the EMA, when both runs keep
    one) start from the weights of checkpoint `checkpoint` (a global step; None: the newest)
    of run folder `run`, by variable path; `only` (glob patterns, None: every network
    variable) restricts which. Optimizers, the step and the random streams start fresh."""

    run: str = option(None, _init_run)
    checkpoint: object = option(None, optional(integer(0)))  # int, or None for the newest
    only: object = option(None, optional(_patterns))  # tuple of patterns, or None


def _decay(value, key):
    decay = _number(value, key)
    if not 0 <= decay < 1:
        raise ConfigError(key, f"must be in [0, 1). Received: {decay}")
    return decay


@dataclass(frozen=True)
class EmaConfig:
    """An exponential moving average of one network's weights, used for sampling.

    From global step `start` on, after every step: ema = decay * ema + (1 - decay) * weights.
    Before `start` the average simply follows the weights.
    """

    decay: float = option(0.999, _decay)
    start: int = option(0, integer(0))
    network: str = option("generator", string)


@dataclass(frozen=True)
class RunConfig:
    """A whole validated run config.

    `optimizers` maps every optimizer key to its spec: the named ones from `optimizers:` that
    some update uses (`shared` holds those), plus one private entry per update that gave an
    inline spec or none (keyed by that update's config key).
    """

    name: str
    seed: int
    deterministic: bool
    task: str
    data: dict
    model: dict
    loss: dict
    batch_size: int
    devices: DevicesConfig
    optimizers: dict
    shared: frozenset
    stages: tuple
    checkpoint: CheckpointConfig
    log: LogConfig
    samples: object  # SamplesConfig, or None when disabled
    ema: object  # EmaConfig, or None when disabled
    eval: object  # EvalConfig, or None when disabled
    guard: GuardConfig
    init: object  # InitConfig, or None for a cold start
    augment: object  # AugmentConfig, or None: the run's augmentation (stages may differ)
    raw: dict  # the resolved config, stages inlined: what `config.yaml` in a run folder holds

    @property
    def total_steps(self):
        return sum(stage.steps for stage in self.stages)

    def batch_of(self, stage):
        """The global batch of `stage`: its own `batch_size`, else the run's."""
        return self.batch_size if stage.batch_size is None else stage.batch_size

    @property
    def batch_sizes(self):
        """`{config key: global batch}` (`batch_sizes`)."""
        return batch_sizes(self.stages, self.batch_size)

    @property
    def batch_unit(self):
        """The greatest common divisor of the stages' global batches: a streamed source
        serves batches of it (`ImageSource.unit`)."""
        return math.gcd(*(self.batch_of(stage) for stage in self.stages))

    @property
    def largest_batch(self):
        """`(key, size)` of the largest global batch a step draws (what the memory checks
        size): the run's `batch_size` or a stage's own, named by its key."""
        keyed = [(batch_key(stage), self.batch_of(stage)) for stage in self.stages]
        return max(keyed, key=lambda pair: pair[1])

    def used_terms(self, stages=None):
        """The loss terms the updates of `stages` (default: every stage) train on."""
        chosen = self.stages if stages is None else stages
        return {term for stage in chosen for update in stage.updates for term, _ in update.loss}

    def to_yaml(self):
        return yaml_dump(self.raw)


# Sections with a record (`build_section`), by key; `samples` may be null (no dumps), the
# optional ones are null unless given.
SECTION_RECORDS = {
    "devices": DevicesConfig,
    "checkpoint": CheckpointConfig,
    "log": LogConfig,
    "samples": SamplesConfig,
    "guard": GuardConfig,
}
OPTIONAL_RECORDS = {"ema": EmaConfig, "eval": EvalConfig, "init": InitConfig}
TOP_LEVEL_DEFAULTS = {
    "name": "run",
    "seed": 0,
    "deterministic": False,
    "data": {},
    "model": {},
    "loss": {},
    "devices": defaults(DevicesConfig),
    "optimizers": {},
    "checkpoint": defaults(CheckpointConfig),
    "log": defaults(LogConfig),
    "samples": defaults(SamplesConfig),
    "ema": None,
    "eval": None,
    "guard": defaults(GuardConfig),
    "init": None,
    "augment": None,
}
DEVICES_DEFAULTS = TOP_LEVEL_DEFAULTS["devices"]
EMA_DEFAULTS = defaults(EmaConfig)
INIT_DEFAULTS = defaults(InitConfig)
EVAL_DEFAULTS = defaults(EvalConfig)


def resumable_keys():
    """The key paths that `--set` may change on resume, by the records' field metadata."""
    records = {**SECTION_RECORDS, **OPTIONAL_RECORDS}
    return tuple(
        f"{key}.{f.name}"
        for key, record in records.items()
        for f in dataclasses.fields(record)
        if f.metadata["resume"]
    )


def apply_overrides(raw, overrides):
    """`raw` with `key.path=value` overrides applied (`stagegan.config.overrides.override`,
    an absent section starting from its defaults here)."""
    return override(raw, overrides, TOP_LEVEL_DEFAULTS)


def load_config(path=None, overrides=(), key="--config"):
    """Load, override and validate a run config: the one way from a file or a preset name to
    a `RunConfig` (the CLI's `--config`, the API's `config`).

    Args:
        path: a YAML file, a preset name from `configs/`, or None for `configs/default.yaml`.
        overrides: `key.path=value` strings (values parsed as YAML), applied in order.
        key: what named `path` (for errors).

    Returns:
        A `RunConfig`.

    Raises:
        ConfigError: naming the key or file at fault.
    """
    name = "default" if path is None else path
    found = find_yaml("configs", name)
    if found is None:
        raise ConfigError(
            key,
            f"no such file or preset: {name!r} (presets: {', '.join(builtin_names('configs'))})",
        )
    raw = read_yaml(found, key)
    raw = apply_overrides(raw, overrides)
    return parse_config(raw)


def parse_config(raw):
    """Validate a raw config mapping into a `RunConfig` (stage references resolved)."""
    raw = copy.deepcopy(raw)
    check_keys(raw, tuple(TOP_LEVEL_DEFAULTS) + REQUIRED_TOP_LEVEL, "")
    for key in REQUIRED_TOP_LEVEL:
        if key not in raw:
            raise ConfigError(key, "required key is missing")
    file_optimizers = {}
    if isinstance(raw["stages"], str):
        raw["stages"], file_optimizers = read_stage_file(raw["stages"])
    check_finite(raw)
    check_finite(file_optimizers, ("optimizers",))
    resolved = {}
    for key, default in TOP_LEVEL_DEFAULTS.items():
        value = raw.get(key, copy.deepcopy(default))
        if key in SECTION_RECORDS:
            if key == "samples" and value is None:
                resolved[key] = None
                continue
            value = {**default, **check_mapping(value, key)}
        resolved[key] = value
    resolved.update({key: raw[key] for key in REQUIRED_TOP_LEVEL})
    resolved["optimizers"] = {
        **file_optimizers,
        **check_mapping(resolved["optimizers"], "optimizers"),
    }

    name = _string(resolved["name"], "name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("name", f"must be letters, digits, '-', '_' or '.'. Received: {name!r}")
    devices = build_section(DevicesConfig, resolved["devices"], "devices")
    # That it divides across the replicas is checked with the devices (`placement`).
    batch_size = _integer(resolved["batch_size"], "batch_size", minimum=1)
    named = {
        key: _parse_optimizer(spec, format_key_path(("optimizers", key)))
        for key, spec in resolved["optimizers"].items()
    }
    augment = _parse_augment(resolved["augment"], "augment")
    stages, optimizers, shared = _parse_stages(resolved["stages"], named, augment)
    optimizers = _lazy_optimizers(stages, optimizers, shared)
    checkpoint = build_section(CheckpointConfig, resolved["checkpoint"], "checkpoint")
    log = build_section(LogConfig, resolved["log"], "log")
    guard = resolved["guard"]
    if guard.get("policy") is False:  # YAML reads a bare `off` as false
        guard["policy"] = "off"
    guard = build_section(GuardConfig, guard, "guard")
    task = _string(resolved["task"], "task")
    # Keep only the named optimizers that are used, so the saved config stays honest.
    resolved["optimizers"] = {k: v for k, v in resolved["optimizers"].items() if k in shared}
    keep_best = checkpoint.keep_best
    _check_keep_best(keep_best, stages, resolved.get("eval"))
    if keep_best is not None and devices.strategy == "multi_worker":
        # Only the chief evaluates: the workers could not agree on the best or roll back alike.
        raise ConfigError(
            "checkpoint.keep_best",
            "is not available with devices.strategy: multi_worker (only the chief evaluates)",
        )
    _check_parameter_server(devices)
    return RunConfig(
        name=name,
        seed=check_seed(resolved["seed"], "seed"),
        deterministic=_boolean(resolved["deterministic"], "deterministic"),
        task=task,
        data=check_mapping(resolved["data"], "data"),
        model=check_mapping(resolved["model"], "model"),
        loss=check_mapping(resolved["loss"], "loss"),
        batch_size=batch_size,
        devices=devices,
        optimizers=optimizers,
        shared=frozenset(shared),
        stages=stages,
        checkpoint=checkpoint,
        log=log,
        samples=_parse_samples(resolved),
        ema=_optional_section(resolved, "ema"),
        eval=_optional_section(resolved, "eval"),
        init=_optional_section(resolved, "init"),
        augment=augment,
        guard=guard,
        raw=resolved,
    )


# Pieces -------------------------------------------------------------------------------------


def _optional_section(resolved, key):
    """An optional top-level section with a record (`OPTIONAL_RECORDS`): None (or false)
    disables it; otherwise its record, its defaults written back into `resolved`."""
    value = resolved[key]
    if value is None or value is False:
        resolved[key] = None
        return None
    resolved[key] = {**defaults(OPTIONAL_RECORDS[key]), **check_mapping(value, key)}
    return build_section(OPTIONAL_RECORDS[key], resolved[key], key)


def _parse_samples(resolved):
    """`samples:`, its seed the run's unless given; None: no sample dumps."""
    value = resolved["samples"]
    if value is None:
        return None
    samples = build_section(SamplesConfig, value, "samples")
    if samples.seed is None:
        samples = dataclasses.replace(samples, seed=check_seed(resolved["seed"], "seed"))
    return samples


def _parse_optimizer(spec, key):
    if isinstance(spec, str):
        spec = {"type": spec}
    spec = check_mapping(spec, key)
    kind = spec.get("type")
    if kind is None:
        raise ConfigError(f"{key}.type", "required key is missing")
    if not isinstance(kind, str) or kind.lower() not in OPTIMIZER_TYPES:
        raise ConfigError(
            f"{key}.type", f"unknown optimizer {kind!r} (known: {', '.join(OPTIMIZER_TYPES)})"
        )
    options = {k: v for k, v in spec.items() if k != "type"}
    for name, value in options.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(format_key_path((key, name)), "not a valid option name")
        if name == "learning_rate" and isinstance(value, dict):
            options[name] = _parse_schedule(value, f"{key}.learning_rate")
        elif isinstance(value, (dict, list)):
            raise ConfigError(f"{key}.{name}", f"must be a scalar. Received: {value!r}")
        elif name == "learning_rate":
            _number(value, f"{key}.learning_rate", positive=True)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}.{name}", f"must be a finite number. Received: {value}")
    return OptimizerSpec(type=kind.lower(), options=tuple(sorted(options.items())))


def _parse_schedule(value, key):
    """`{schedule: linear, initial: 5e-4, final: 0, steps: 2000, warmup: 100}`: the record
    its `schedule:` picks (`SCHEDULES`), every key checked by its field's declaration, then
    across fields."""
    kind = value.get("schedule")
    if not isinstance(kind, str) or kind not in SCHEDULES:
        where = f"{key}.schedule"
        if kind is None:
            known = ", ".join(SCHEDULES)
            raise ConfigError(where, f"required key is missing (one of: {known})")
        raise ConfigError(where, f"must be one of {', '.join(SCHEDULES)}. Received: {kind!r}")
    record = SCHEDULES[kind]
    fields = {k: v for k, v in value.items() if k != "schedule"}
    check_keys(value, ("schedule", *record_keys(record)), key)
    for name in SCHEDULE_KEYS[kind][0]:
        if fields.get(name) is None:
            raise ConfigError(f"{key}.{name}", f"required key is missing for schedule {kind!r}")
    parsed = record(**checked_fields(record, fields, key))
    parsed.check(key)
    return parsed


def _parse_augment(value, key):
    """An `augment:` mapping -> `AugmentConfig` (its fields declared there); None -> None."""
    if value is None:
        return None
    spec = check_mapping(value, key)
    check_keys(spec, record_keys(AugmentConfig), key)
    return AugmentConfig(key=key, **checked_fields(AugmentConfig, spec, key))


def _parse_stages(value, named, augment=None):
    """The run's stages (`Stage`, each settled), the optimizers their updates made, and
    the named optimizers more than one update shares."""
    if not isinstance(value, list) or not value:
        raise ConfigError("stages", f"must be a non-empty list of stages. Received: {value!r}")
    stages, optimizers, shared, names = [], {}, set(), set()
    for i, stage_raw in enumerate(value):
        key = f"stages[{i}]"
        check_keys(check_mapping(stage_raw, key), STAGE_KEYS, key)
        stage = Stage(key=key, **checked_fields(Stage, stage_raw, key))
        if stage.name in names:
            raise ConfigError(f"{key}.name", f"stage name {stage.name!r} is used twice")
        names.add(stage.name)
        stages.append(stage.settle(named, optimizers, shared, augment))
    return tuple(stages), optimizers, shared


def _parse_keep_best(value):
    """`checkpoint.keep_best: {metric, mode}` (or just the metric's name); None: off."""
    if value is None:
        return None
    key = "checkpoint.keep_best"
    if isinstance(value, str):
        value = {"metric": value}
    value = check_mapping(value, key)
    check_keys(value, record_keys(KeepBest), key)
    return KeepBest(**checked_fields(KeepBest, value, key))


def _check_keep_best(keep_best, stages, eval_section):
    """`keep_best` needs evaluations to rank (`eval:` or an `until` plateau); `restore: best`
    needs `keep_best`."""
    plateaus = [s.until for s in stages if isinstance(s.until, Plateau)]
    if keep_best is not None and eval_section is None and not plateaus:
        raise ConfigError(
            "checkpoint.keep_best",
            "needs evaluations in training to rank checkpoints: add eval: {every: N} (or an "
            "until with eval)",
        )
    for stage in stages:
        if stage.until is not None and stage.until.restore and keep_best is None:
            raise ConfigError(
                f"{stage.until.key}.restore",
                "best needs checkpoint.keep_best (which metric makes a checkpoint the best), "
                "e.g. checkpoint: {keep_best: {metric: fid}}",
            )


UNTIL_KINDS = {"metric": Threshold, "eval": Plateau}  # the key that picks each kind


def parse_until(value, key, steps):
    """A stage's `until:` as a `Threshold` or a `Plateau`, for a stage of `steps` steps: the
    kind its `metric` or `eval` picks, every key checked by its field's declaration, then
    across fields (`Until.check`)."""
    until = check_mapping(value, key)
    check_keys(until, UNTIL_KEYS, key)
    kinds = [name for name in UNTIL_KINDS if until.get(name) is not None]
    if len(kinds) != 1:
        raise ConfigError(
            key,
            "needs exactly one of metric (a threshold on a logged quantity) or eval (a plateau "
            f"of an evaluation metric). Received: {until!r}",
        )
    kind = UNTIL_KINDS[kinds[0]]
    names = record_keys(kind)
    for name in UNTIL_KEYS:
        if name not in names and until.get(name) is not None:
            raise ConfigError(f"{key}.{name}", f"does not apply to an until with {kinds[0]}")
    parsed = kind(key=key, **checked_fields(kind, until, key))
    parsed.check(steps)
    return parsed


def parse_update(value, key, mode, named, optimizers, shared):
    """A stage's update: every key checked by its field's declaration (`Update`), then
    settled for the stage's `mode` and the run's optimizers (`Update.settle`)."""
    update = check_mapping(value, key)
    check_keys(update, UPDATE_KEYS, key)
    return Update(key=key, **checked_fields(Update, update, key)).settle(
        mode, named, optimizers, shared
    )


def _lazy_optimizers(stages, optimizers, shared):
    """`optimizers` with the optimizer of every `lazy: true` update scaled as StyleGAN2 does
    (stylegan2-ada-pytorch `training_loop.py`, `mb_ratio`): its learning rate times
    c = n / (n + 1) and its betas raised to c, n the update's `every`.

    The optimizer is the one the lazy update shares with the main update of its network:
    over n stage steps it takes n + 1 steps (n main, 1 regulariser), and c makes them move
    the weights and decay the moments as n steps would. Every update using it runs at the
    scaled rate, as StyleGAN2's main phase does.

    Raises:
        ConfigError: on `lazy` when its optimizer is private, or is used by lazy updates
            only (nothing to share the steps with), or by lazy updates of different `every`.
    """
    users = {}
    for stage in stages:
        for update in stage.updates:
            users.setdefault(update.optimizer, []).append(update)
    scaled = dict(optimizers)
    for key, updates in users.items():
        lazy = [u for u in updates if u.lazy]
        if not lazy:
            continue
        first = lazy[0]
        if key not in shared or len(lazy) == len(updates):
            alone = "its optimizer is private"
            if key in shared:
                alone = f"optimizer {key!r} serves only lazy updates"
            raise ConfigError(
                f"{first.key}.lazy",
                "scales the optimizer the update shares with the main update of its network "
                f"(StyleGAN2: n + 1 optimizer steps per n batches), but {alone}; name an "
                "optimizer from optimizers: that a non-lazy update of the same variables "
                "uses too",
            )
        for other in lazy[1:]:
            if other.every != first.every:
                raise ConfigError(
                    f"{other.key}.lazy",
                    f"optimizer {key!r} is already scaled for {first.key} (every "
                    f"{first.every}); lazy updates sharing it need the same every. "
                    f"Received: every {other.every}",
                )
        scaled[key] = _lazy_spec(optimizers[key], first.every, format_key_path(("optimizers", key)))
    return scaled


def _lazy_spec(spec, every, key):
    """`spec` with its learning rate times c = every / (every + 1) and its betas (Keras's
    defaults where not given) raised to c; a schedule scales its `initial` and `final`."""
    c = every / (every + 1)
    options = dict(spec.options)
    defaults = LAZY_DEFAULTS[spec.type]
    rate = options.get("learning_rate", defaults["learning_rate"])
    if isinstance(rate, LearningRateSchedule):
        scaled = {"initial": rate.initial * c}
        if isinstance(rate, LinearSchedule):  # linear and cosine end at `final`
            scaled["final"] = rate.final * c
        options["learning_rate"] = dataclasses.replace(rate, **scaled)
    else:
        options["learning_rate"] = rate * c
    for beta in ("beta_1", "beta_2"):
        if beta in defaults:
            value = _number(options.get(beta, defaults[beta]), f"{key}.{beta}")
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{key}.{beta}", f"must be in [0, 1). Received: {value}")
            options[beta] = value**c
    return dataclasses.replace(spec, options=tuple(sorted(options.items())), lazy=every)


def _string(value, key):
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"must be a non-empty string. Received: {value!r}")
    return value


def _boolean(value, key):
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false. Received: {value!r}")
    return value


def check_seed(value, key):
    """A seed: an integer in 0..2**32 - 1 (Keras seeds NumPy, which takes no more); else a
    ConfigError naming `key` (a config key, or a flag such as `--seed`)."""
    value = _integer(value, key, minimum=0)
    if value > MAX_SEED:
        raise ConfigError(key, f"must be at most {MAX_SEED} (2**32 - 1). Received: {value}")
    return value


def _integer(value, key, minimum=None):
    return as_integer(value, key, minimum)


def _number(value, key, positive=False):
    return as_number(value, key, positive=positive)
