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

from stagegan.config.fields import (  # noqa: F401 - re-exported
    MAX_SEED,
    as_given,
    boolean,
    build_section,
    check_seed,
    checked_fields,
    choice,
    decay,
    defaults,
    integer,
    number,
    number_at_least,
    option,
    optional,
    patterns,
    positive_number,
    read_record,
    record_keys,
    required,
    string,
)
from stagegan.config.numbers import as_integer
from stagegan.config.optimizer_specs import (  # noqa: F401 - re-exported
    DEFAULT_OPTIMIZER,
    LAZY_DEFAULTS,
    OPTIMIZER_TYPES,
    SCHEDULE_KEYS,
    SCHEDULES,
    CosineSchedule,
    ExponentialSchedule,
    LearningRateSchedule,
    LinearSchedule,
    OptimizerSpec,
    _lazy_optimizers,
    _lazy_spec,
    _parse_optimizer,
    _parse_schedule,
)
from stagegan.config.overrides import (
    check_finite,
    check_keys,
    check_mapping,
    format_key_path,
    override,
    read_stage_file,
)
from stagegan.config.resources import builtin_names, find_yaml
from stagegan.config.stages import (  # noqa: F401 - re-exported
    AUGMENT_DEFAULTS,
    AUGMENT_OPS,
    BEFORE_START,
    INHERIT,
    METRIC_MODES,
    MODES,
    STAGE_KEYS,
    UNTIL_CHECK_EVERY,
    UNTIL_KEYS,
    UNTIL_KINDS,
    UPDATE_KEYS,
    WHILE_RUNNING,
    AugmentConfig,
    Plateau,
    Stage,
    Threshold,
    Until,
    Update,
    _parse_augment,
    _parse_stages,
    augment_ops,
    batch_key,
    batch_sizes,
    loss_weights,
    parse_until,
    parse_update,
    probability,
    r_t,
    stage_resume_rule,
    update_list,
)
from stagegan.config.yamlfile import read_yaml, yaml_dump
from stagegan.errors import ConfigError

GUARD_POLICIES = ("skip", "stop", "off")
REQUIRED_TOP_LEVEL = ("task", "batch_size", "stages")


# Records ------------------------------------------------------------------------------------


# The schema --------------------------------------------------------------------------------
# A section's record is its schema: each field carries its default, its check and whether
# `--set` may change it on resume (`option`). `build_section` walks the fields; the defaults
# (`defaults`) and resume's rules (`resumable_keys`) are read from the same fields. A new key
# of such a section is one `option` line.


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


def _parse_keep_best(value, key):
    """`checkpoint.keep_best: {metric, mode}` (or just the metric's name); None: off."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"metric": value}
    return read_record(KeepBest, value, key)


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = option(1000, integer(0), resume=True)  # 0: at stage ends and the run's end
    keep: int = option(3, integer(1))
    keep_best: object = option(None, _parse_keep_best)  # a KeepBest, or None


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
    return tuple(string(name, f"{key}[{i}]") for i, name in enumerate(value))


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
    return string(value, key)


@dataclass(frozen=True)
class InitConfig:
    """A warm start (`train --init-from RUN`): the networks (and the EMA, when both runs keep
    one) start from the weights of checkpoint `checkpoint` (a global step; None: the newest)
    of run folder `run`, by variable path; `only` (glob patterns, None: every network
    variable) restricts which. Optimizers, the step and the random streams start fresh."""

    run: str = option(None, _init_run)
    checkpoint: object = option(None, optional(integer(0)))  # int, or None for the newest
    only: object = option(None, optional(patterns))  # tuple of patterns, or None


@dataclass(frozen=True)
class EmaConfig:
    """An exponential moving average of one network's weights, used for sampling.

    From global step `start` on, after every step: ema = decay * ema + (1 - decay) * weights.
    Before `start` the average simply follows the weights.
    """

    decay: float = option(0.999, decay)
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

    name = string(resolved["name"], "name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("name", f"must be letters, digits, '-', '_' or '.'. Received: {name!r}")
    devices = build_section(DevicesConfig, resolved["devices"], "devices")
    # That it divides across the replicas is checked with the devices (`placement`).
    batch_size = as_integer(resolved["batch_size"], "batch_size", minimum=1)
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
    task = string(resolved["task"], "task")
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
        deterministic=boolean(resolved["deterministic"], "deterministic"),
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
