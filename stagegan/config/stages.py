"""Stages as data: `Stage`, `Update`, `Until` (a metric threshold or a plateau) and the
augmentation record, parsed and checked from a config's `stages` list."""

import dataclasses
from dataclasses import dataclass

from stagegan.config.fields import (
    as_given,
    boolean,
    checked_fields,
    choice,
    defaults,
    integer,
    number,
    number_at_least,
    option,
    optional,
    patterns,
    read_record,
    record_keys,
    required,
    string,
)
from stagegan.config.optimizer_specs import (
    DEFAULT_OPTIMIZER,
    OPTIMIZER_TYPES,
    _parse_optimizer,
)
from stagegan.config.overrides import (
    check_keys,
    check_mapping,
    format_key_path,
)
from stagegan.errors import ConfigError

MODES = ("sequential", "simultaneous")


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


def loss_weights(value, key):
    """`(term, weight)` pairs from a term's name (weight 1) or a mapping of terms to weights."""
    loss = check_mapping({value: 1.0} if isinstance(value, str) else value, key)
    if not loss:
        raise ConfigError(key, "must name at least one loss term")
    for term in loss:
        if not isinstance(term, str) or not term:
            raise ConfigError(key, f"loss term names must be strings. Received: {term!r}")
    return tuple((term, number(w, format_key_path((key, term)))) for term, w in loss.items())


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
    optimizer: object = option(None, as_given)  # resolved by `settle`
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
    p = number(value, key)
    if not 0 <= p <= 1:
        raise ConfigError(key, f"must be between 0 and 1. Received: {p:g}")
    return p


def r_t(value, key):
    target = number(value, key)
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


def _parse_augment(value, key):
    """An `augment:` mapping -> `AugmentConfig` (its fields declared there); None -> None."""
    if value is None:
        return None
    return read_record(AugmentConfig, value, key, key=key)


def _parse_stages(value, named, augment=None):
    """The run's stages (`Stage`, each settled), the optimizers their updates made, and
    the named optimizers more than one update shares."""
    if not isinstance(value, list) or not value:
        raise ConfigError("stages", f"must be a non-empty list of stages. Received: {value!r}")
    stages, optimizers, shared, names = [], {}, set(), set()
    for i, stage_raw in enumerate(value):
        key = f"stages[{i}]"
        stage = read_record(Stage, stage_raw, key, key=key)
        if stage.name in names:
            raise ConfigError(f"{key}.name", f"stage name {stage.name!r} is used twice")
        names.add(stage.name)
        stages.append(stage.settle(named, optimizers, shared, augment))
    return tuple(stages), optimizers, shared


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
    update = read_record(Update, value, key, key=key)
    return update.settle(mode, named, optimizers, shared)
