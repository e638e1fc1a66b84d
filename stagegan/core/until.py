"""Stages that end on a condition: a stage's `until:` (see `config.Threshold`
and `config.Plateau`).

    - name: discriminator
      steps: 10000                  # the upper bound
      until: {metric: d/d_fake_accuracy, above: 0.9, check_every: 100}
    - name: joint
      steps: 50000
      until: {eval: fid, patience: 3, min_delta: 0.5, check_every: 2000}

After every `check_every` steps of the stage (counted from its first step; from `min_steps`
on), the loop asks `Conditions.check`:

* a threshold: the mean of the logged step metric over the steps since the last check (steps
  where its update did not run, or was skipped by the NaN guard, are left out) is above or
  below the value;
* a plateau: the run is evaluated (`stagegan.evaluation.evaluate`, as `eval:` configures it, or the
  task's defaults), and the metric has not improved on its best by more than `min_delta` for
  `patience` checks in a row.

When it holds, the stage ends with that step: the schedule moves every later stage earlier
(`Schedule.end_stage`), and the step is a stage end like any other (checkpoint, samples,
evaluation, plot). The decision depends only on the step metrics and the weights, and its
state (the running sum, the best value, the ended stages) goes into every checkpoint's index
entry, so a resumed run ends the stage at the same step as the uninterrupted one.
"""

import logging
import math

from stagegan.config.schema import Plateau, Threshold
from stagegan.core.monitor import Monitor
from stagegan.errors import ConfigError

AUGMENT_METRICS = ("augment/p", "augment/rt")  # logged by every stage that augments

log = logging.getLogger("stagegan")


class Conditions:
    """The `until:` checks of one run.

    Args:
        schedule: the trainer's `Schedule` (ended stages are recorded in it).
        evaluation: the run's `evaluation.Evaluation` (None when no stage has a plateau).
        state: what `state()` returned at the checkpoint a run resumes from.
    """

    def __init__(self, schedule, evaluation=None, state=None):
        self.schedule, self.evaluation = schedule, evaluation
        state = state or {}
        self.total = state.get("total", 0.0)
        self.count = state.get("count", 0)
        self.best = state.get("best")
        self.bad = state.get("bad", 0)
        self.pending = []  # the threshold metric's values since the last read, unread

    def checks(self, tick):
        """Whether the step of `tick` is one of its stage's checks (it reads the device)."""
        until = tick.stage.until
        return until is not None and (tick.position.stage_step + 1) % until.check_every == 0

    def _read(self):
        """Add the collected metric values to the running sum (NaN: the update did not run,
        or was skipped), in step order, as if each had been added after its step."""
        for metrics, name in self.pending:
            value = float(metrics[name])
            if not math.isnan(value):
                self.total, self.count = self.total + value, self.count + 1
        self.pending = []

    def state(self):
        """JSON for the checkpoint index: the ended stages and the current stage's checks."""
        self._read()
        ends = {self.schedule.stages[i].name: n for i, n in sorted(self.schedule.ends.items())}
        return {
            "ends": ends,
            "total": self.total,
            "count": self.count,
            "best": self.best,
            "bad": self.bad,
        }

    def check(self, tick):
        """After the step of `tick` (a `loop.Tick`): whether its stage's condition ends the
        stage there. Returns the reason, or None; the loop ends the stage (`loop.end_stage`).
        With a plateau, the evaluation it ran is left in `tick.evaluation` for the loop to
        log."""
        until = tick.stage.until
        if until is None:
            return None
        if tick.position.stage_step == 0:  # a stage starts its checks afresh
            self.total, self.count, self.best, self.bad = 0.0, 0, None, 0
            self.pending = []
        if isinstance(until, Threshold):
            # The mapping, not its value: a step scheduled on a worker (`parameter_server`)
            # is not waited for until the check reads it.
            self.pending.append((tick.output.metrics, until.metric))
        stage_steps = tick.position.stage_step + 1
        reason = None
        # A check at the stage's last step too, so a stage extended on resume (whose old last
        # step was a check in the longer config) decides as the longer config does.
        if stage_steps % until.check_every == 0:
            if isinstance(until, Threshold):
                reason = self._threshold(until)
            elif stage_steps >= until.min_steps:
                tick.evaluation = self.evaluation.run()
                reason = self._plateau(until, tick.evaluation["metrics"], tick.done)
            if stage_steps < until.min_steps:
                reason = None
        return reason

    def _threshold(self, until):
        """The interval's mean against the bound; the interval starts again either way."""
        self._read()
        total, count = self.total, self.count
        self.total, self.count = 0.0, 0
        if not count:
            return None
        mean = total / count
        if until.holds(mean):
            bound = f"{until.metric} {until.sign} {until.value:g}"
            return f"until {bound}: mean {mean:.4g} over {count} steps"
        return None

    def _plateau(self, until, values, step):
        # Undefined at this step (mog2d's reverse_kl without any high-quality point): this
        # check neither improves nor counts.
        monitor = Monitor(until.eval, until.mode, until.min_delta, who=until.key)
        value = monitor.read(values, step)
        if value is None:
            return None
        if monitor.improves(value, self.best):
            self.best, self.bad = value, 0
            return None
        self.bad += 1
        if self.bad < until.patience:
            return None
        return (
            f"until eval {until.eval} plateaus: {value:.4g}, best {self.best:.4g}, no "
            f"improvement by more than {until.min_delta:g} in {self.bad} checks"
        )


def stage_ends(stages, entry):
    """The stages that ended on their `until` by a checkpoint's index entry (None: none):
    `{stage index: steps run}`."""
    ends = ((entry or {}).get("until") or {}).get("ends", {})
    index = {stage.name: i for i, stage in enumerate(stages)}
    return {index[name]: length for name, length in ends.items() if name in index}


def never_checked(stage):
    """Why `stage`'s `until` can never hold, in one line (None when it can): it is checked
    every `check_every` steps of the stage from `min_steps` on, and no check falls within the
    stage's `steps`. Not an error (the stage runs all its steps), but rarely what was meant."""
    until = stage.until
    if until is None:
        return None
    every = until.check_every
    first = every * max(1, -(-until.min_steps // every))  # the first check that counts
    if first <= stage.steps:
        return None
    if every > stage.steps:
        why = f"is more than the stage's {stage.steps} steps"
    else:
        why = (
            f"puts no check between min_steps {until.min_steps} and the stage's "
            f"{stage.steps} steps (the first would be at {first})"
        )
    return (
        f"{until.key}.check_every: {every} {why}, so the condition is never checked and the "
        "stage runs all its steps"
    )


def check_metrics(stages, stage_plans):
    """Refuse a threshold on a metric that its stage does not log, before the first step.
    (A plateau's metric is the evaluation's: `stagegan.evaluation.registry.settle`.)"""
    for stage, plans in zip(stages, stage_plans, strict=True):
        until = stage.until
        if until is None or isinstance(until, Plateau):
            continue
        names = [name for plan in plans for name in plan.metric_names()]
        if stage.augment is not None:
            names += list(AUGMENT_METRICS)
        if until.metric not in names:
            raise ConfigError(
                f"{until.key}.metric",
                f"stage {stage.name!r} logs no {until.metric!r} (it logs: {', '.join(names)})",
            )
