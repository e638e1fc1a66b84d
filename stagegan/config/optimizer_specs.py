"""Optimizer specs: `OptimizerSpec` and the learning-rate schedules a config names, parsed
and checked (`stagegan.core.optimizers` builds the Keras optimizers from them), and the
lazy-regularisation scaling of an update's optimizer."""

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from stagegan.config.fields import (
    boolean,
    checked_fields,
    decay,
    integer,
    number,
    option,
    positive_number,
    record_keys,
    required,
)
from stagegan.config.overrides import (
    check_keys,
    check_mapping,
    format_key_path,
)
from stagegan.errors import ConfigError

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
            number(value, f"{key}.learning_rate", positive=True)
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
            options[beta] = decay(options.get(beta, defaults[beta]), f"{key}.{beta}") ** c
    return dataclasses.replace(spec, options=tuple(sorted(options.items())), lazy=every)
