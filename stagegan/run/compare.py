"""`stagegan compare`: arms (a config with its `--set` flags each) trained from the same seeds,
each run evaluated alike, and one table: the mean and spread of every metric per arm, and the
seeds on which each arm beat the first one (the baseline), read through the direction each
metric declares (`stagegan.evaluation.registry`). As stylegan2-ada's `calc_metrics.py` makes
evaluation a pass over finished run folders, a comparison is runs plus one table, not a
script of its own each time.

    plan = check([Arm("dcgan", "dcgan_clusters"), Arm("resnet", "resnet_clusters")],
                 "runs/cmp", seeds=(0, 1, 2), budget=600)  # every refusal; nothing written
    plan = prepare(plan)   # TensorFlow: each arm's evaluation loaded, --budget's steps timed
    table = run(plan)      # train, evaluate, write the table and the picture

The comparison folder:

    comparison.json       what it compares: each arm's config, `--set` flags and stage lengths
    NAME-sS/              arm NAME's run from seed S (a run folder), with `compare.json`: the
                          evaluation the table reads (its options, checkpoint and numbers)
    table.md, table.json  the table (the JSON also holds every run's numbers)
    samples.png           each arm's samples side by side (its first seed's run)

A run is trained once: one that is finished (its newest checkpoint at its last step) is not
trained again, one stopped mid-way (a kill, a crash) is resumed from its newest checkpoint as
`train --resume` resumes it, and one stopped before its config was written is started again.
An evaluation with the same options of the same checkpoint is not made again. So a table grows
a seed at a time (`--seeds 0`, then `--seeds 0,1`), and an interrupted comparison goes on where
it stopped; a run enters the table only finished and evaluated.

This module imports no TensorFlow (`prepare` and `run` do, when called).
"""

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import statistics
from pathlib import Path

from stagegan.config.objects import find_user_modules, load_object
from stagegan.config.schema import check_seed, load_config
from stagegan.errors import ConfigError
from stagegan.evaluation import registry
from stagegan.runfolder.atomic import atomic_write
from stagegan.runfolder.dirs import LOCK, RunFolder
from stagegan.runfolder.logs import read_metrics

log = logging.getLogger("stagegan")

RECORD = "comparison.json"  # in the comparison folder
RESULT = "compare.json"  # in each run folder
TABLE_MD, TABLE_JSON, PICTURE = "table.md", "table.json", "samples.png"
PICTURE_SEED = 0  # the samples of every arm in the picture come from the same inputs
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")  # an arm's name starts its run folders'


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm of a comparison.

    Attributes:
        name: what the table calls it; its runs are the folders `NAME-sS`.
        config: a preset name, or a YAML file (kept as an absolute path).
        overrides: its `--set` strings (the ones for every arm first); never `seed`, which
            the comparison sets.
    """

    name: str
    config: str
    overrides: tuple = ()

    def record(self):
        return {"config": self.config, "overrides": list(self.overrides)}


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """What every evaluation of a comparison uses, as `eval`'s flags.

    Attributes:
        count: samples (None: the task's default).
        features: `--features` (None: the run's own `eval.features`, else the source's).
        seed: the inputs' seed (None: each run's own seed, as `eval`; so the arms of one seed
            are evaluated on the same inputs).
        memorise: True, False or "auto" (`eval --memorisation`).
    """

    count: object = None
    features: object = None
    seed: object = None
    memorise: object = "auto"

    def of(self, seed):
        """The options of the run of `seed`, as its `compare.json` records them."""
        return {
            "count": self.count,
            "features": self.features,
            "seed": seed if self.seed is None else self.seed,
            "memorise": self.memorise,
        }


@dataclasses.dataclass(frozen=True)
class ComparePlan:
    """A checked comparison (`check`); `prepare` fills in what needs TensorFlow.

    Attributes:
        output: the comparison folder (`pathlib.Path`).
        arms: the `Arm`s, the baseline first.
        seeds: the run seeds, in order.
        evaluation: the `EvalOptions`.
        metrics: the table's metrics (empty: every declared score the evaluations give).
        sizing: `{}` (each config's own steps), `{"steps": N}` or `{"budget": seconds}`.
        lengths: `{arm name: [each stage's steps]}` of the sized arms (`--steps`, and
            `--budget` once timed or recorded).
        recorded: the arms the folder's `comparison.json` already holds (`{name: record}`).
    """

    output: Path
    arms: tuple
    seeds: tuple
    evaluation: EvalOptions
    metrics: tuple
    sizing: dict
    lengths: dict
    recorded: dict

    def run_dir(self, arm, seed):
        return self.output / f"{arm.name}-s{seed}"

    def config(self, arm, seed):
        """The `RunConfig` of arm `arm`'s run from `seed`."""
        return arm_config(arm, seed, self.lengths.get(arm.name))


# Input -------------------------------------------------------------------------------------


def arms_from_flags(items):
    """The `Arm`s of the CLI's flags in their order: `items` is `[("arm", "NAME=CONFIG") |
    ("set", "KEY=VALUE"), ...]`; a `--set` before the first `--arm` is every arm's, one after
    an `--arm` that arm's.

    Raises:
        ConfigError: on `--arm`, an arm that is not NAME=CONFIG, or none at all.
    """
    common, arms = [], []
    for kind, text in items:
        if kind == "set":
            (arms[-1][2] if arms else common).append(text)
        else:
            name, config = parse_arm(text)
            arms.append((name, config, []))
    if not arms:
        raise ConfigError("--arm", "give at least one arm, --arm NAME=CONFIG (a preset or YAML)")
    return [Arm(name, config, tuple(common + own)) for name, config, own in arms]


def parse_arm(text, key="--arm"):
    """`(name, config)` of `NAME=CONFIG`; a config that is a file becomes its absolute path."""
    name, found, config = str(text).partition("=")
    if not found or not config:
        raise ConfigError(
            key, f"expected NAME=CONFIG (a preset or a YAML file). Received: {text!r}"
        )
    check_name(name, key)
    return name, os.path.abspath(config) if os.path.isfile(config) else config


def check_name(name, key="--arm"):
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(
            key,
            "an arm's name is letters, digits and . _ + - (it names its run folders). "
            f"Received: {name!r}",
        )
    return name


def parse_seeds(text, key="--seeds"):
    """The seeds of `0,1,2` (a list, in order: `3` is seed 3 alone)."""
    parts = [part.strip() for part in str(text).split(",")]
    if not all(re.fullmatch(r"\d+", part) for part in parts):
        raise ConfigError(
            key, f"expected seeds separated by commas, like 0,1,2. Received: {text!r}"
        )
    return tuple(int(part) for part in parts)


def parse_metrics(text):
    """The metric names of `fid,recall` (None or empty: the default columns)."""
    if not text:
        return ()
    return tuple(name.strip() for name in str(text).split(",") if name.strip())


def arm_config(arm, seed, lengths=None, key=None):
    """The `RunConfig` of `arm`'s run from `seed`: its config, its overrides, `seed`, and
    the stage lengths `lengths` (with the schedules that span a stage, `length_overrides`).
    Errors name the arm: `--arm NAME: KEY: message`."""
    key = key or f"--arm {arm.name}"
    overrides = [*arm.overrides, f"seed={seed}"]
    try:
        find_user_modules(arm.config)
        config = load_config(arm.config, overrides, key)
        if lengths is not None:
            sets = overrides + length_overrides(config, lengths)
            config = load_config(arm.config, sets, key)
    except ConfigError as e:
        if e.key == key:
            raise
        raise ConfigError(key, f"{e.key}: {e.message}" if e.key else e.message) from None
    return config


def length_overrides(config, lengths):
    """`--set` strings giving `config`'s stages `lengths`, and each learning-rate schedule of
    a stage's own optimizer (written in the stage) that spans its stage (its `steps` equal to
    the stage's) the new length too: a polish whose rate decays to 0 still reaches 0 at its
    end, not before or never."""
    if len(lengths) != len(config.stages):  # the config changed since they were recorded
        raise ConfigError(
            "stages",
            f"{len(config.stages)} stages, but the comparison sized {len(lengths)}: "
            f"{list(lengths)} (use another --output)",
        )
    sets = []
    for index, (stage, length) in enumerate(zip(config.stages, lengths, strict=True)):
        if length == stage.steps:
            continue
        sets.append(f"stages[{index}].steps={length}")
        for number, update in enumerate(stage.updates):
            private = f"stages[{index}].updates[{number}]"
            if update.optimizer != private:  # a named optimizer may serve other stages
                continue
            rate = dict(config.optimizers[private].options).get("learning_rate")
            if getattr(rate, "steps", None) == stage.steps:
                sets.append(f"{private}.optimizer.learning_rate.steps={length}")
    return sets


def proportional(lengths, total):
    """`total` steps shared among stages in the proportions of `lengths` (largest
    remainders: the shares add up to `total`), each at least 1 (more than `total` in all
    only when a stage's share rounds below 1)."""
    whole = sum(lengths)
    exact = [total * length / whole for length in lengths]
    shares = [max(1, math.floor(x)) for x in exact]
    order = sorted(range(len(lengths)), key=lambda i: shares[i] - exact[i])
    for i in order[: max(0, total - sum(shares))]:
        shares[i] += 1
    return shares


# Checks, before anything is written --------------------------------------------------------


def check(arms, output, seeds=(0, 1, 2), steps=None, budget=None, evaluation=None, metrics=()):
    """Every refusal of a comparison that needs no TensorFlow: returns its `ComparePlan`.

    Args:
        arms: `Arm`s, the baseline first.
        output: the comparison folder: new, empty, or an earlier comparison's (grown).
        seeds: run seeds.
        steps: every arm trains this many steps, its stages in its config's proportions.
        budget: seconds: every arm trains the steps that fit (timed by `prepare`).
        evaluation: `EvalOptions` (None: the defaults).
        metrics: the table's metrics (empty: every declared score the evaluations give).

    Raises:
        ConfigError: an arm that does not parse (naming it), two arms of one name, bad seeds,
            steps or budget, an output folder that is no comparison's, or an arm or sizing
            that differs from what the folder's runs were made with.
    """
    evaluation = evaluation or EvalOptions()
    arms, seeds = check_arms(arms), check_seeds(seeds)
    sizing = sizing_of(steps, budget)
    check_evaluation(evaluation)
    output = Path(output)
    recorded = read_record(output)
    if recorded is not None and recorded["sizing"] != sizing:
        flag = "--budget" if "budget" in {**sizing, **recorded["sizing"]} else "--steps"
        raise ConfigError(
            flag,
            f"{output} compares arms sized {describe_sizing(recorded['sizing'])}; this asks "
            f"{describe_sizing(sizing)} (use another --output)",
        )
    known = (recorded or {}).get("arms", {})
    lengths = {}
    for arm in arms:
        found = arm_lengths(arm, known.get(arm.name), seeds, sizing, output)
        if found is not None:
            lengths[arm.name] = found
        for seed in seeds:
            arm_config(arm, seed, found)
            check_run_folder(output / f"{arm.name}-s{seed}")
    return ComparePlan(
        output, arms, seeds, evaluation, tuple(metrics), sizing, lengths, dict(known)
    )


def check_arms(arms):
    """The arms as a tuple: at least one, each name once, none setting the seed."""
    arms = tuple(arms)
    if not arms:
        raise ConfigError("--arm", "give at least one arm, --arm NAME=CONFIG (a preset or YAML)")
    names = [check_name(arm.name) for arm in arms]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError("--arm", f"two arms are named {twice[0]!r}: each name once")
    for arm in arms:
        seeded = [s for s in arm.overrides if str(s).split("=")[0].strip() == "seed"]
        if seeded:
            raise ConfigError(f"--arm {arm.name}", f"--set {seeded[0]}: --seeds sets the seed")
    return arms


def check_seeds(seeds):
    seeds = tuple(seeds)
    if not seeds:
        raise ConfigError("--seeds", "give at least one seed")
    for seed in seeds:
        check_seed(seed, "--seeds")
    if len(set(seeds)) < len(seeds):
        raise ConfigError("--seeds", f"a seed given twice. Received: {list(seeds)}")
    return seeds


def arm_lengths(arm, before, seeds, sizing, output):
    """The stage lengths `arm` trains with: those the comparison folder recorded for it
    (`before`: its record there, or None), or with `--steps` its config's in proportion;
    None: its config's own (or, with `--budget`, still to be timed).

    Raises:
        ConfigError: an arm of this name recorded with another config or flags; fewer
            `--steps` than the arm has stages.
    """
    if before is not None:
        if (before["config"], before["overrides"]) != (arm.config, list(arm.overrides)):
            given = " ".join([arm.config, *(f"--set {s}" for s in arm.overrides)])
            made = " ".join([before["config"], *(f"--set {s}" for s in before["overrides"])])
            raise ConfigError(
                f"--arm {arm.name}",
                f"{output}'s arm {arm.name!r} is {made}, not {given} (name the new arm "
                "otherwise, or use another --output)",
            )
        if before.get("lengths") is not None:
            return before["lengths"]
    if "steps" not in sizing:
        return None
    stages = arm_config(arm, seeds[0]).stages
    if sizing["steps"] < len(stages):
        raise ConfigError(
            "--steps",
            f"arm {arm.name!r} has {len(stages)} stages: it needs at least {len(stages)} "
            f"steps. Received: {sizing['steps']}",
        )
    return proportional([stage.steps for stage in stages], sizing["steps"])


def sizing_of(steps, budget):
    if steps is not None and budget is not None:
        raise ConfigError("--budget", "not with --steps (equal steps, or equal time)")
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(
                "--steps", f"must be a whole number of at least 1. Received: {steps!r}"
            )
        return {"steps": steps}
    if budget is not None:
        if (
            isinstance(budget, bool)
            or not isinstance(budget, (int, float))
            or not (0 < budget < float("inf"))
        ):
            raise ConfigError(
                "--budget", f"must be a positive number of seconds. Received: {budget!r}"
            )
        return {"budget": float(budget)}
    return {}


def describe_sizing(sizing):
    if "steps" in sizing:
        return f"--steps {sizing['steps']}"
    if "budget" in sizing:
        return f"--budget {sizing['budget']:g}s"
    return "by their configs' own steps"


def check_evaluation(evaluation):
    if evaluation.count is not None and (
        isinstance(evaluation.count, bool)
        or not isinstance(evaluation.count, int)
        or evaluation.count < 4
    ):
        raise ConfigError("--count", f"must be at least 4. Received: {evaluation.count!r}")
    if evaluation.seed is not None:
        check_seed(evaluation.seed, "--eval-seed")
    if evaluation.features is not None and not isinstance(evaluation.features, str):
        raise ConfigError("--features", f"must be a name. Received: {evaluation.features!r}")
    if evaluation.memorise not in (True, False, "auto"):
        raise ConfigError(
            "--memorisation", f"must be True, False or 'auto'. Received: {evaluation.memorise!r}"
        )


def check_metrics(metrics, configs):
    """Refuse a metric no declaration ranks (`registry.lookup`), once the modules of the
    arms' `configs` that declare metrics are imported (a user's task, `eval.metrics`): with
    TensorFlow, which they may import."""
    for config in configs:
        if ":" in config.task:
            load_object(config.task, "task")
        if config.eval is not None:
            registry.load_metrics(config.eval.metrics or ())
    for name in metrics:
        if registry.lookup(name) is None:
            declared = ", ".join(sorted(registry.METRICS))
            raise ConfigError(
                "--metrics",
                f"no metric {name!r} is declared (declared: {declared}; a prefixed or "
                "suffixed name such as fid/<class> ranks as the one it ends or starts with)",
            )


def read_record(output):
    """The `comparison.json` of `output` (None: a new or empty folder).

    Raises:
        ConfigError: on `--output`: a file, an unreadable record, or a folder with files but
            no record (not a comparison's).
    """
    if not output.exists():
        return None
    if not output.is_dir():
        raise ConfigError("--output", f"{output} is a file, not a comparison folder")
    path = output / RECORD
    if not path.exists():
        if any(output.iterdir()):
            raise ConfigError(
                "--output",
                f"{output} holds files but no {RECORD}: it is no comparison's folder (pick a "
                "new or empty one)",
            )
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(record.get("arms"), dict) and isinstance(record.get("sizing"), dict)):
            raise ValueError("no arms or sizing")
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigError("--output", f"cannot read {path}: {e}") from None
    return record


def check_run_folder(run_dir):
    """Refuse a folder in a run's place that is no run and not a run's first moment (a
    folder holding nothing but its lock: a run stopped before it wrote its config)."""
    if not os.path.lexists(run_dir) or (run_dir / RunFolder.CONFIG).exists():
        return
    if not run_dir.is_dir() or any(p.name != LOCK for p in run_dir.iterdir()):
        raise ConfigError(
            "--output", f"{run_dir} is in a run's place but is no run folder (move it away)"
        )


# What needs TensorFlow, before anything is written ----------------------------------------


def prepare(plan):
    """The rest of the refusals, which need TensorFlow; nothing is written. The metrics the
    table names are looked up once the arms' own modules declared theirs; each arm's
    evaluation is loaded as the comparison will make it (features, counts: a problem shows
    before training); with a budget, the arms not sized yet are timed with `plan --budget`'s
    code (`planning.time_stages`, `fit_budget`). Returns the plan with their lengths.

    Raises:
        ConfigError: an unknown metric; an evaluation that cannot be made; `--budget` too
            small for one step of each of an arm's stages.
    """
    from stagegan.evaluation.evaluate import Evaluation
    from stagegan.run import planning, runner
    from stagegan.training.trainer import Trainer

    check_metrics(plan.metrics, [plan.config(arm, plan.seeds[0]) for arm in plan.arms])
    lengths = dict(plan.lengths)
    for arm in plan.arms:
        timed = "budget" in plan.sizing and arm.name not in lengths
        if not timed and not pending(plan, arm):
            continue
        config = plan.config(arm, plan.seeds[0])
        trainer = runner.traced_trainer(config) if timed else None
        if timed:
            budget = plan.sizing["budget"]
            timings = planning.time_stages(trainer)
            factor, fitted = planning.fit_budget(timings, budget)
            short = [(stage, per) for stage, per, _ in timings if stage.steps * factor < 1]
            if short:
                need = budget / factor / min(stage.steps for stage, _ in short)
                steps = ", ".join(
                    f"{stage.name} {planning.milliseconds(per)} ms" for stage, per in short
                )
                raise ConfigError(
                    "--budget",
                    f"too short for one step of each stage of arm {arm.name!r} in its "
                    f"config's proportions: that takes {need:.3g}s (a step: {steps}). "
                    f"Received: {budget:g}s",
                )
            lengths[arm.name] = fitted
            for seed in plan.seeds:  # the fitted lengths taken (a schedule's warm-up, say)
                arm_config(arm, seed, fitted)
            log.info(
                "arm %s: %s steps fit in %s (%s)",
                arm.name,
                f"{sum(fitted):,}",
                planning.format_seconds(budget),
                ", ".join(
                    f"{stage.name} {planning.milliseconds(per_step)} ms a step"
                    for stage, per_step, _ in timings
                ),
            )
        if pending(plan, arm):
            trainer = trainer or Trainer(config)  # as a run builds it before its first trace
            options = plan.evaluation.of(plan.seeds[0])
            features = options["features"]
            if features is None and config.eval is not None:
                features = config.eval.features
            try:
                Evaluation(
                    trainer, None, options["count"], options["seed"], features,
                    memorise=options["memorise"],
                ).check()  # fmt: skip
            except ConfigError as e:
                raise ConfigError(e.key, f"arm {arm.name!r}: {e.message}") from None
        del trainer
    return dataclasses.replace(plan, lengths=lengths)


def pending(plan, arm):
    """Whether a run of `arm` is still to be trained or evaluated."""
    for seed in plan.seeds:
        saved = read_result(plan.run_dir(arm, seed))
        if saved is None or saved["options"] != plan.evaluation.of(seed):
            return True
    return False


def read_result(run_dir):
    """A run's `compare.json`, or None (none, or unreadable: evaluated again)."""
    try:
        return json.loads((Path(run_dir) / RESULT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# Running --------------------------------------------------------------------------------------


def run(plan):
    """Train and evaluate every arm's run of every seed (seed by seed), then write the table
    (`table.md`, `table.json`) and the picture (`samples.png`); returns the table (as
    `table.json` holds it)."""
    plan.output.mkdir(parents=True, exist_ok=True)
    write_record(plan)
    results = {}
    for seed in plan.seeds:
        for arm in plan.arms:
            run_dir = plan.run_dir(arm, seed)
            train_run(plan, arm, seed, run_dir)
            results[arm.name, seed] = evaluate_run(plan, seed, run_dir)
    table = summarise(plan, results)
    atomic_write(plan.output / TABLE_JSON, json.dumps(table, indent=1))
    markdown = format_table(table)
    atomic_write(plan.output / TABLE_MD, markdown + "\n")
    write_picture(plan, plan.output / PICTURE)
    return table


def write_record(plan):
    """`comparison.json`: the arms (those of earlier invocations kept), their stage lengths,
    and how they were sized."""
    arms = dict(plan.recorded)
    for arm in plan.arms:
        arms[arm.name] = {**arm.record(), "lengths": plan.lengths.get(arm.name)}
    record = {"sizing": plan.sizing, "arms": arms}
    atomic_write(plan.output / RECORD, json.dumps(record, indent=1))


def train_run(plan, arm, seed, run_dir):
    """Train arm `arm`'s run from `seed` into `run_dir` to its end: a new run, the rest of a
    stopped one, or nothing for a finished one."""
    from stagegan.run import runner
    from stagegan.run.trainplan import TrainPlan

    if run_dir.is_dir() and not (run_dir / RunFolder.CONFIG).exists():
        shutil.rmtree(run_dir)  # stopped before its config: only its lock (`check_run_folder`)
    if not run_dir.exists():
        log.info("%s: training arm %s from seed %d", run_dir, arm.name, seed)
        runner.run(TrainPlan.new(plan.config(arm, seed), run_dir, chief=True))
        return
    resumed = TrainPlan.resumed(run_dir, (), None, chief=True)
    if resumed.finished:
        log.info("%s: finished already (step %d)", run_dir, resumed.resume.step)
        return
    log.info("%s: resuming from step %d", run_dir, resumed.resume.step)
    runner.run(resumed)


def evaluate_run(plan, seed, run_dir):
    """The run's evaluation with the comparison's options, from its `compare.json` when that
    is of these options and of its newest checkpoint, else made (and recorded there)."""
    from stagegan.run import runner
    from stagegan.run.reading import find_checkpoint

    options = plan.evaluation.of(seed)
    checkpoint = os.path.basename(find_checkpoint(run_dir))
    saved = read_result(run_dir)
    if saved is not None and saved["options"] == options and saved["checkpoint"] == checkpoint:
        return saved
    result = runner.evaluate(
        run_dir, options["count"], options["seed"], None, options["features"],
        memorise=options["memorise"],
    )  # fmt: skip
    records = read_metrics(run_dir / RunFolder.METRICS)
    seconds = max((r["time"] for r in records if "time" in r), default=None)
    saved = {
        "options": options,
        "checkpoint": result["checkpoint"],
        "step": result["step"],
        "train_seconds": None if seconds is None else round(seconds, 1),
        "metrics": result["metrics"],
    }
    atomic_write(run_dir / RESULT, json.dumps(saved, indent=1))
    log.info("%s: evaluated at step %d", run_dir, result["step"])
    return saved


# The table ------------------------------------------------------------------------------------


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def default_metrics(results):
    """Every number the evaluations give under a name declared with a direction (the
    family's own numbers: not `fid/<class>` nor a baseline's `mean_fill/fid`), in the order
    of the first evaluation that gives it."""
    names = []
    for saved in results.values():
        for name, value in saved["metrics"].items():
            metric = registry.METRICS.get(name)
            if metric is not None and metric.mode and is_number(value) and name not in names:
                names.append(name)
    return names


def paired_wins(mode, baseline, values):
    """`(wins, ties, losses)` of `values` against `baseline`, seed by seed (lists in the
    same seed order), on the seeds where both are numbers; better is lower for `mode` "min",
    higher for "max"."""
    wins = ties = losses = 0
    for base, value in zip(baseline, values, strict=True):
        if not (is_number(base) and is_number(value)):
            continue
        if value == base:
            ties += 1
        elif (value < base) == (mode == "min"):
            wins += 1
        else:
            losses += 1
    return wins, ties, losses


def summarise(plan, results):
    """The table: per arm and metric, the mean and spread (sample standard deviation) over
    the seeds, and against the baseline the paired wins, ties and losses; with every run's
    numbers. `results`: `{(arm name, seed): compare.json's record}`."""
    metrics = list(plan.metrics) or default_metrics(results)
    baseline = plan.arms[0].name
    modes = {name: getattr(registry.lookup(name), "mode", None) for name in metrics}
    summary = {}
    for arm in plan.arms:
        rows = [results[arm.name, seed] for seed in plan.seeds]
        cells = {}
        for name in metrics:
            values = [row["metrics"].get(name) for row in rows]
            numbers = [v for v in values if is_number(v)]
            cell = {
                "mean": statistics.fmean(numbers) if numbers else None,
                "std": statistics.stdev(numbers) if len(numbers) > 1 else None,
                "n": len(numbers),
            }
            if arm.name != baseline and modes[name]:
                base = [results[baseline, seed]["metrics"].get(name) for seed in plan.seeds]
                cell["wins"], cell["ties"], cell["losses"] = paired_wins(modes[name], base, values)
            cells[name] = cell
        seconds = [row["train_seconds"] for row in rows if is_number(row.get("train_seconds"))]
        summary[arm.name] = {
            "steps": [row["step"] for row in rows],
            "train_seconds": statistics.fmean(seconds) if seconds else None,
            "metrics": cells,
        }
    return {
        "baseline": baseline,
        "seeds": list(plan.seeds),
        "sizing": plan.sizing,
        "evaluation": dataclasses.asdict(plan.evaluation),
        "arms": [
            {"name": arm.name, **arm.record(), "lengths": plan.lengths.get(arm.name)}
            for arm in plan.arms
        ],
        "metrics": [{"name": name, "mode": modes[name]} for name in metrics],
        "summary": summary,
        "runs": [
            {
                "arm": arm.name,
                "seed": seed,
                "run": str(plan.run_dir(arm, seed)),
                **results[arm.name, seed],
            }
            for seed in plan.seeds
            for arm in plan.arms
        ],  # fmt: skip
    }


ARROWS = {"min": " ↓", "max": " ↑"}


def format_number(value):
    """4 significant digits (`18.02`, `0.9731`, `1.234e-05`)."""
    return f"{value:.4g}"


def format_cell(cell, seeds):
    if cell["mean"] is None:
        return "n/a"
    text = format_number(cell["mean"])
    if cell["std"] is not None:
        text += f" ± {cell['std']:.2g}"
    if cell["n"] < seeds:
        text += f" [{cell['n']} of {seeds}]"
    if "wins" in cell:
        tied = f", {cell['ties']} tied" if cell["ties"] else ""
        text += f" ({cell['wins']}/{cell['wins'] + cell['ties'] + cell['losses']}{tied})"
    return text


def format_table(table):
    """The table as Markdown: an arm a row, a metric a column."""
    seeds = len(table["seeds"])
    metrics = table["metrics"]
    head = ["arm", "steps", "train s"] + [m["name"] + ARROWS.get(m["mode"], "") for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for arm in table["arms"]:
        row = table["summary"][arm["name"]]
        steps = sorted(set(row["steps"]))
        seconds = row["train_seconds"]
        cells = [
            f"`{arm['name']}`",
            "/".join(f"{s:,}" for s in steps),
            "n/a" if seconds is None else f"{seconds:.0f}",
        ]
        cells += [format_cell(row["metrics"][m["name"]], seeds) for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    seed_list = ", ".join(map(str, table["seeds"]))
    lines += [
        "",
        f"Mean ± sample standard deviation over {'seeds' if seeds > 1 else 'seed'} "
        f"{seed_list}; ↓ lower is better, ↑ "
        f"higher. (w/n): the seeds on which the arm beat `{table['baseline']}` (the "
        "baseline), of the n on which both have a number (and how many of them tied). "
        "train s: training's own clock, mean over the seeds.",
    ]
    return "\n".join(lines)


def write_picture(plan, path):
    """One PNG: each arm's samples side by side (its first seed's run; the task's own
    picture, of the inputs `PICTURE_SEED` draws), each under its name."""
    from stagegan.run.reading import restore_run, sample_arrays
    from stagegan.runfolder import pictures

    shown = []
    for arm in plan.arms:
        trainer, _ = restore_run(plan.run_dir(arm, plan.seeds[0]))
        samples = trainer.config.samples
        count = (samples.count if samples is not None else None) or trainer.task.sample_count
        inputs, outputs, info, _ = sample_arrays(trainer, count, PICTURE_SEED)
        title = f"{arm.name} (seed {plan.seeds[0]}, step {trainer.step_count})"
        shown.append(pictures.with_title(trainer.task.picture(inputs, outputs, info), title))
        del trainer
    pictures.write_png(pictures.side_by_side(shown), path)
