"""The NaN/Inf guard (`guard.policy`), and the mixed-precision loss scale, around every update's
optimizer.

`GuardedApply` wraps one update's application, in the spirit of optax's `apply_if_finite` and
Keras's `LossScaleOptimizer`: inside the step, an application whose loss terms or gradients
are non-finite in any replica is not applied (a `tf.cond`), and, under mixed precision, the
loss scale adapts (see `stagegan.core.precision`). Its counter of steps in a row with a skipped
application is a variable, checkpointed with the run, so a resumed run goes on counting where
the interrupted one stopped.

`Guard` acts on what the step reports (`steps.GuardResult`): it logs a skipped update (stage,
update, loss term, replicas), records it for `guard.jsonl`, and raises `GuardStop` when the
policy says stop: under `stop` the first skip, under `skip` the `max_consecutive`-th step in
a row on which one update was skipped.

The train loop does not read the results every step (each read makes the host wait for the
device): it `collect`s them and `flush`es at the steps where it reads anyway (log lines,
checkpoints, `until` checks, samples, evaluations, stage ends). The counter of skips in a row
lives in the graph, so the step that stops the run is the same; the steps run after it, up to
the flush, write nothing (no checkpoint is written before the flush) and apply no non-finite
update.
"""

import logging
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from stagegan.errors import GuardStop

log = logging.getLogger("stagegan")


class GuardResult(NamedTuple):
    """What the guard did to one update in one step."""

    skipped: tf.Tensor  # int32: applications not applied; -1 on steps the update does not run
    in_a_row: tf.Tensor  # int64: steps in a row with a skipped application, this one included
    detail: tf.Tensor  # bool [replicas, terms + 1]: True where finite (see `Averaged.detail`)


class GuardedApply:
    """One update's application, guarded. Create it on the variable device.

    Args:
        checking: check finiteness (`guard.policy` is not `off`).
        in_a_row: the update's int64 counter of steps in a row with a skip (shared by the
            updates of one name across stages).
        loss_scale: the optimizer's `precision.LossScale` under mixed precision, else None.
    """

    def __init__(self, checking, in_a_row, loss_scale=None):
        self.checking = checking
        self.in_a_row = in_a_row
        self.loss_scale = loss_scale

    @property
    def guarded(self):
        """Whether applications are checked: mixed precision's loss scaling needs the checks
        even with the guard off."""
        return self.checking or self.loss_scale is not None

    def scale(self):
        """The current loss scale (a tensor), or None without mixed precision."""
        return None if self.loss_scale is None else self.loss_scale.scale.read_value()

    def apply(self, apply, detail, active=None):
        """Run `apply()` (traced; returns a bool tensor) if `active` (None: always) and, when
        guarded, everything in `detail` is finite; then adapt the loss scale.

        Returns:
            A bool tensor: whether the guard counts the application as skipped (a routine
            loss-scale overflow is not; see `stagegan.core.precision`).
        """
        finite = tf.reduce_all(detail) if self.guarded else None
        condition = finite
        if active is not None:
            condition = active if finite is None else tf.logical_and(active, finite)
        if condition is None:
            apply()
        else:
            tf.cond(condition, apply, lambda: tf.constant(False))
        if self.loss_scale is not None:
            terms_ok = tf.reduce_all(detail[:, :-1])
            grads_ok = tf.reduce_all(detail[:, -1])
            return self.loss_scale.update(terms_ok, grads_ok, active)
        if finite is None:
            return tf.constant(False)
        return tf.logical_not(finite)

    def result(self, skipped, detail, active=None):
        """After a step's applications (`skipped` of them skipped): count the step in a row
        or reset the count, and return the step's `steps.GuardResult`."""
        count = self.in_a_row
        after = tf.where(skipped > 0, count + 1, tf.zeros_like(count))
        if active is not None:
            after = tf.where(active, after, count)
        count.assign(after)
        return GuardResult(skipped, count.read_value(), detail)


class Guard:
    """Acts on the step's `GuardResult`s.

    Args:
        config: a `config.GuardConfig`.
        labels: a name per replica, for messages.
    """

    def __init__(self, config, labels):
        self.config = config
        self.labels = labels
        self.skipped = 0  # applications skipped in this process
        self.events = []  # records for RUN/guard.jsonl; `train` drains them
        self.pending = []  # collected (stage, done, results), not read yet

    def check(self, stage, done, results):
        """After global step `done` of `stage`; `results`: `{update name: GuardResult}`.

        Raises:
            GuardStop: the policy is `stop`, or an update was skipped too often in a row.
        """
        self.collect(stage, done, results)
        self.flush()

    def collect(self, stage, done, results):
        """Keep a step's results, unread, for the next `flush`."""
        if self.config.policy != "off":
            self.pending.append((stage, done, results))

    def flush(self):
        """Read and act on the collected results, oldest first (see `check`)."""
        pending, self.pending = self.pending, []
        for stage, done, results in pending:
            self._act(stage, done, results)

    def _act(self, stage, done, results):
        for update in stage.updates:
            result = results[update.name]
            count = int(result.skipped)
            if count <= 0:
                continue
            in_a_row = int(result.in_a_row)
            self.skipped += count
            where = self.describe(update, np.asarray(result.detail))
            stop = self.config.policy == "stop" or in_a_row >= self.config.max_consecutive
            self.events.append(
                {
                    "step": done,
                    "stage": stage.name,
                    "update": update.name,
                    "skipped": count,
                    "in_a_row": in_a_row,
                    **where,
                    "action": "stop" if stop else "skip",
                }
            )
            text = (
                f"[{stage.name}] step {done}: update {update.name!r} not applied: {where['text']}"
            )
            if stop:
                why = (
                    "guard.policy is stop"
                    if self.config.policy == "stop"
                    else f"{in_a_row} skips in a row (guard.max_consecutive)"
                )
                raise GuardStop(f"{text}; stopped: {why}")
            log.warning("%s (%d in a row)", text, in_a_row)

    def describe(self, update, detail):
        """Which loss terms and gradients went non-finite in which replicas."""
        terms = [term for term, _ in update.loss]
        found = {}
        for column, name in enumerate([*terms, "gradients"]):
            towers = [i for i in range(detail.shape[0]) if not detail[i, column]]
            if towers:
                found[name] = towers
        parts = []
        for name, towers in found.items():
            what = f"loss term {name}" if name != "gradients" else "gradients"
            devices = ", ".join(f"{i} ({self.labels[i]})" for i in towers)
            parts.append(f"non-finite {what} in tower{'s' if len(towers) > 1 else ''} {devices}")
        return {
            "terms": {k: v for k, v in found.items() if k != "gradients"},
            "gradient_towers": found.get("gradients", []),
            "text": "; ".join(parts) or "non-finite values",
        }
