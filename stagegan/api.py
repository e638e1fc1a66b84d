"""The Python API: what `python -m stagegan` does, for notebooks and scripts.

    import stagegan

    run = stagegan.train("mog_ring", overrides={"stages[0].steps": 500}, run_dir="runs/ring")
    run.metrics()[-1]                     # the last logged record
    points = run.sample(1000, seed=1)     # the task's export: images in [0, 1], or points
    run.evaluate()["metrics"]             # as `stagegan eval --json`
    run = run.resume(overrides={"stages[0].steps": 800})   # extend it

    run = stagegan.load_run("runs/ring")  # a finished (or stopped) run folder
    print(run.plan())

A config is a preset name, a YAML path, a dict (a whole config, as a YAML file holds it) or a
`RunConfig`. `overrides` are `--set` strings, or a dict `{key path: value}` whose values are
Python objects: a task's network builder may be a callable there (or in the dict config),
`model.generator: build_generator`, called as `builder(task) -> keras.Model`. A run's
`config.yaml` records it as `module:function`, which a later process imports.

Every error that names a config key raises `stagegan.Error` (`.key`, `.message`); the CLI
prints the same as its one line. A run stopped by the NaN guard or a signal raises
`stagegan.RunStopped` (a `stagegan.Error` too, `.status` is the CLI's exit status).

The API runs in the calling process, as `train` does, and on the devices and backend that the
config names. `import stagegan` does not import TensorFlow; these functions do, when called.
"""

import contextlib
import functools
import json
import logging
import os
import sys
from pathlib import Path

from stagegan.config.objects import find_user_modules, register_objects
from stagegan.config.overrides import check_nesting
from stagegan.config.schema import RunConfig, apply_overrides, check_seed, load_config, parse_config
from stagegan.errors import ConfigError, StageganError, out_of_memory
from stagegan.run.reading import check_walk, checkpoint_entries, run_config
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.logs import read_metrics

log = logging.getLogger("stagegan")


# The library names the CLI's flags in its errors; the API's callers know its arguments.
API_KEYS = {
    "--run": "run",
    "--resume": "run",
    "--checkpoint": "checkpoint",
    "--num": "n",
    "--count": "count",
    "--features": "features",
    "--class": "class_name",
    "--batch-size": "batch_size",
    "--seed": "seed",
    "--run-dir": "run_dir",
    "--init-from": "init_from",
    "--init-checkpoint": "init_checkpoint",
    "--init-only": "init_only",
    "--config": "config",
    "--set": "overrides",
    "--truncation": "truncation",
    "--interpolate": "interpolate",
    "--output": "output",
    "--format": "format",
    "--memorisation": "memorise",
    "--nearest": "nearest",
    "--no-ema": "ema",
    "--arm": "arms",
    "--seeds": "seeds",
    "--steps": "steps",
    "--budget": "budget",
    "--eval-seed": "eval_seed",
    "--metrics": "metrics",
}


def _api_errors(function):
    """The API's errors: a `stagegan.Error` naming the API's argument where the library
    named a CLI flag, and running out of memory as a `stagegan.Error` too."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except StageganError as e:
            if e.key not in API_KEYS or not isinstance(e, ConfigError):
                raise
            raise type(e)(API_KEYS[e.key], e.message) from None
        except Exception as e:  # noqa: BLE001 - MemoryError, TensorFlow's ResourceExhausted
            error = out_of_memory(e)
            if error is None:
                raise
            raise error from None

    return wrapped


@_api_errors
def train(
    config=None,
    overrides=(),
    run_dir=None,
    init_from=None,
    init_checkpoint=None,
    init_only=None,
    quiet=False,
):
    """Train a new run to its end; returns its `Run`.

    Args:
        config (str | os.PathLike | dict | RunConfig | None): a preset name, a YAML path, a
            dict, a `RunConfig`, or None (the default).
        overrides (Sequence[str] | dict): `key.path=value` strings, or `{key path: value}`.
        run_dir (str | os.PathLike | None): the new run folder (None: the next
            `runs/<name>-N`).
        init_from (str | os.PathLike | None): a warm start from this run folder's newest
            checkpoint (`train --init-from`); None: a cold start.
        init_checkpoint (int | None): with `init_from`: its checkpoint at this global step
            instead (`--init-checkpoint`).
        init_only (str | Sequence[str] | None): with `init_from`: copy only the variables
            matching this glob pattern, or these (`--init-only`).
        quiet (bool): no log lines (else they go to stdout, as the CLI prints them).

    Raises:
        stagegan.Error: bad input, an argument of the wrong type included (nothing is
            written), or a file that cannot be written.
        stagegan.RunStopped: the NaN guard or a signal stopped the run.
    """
    from stagegan.run.trainplan import TrainPlan

    _check_type(run_dir, (str, os.PathLike, type(None)), "run_dir", "a folder path or None")
    _check_type(quiet, bool, "quiet", "True or False")
    init = _init(init_from, init_checkpoint, init_only)
    extra = [("init", init)] if init is not None else []
    plan = TrainPlan.new(load(config, [*_overrides(overrides), *extra]), run_dir, chief=True)
    from stagegan.run import runner  # TensorFlow: imported on first use

    with _logging(quiet):
        return Run(runner.run(plan), quiet=quiet)


def _init(init_from, checkpoint, only):
    """The `init:` section of a warm start from the API's arguments (None: a cold start)."""
    _check_type(init_from, (str, os.PathLike, type(None)), "init_from", "a run folder or None")
    _check_type(checkpoint, (int, type(None)), "init_checkpoint", "a global step or None")
    only = [only] if isinstance(only, str) else only
    if only is not None and (
        not isinstance(only, (list, tuple)) or not all(isinstance(p, str) for p in only)
    ):
        raise ConfigError(
            "init_only", f"must be a pattern or a list of patterns. Received: {only!r}"
        )
    if init_from is None:
        for key, value in (("init_checkpoint", checkpoint), ("init_only", only)):
            if value is not None:
                raise ConfigError(key, "only with init_from (the run to start from)")
        return None
    only = None if only is None else list(only)
    return {"run": os.fspath(init_from), "checkpoint": checkpoint, "only": only}


@_api_errors
def load_run(path):
    """An existing run folder as a `Run` (checked: a run's `config.yaml` must be there)."""
    return Run(path)


@_api_errors
def plan(config=None, overrides=()):
    """What `stagegan plan` prints: every stage, update, variable count, dropped gradient;
    with a warning line under a stage whose `until` can never be checked."""
    from stagegan.run import runner

    return runner.describe(load(config, overrides))


@_api_errors
def load(config=None, overrides=()):
    """A validated `RunConfig` from a preset name, a YAML path, a dict or a `RunConfig`,
    with `overrides` (`key.path=value` strings, or `{key path: value}`) applied.

    Raises:
        stagegan.ConfigError: bad input, or an argument of the wrong type (naming it).
    """
    overrides = _overrides(overrides)
    if isinstance(config, RunConfig):
        raw = config.raw
    elif isinstance(config, dict):
        check_nesting(config, "config")
        raw = register_objects(config)
    else:
        what = "a preset name, a YAML path, a dict, a RunConfig or None"
        _check_type(config, (str, os.PathLike, type(None)), "config", what)
        path = None if config is None else os.fspath(config)
        find_user_modules(path)  # its `module:function` names, as the CLI finds them
        return load_config(path, overrides, key="config")
    find_user_modules()
    return parse_config(apply_overrides(raw, overrides))


@_api_errors
def compare(
    arms,
    output,
    seeds=(0, 1, 2),
    steps=None,
    budget=None,
    count=None,
    features=None,
    eval_seed=None,
    memorise="auto",
    metrics=(),
    quiet=False,
):
    """Train each arm from each seed into the comparison folder `output`, evaluate every run
    alike, and tabulate them, as `stagegan compare` does (`stagegan.run.compare`); returns
    the table, as `output/table.json` holds it. Finished runs in `output` are reused.

    Args:
        arms (dict): `{name: config}` or `{name: (config, overrides)}`, the baseline first;
            a config is a preset name or a YAML path, `overrides` `key.path=value` strings or
            a dict `{key path: value}` of plain values.
        output (str | os.PathLike): the comparison folder (new, empty, or an earlier
            comparison's).
        seeds (Sequence[int]): the run seeds.
        steps (int | None): every arm trains this many steps (None: each config's own, or
            what `budget` fits).
        budget (float | None): every arm trains the steps that fit in this many seconds on
            this machine.
        count (int | None): every evaluation's sample count (`eval --count`).
        features (str | None): every evaluation's features (`eval --features`).
        eval_seed (int | None): every evaluation's seed (`eval --seed`; None: each run's).
        memorise (bool | str): True, False or "auto" (`eval --memorisation`).
        metrics (Sequence[str]): the table's metrics (empty: every declared score the
            evaluations give).
        quiet (bool): no log lines.

    Returns:
        (dict): the table, as `output/table.json` holds it.

    Raises:
        stagegan.Error: bad input (an arm is named `arms[NAME]`), before anything is written.
    """
    from stagegan.run import compare as comparing

    _check_type(arms, dict, "arms", "a dict {name: config or (config, overrides)}")
    _check_type(output, (str, os.PathLike), "output", "a folder path")
    _check_type(quiet, bool, "quiet", "True or False")
    chosen = []
    for name, value in arms.items():
        config, overrides = value if isinstance(value, tuple) else (value, ())
        what = "a preset name or a YAML path"
        _check_type(config, (str, os.PathLike), f"arms[{name}]", what)
        config = os.fspath(config)
        config = os.path.abspath(config) if os.path.isfile(config) else config
        if isinstance(overrides, dict):
            overrides = [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
        elif isinstance(overrides, str):
            overrides = [overrides]
        chosen.append(comparing.Arm(name, config, tuple(overrides)))
    options = comparing.EvalOptions(count, features, eval_seed, memorise)
    try:
        plan = comparing.check(chosen, output, seeds, steps, budget, options, tuple(metrics))
        with _logging(quiet):
            return comparing.run(comparing.prepare(plan))
    except ConfigError as e:
        if not e.key.startswith("--arm "):
            raise
        raise ConfigError(f"arms[{e.key.removeprefix('--arm ')}]", e.message) from None


class Run:
    """A run folder: its config, metrics, checkpoints, samples and evaluations.

    Args:
        path (str | os.PathLike): the run folder.
    """

    @_api_errors
    def __init__(self, path, quiet=False):
        _check_type(path, (str, os.PathLike), "path", "a run folder path")
        _check_type(quiet, bool, "quiet", "True or False")
        self.path = Path(path)
        self.quiet = quiet  # what `resume` does unless told
        run_config(self.path, "run")  # a readable run folder, or stagegan.Error

    def __repr__(self):
        return f"Run({str(self.path)!r})"

    @property
    def config(self):
        """The run's `RunConfig`, from its `config.yaml`."""
        return run_config(self.path, "run")

    def metrics(self):
        """The records of `metrics.jsonl`: one per logged step, and the evaluations."""
        path = self.path / RunFolder.METRICS
        return read_metrics(path) if path.exists() else []

    @_api_errors
    def checkpoints(self):
        """The global steps of its listed checkpoints, oldest first."""
        return [e["step"] for e in checkpoint_entries(self.path, "run")[1]]

    @_api_errors
    def sample(
        self,
        n=16,
        seed=0,
        checkpoint=None,
        ema=True,
        batch_size=None,
        class_name=None,
        truncation=None,
        interpolate=None,
    ):
        """`n` samples from inputs drawn with `seed`: what `stagegan sample --output X.npy`
        writes (images in [0, 1] as [n, H, W, C], or points), `batch_size` at a time; a
        class-conditional run's all of class `class_name` (a name or an index) if given;
        latents redrawn within [-`truncation`, `truncation`]; with `interpolate` K, a walk
        through K latents (`sample --truncation T --interpolate K`)."""
        from stagegan.run import runner

        if n is None:
            raise ConfigError("n", "how many samples: give a count")
        _at_least(n, 1, "n")
        check_seed(seed, "seed")
        _check_checkpoint(checkpoint)
        _check_type(ema, bool, "ema", "True or False")
        _at_least(batch_size, 1, "batch_size")
        what = "a class name, a class index or None"
        _check_type(class_name, (str, int, type(None)), "class_name", what)
        check_walk(n, truncation, interpolate)
        return runner.sample(
            self.path, n, checkpoint, seed=seed, ema=ema, batch_size=batch_size,
            class_name=class_name, truncation=truncation, interpolate=interpolate,
        )  # fmt: skip

    @_api_errors
    def evaluate(
        self,
        count=None,
        seed=None,
        checkpoint=None,
        features=None,
        ema=True,
        batch_size=None,
        memorise="auto",
        nearest=None,
    ):
        """What `stagegan eval --json` prints (and appends to the run's `eval.jsonl`);
        `memorise` (True, False or "auto") and `nearest` (a new PNG file) as `eval
        --memorisation` and `--nearest`."""
        from stagegan.run import runner
        from stagegan.run.reading import check_output

        _at_least(count, 4, "count")
        if seed is not None:
            check_seed(seed, "seed")
        _check_checkpoint(checkpoint)
        what = "a feature extractor name or 'package.module:function', or None"
        _check_type(features, (str, type(None)), "features", what)
        _check_type(ema, bool, "ema", "True or False")
        _at_least(batch_size, 1, "batch_size")
        if memorise not in (True, False, "auto"):
            raise ConfigError("memorise", f"must be True, False or 'auto'. Received: {memorise!r}")
        if nearest is not None:
            _check_type(nearest, (str, os.PathLike), "nearest", "a PNG file path")
            if memorise is False:
                raise ConfigError("nearest", "shows what memorise=False turns off")
            check_output(nearest, "nearest", (".png",))
        options = {"memorise": memorise, "nearest": nearest}
        return runner.evaluate(
            self.path, count, seed, checkpoint, features, ema=ema, batch_size=batch_size, **options
        )

    @_api_errors
    def export(self, output, format="savedmodel", checkpoint=None, ema=True):  # noqa: A002
        """Write the generator to the new folder `output` for plain TensorFlow, Keras or
        TFLite (`stagegan export`, see `stagegan.run.export`); returns the exported file."""
        from stagegan.run.export import FORMATS, export_generator
        from stagegan.run.reading import restore_run
        from stagegan.runfolder.dirs import check_new_folder

        _check_type(output, (str, os.PathLike), "output", "a folder path")
        if format not in FORMATS:
            raise ConfigError(
                "format", f"must be one of {', '.join(FORMATS)}. Received: {format!r}"
            )
        _check_checkpoint(checkpoint)
        _check_type(ema, bool, "ema", "True or False")
        check_new_folder(output, "output", "export never overwrites (pick another folder)")
        trainer, _ = restore_run(self.path, checkpoint)
        return export_generator(trainer, output, format, ema, self.path)

    @_api_errors
    def plan(self):
        """The plan of the run's config (as `stagegan plan` prints it)."""
        from stagegan.run import runner

        return runner.describe(self.config, self.path)

    @_api_errors
    def resume(self, overrides=(), checkpoint=None, quiet=None):
        """Go on from its newest (or a given) checkpoint: `train --resume`. `overrides` may
        extend it (`stages[-1].steps`, `stages[+]`); returns this `Run`."""
        from stagegan.run.trainplan import TrainPlan

        overrides = _overrides(overrides)
        _check_checkpoint(checkpoint)
        _check_type(quiet, (bool, type(None)), "quiet", "True, False or None")
        with _logging(self.quiet if quiet is None else quiet):
            plan = TrainPlan.resumed(self.path, overrides, checkpoint)
            from stagegan.run import runner  # TensorFlow: imported on first use

            runner.run(plan)
        return self


def _at_least(value, least, key):
    """None, or an integer of at least `least` (as the CLI checks its flags)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(key, f"must be an integer. Received: {value!r}")
    if value is not None and value < least:
        raise ConfigError(key, f"must be at least {least}. Received: {value}")


def _check_type(value, types, key, what):
    """Refuse an argument that is not one of `types` (a bool is no int), naming it."""
    types = types if isinstance(types, tuple) else (types,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        raise ConfigError(key, f"must be {what}. Received: {value!r}")
    return value


def _check_checkpoint(checkpoint):
    """None (the newest), a global step, or a checkpoint's path."""
    what = "a global step, a checkpoint path or None"
    _check_type(checkpoint, (int, str, os.PathLike, type(None)), "checkpoint", what)
    _at_least(checkpoint if isinstance(checkpoint, int) else None, 0, "checkpoint")


def _overrides(overrides):
    """`key=value` strings stay; a dict, or `(key, value)` pairs, become `(key, value)` pairs
    (callables registered); anything else is a ConfigError naming `overrides`."""
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, dict):
        overrides = list(overrides.items())
    elif not isinstance(overrides, (list, tuple)):
        raise ConfigError(
            "overrides",
            "must be a dict {key path: value}, a 'key.path=value' string or a list of them. "
            f"Received: {overrides!r}",
        )
    result = []
    for item in overrides:
        if isinstance(item, str):
            result.append(item)
            continue
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise ConfigError(
                "overrides",
                "each must be a 'key.path=value' string, or a key path (a string) with its "
                f"value. Received: {item!r}",
            )
        key, value = item
        check_nesting(value, key)
        result.append((key, register_objects(value)))
    return result


@contextlib.contextmanager
def _logging(quiet):
    """stagegan's log lines on stdout (as the CLI prints them), unless `quiet` or the caller
    configured the `stagegan` logger already."""
    if log.handlers or quiet:
        level = log.level
        if quiet:
            log.setLevel(logging.WARNING)
        try:
            yield
        finally:
            log.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False  # once, not again through a notebook's root handler
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
