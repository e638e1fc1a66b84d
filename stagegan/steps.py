"""Stage step functions: one `tf.function` per stage, traced once, whatever order stages run in.

A stage step runs the stage's updates:

* `sequential`: the updates run one after another, each drawing its own global batch.
  `repeat: k` runs an update k times per stage step (unrolled: k batches, k applies);
  `every: n` runs it only on stage steps divisible by n (a `tf.cond`, so no retracing).
* `simultaneous`: one global batch and one forward pass per tower; every update's loss is
  differentiated with respect to its own variables, and all updates are applied together
  after all gradients are computed.

The step takes the stage step as an int64 tensor, so one trace serves every step.

The NaN/Inf guard (`guard.policy` skip or stop) checks, inside the step, every tower's loss
terms and gradients of every update application for finiteness; an application with anything
non-finite is not applied (a `tf.cond` around `apply_gradients`). The step reports, per update,
`guard/<update>`: how many of its applications were skipped (-1 on steps it does not run), and
`guard_detail/<update>`: a bool [towers, terms + 1] array, True where each tower's loss term
(columns in `loss` order) and gradients (last column) were finite. The trainer acts on them.
"""

import logging
from dataclasses import dataclass

import tensorflow as tf
from keras.optimizers.schedules import LearningRateSchedule

from stagegan.errors import ConfigError
from stagegan.towers import (
    average_gradients,
    average_terms,
    finite_flags,
    split_batch,
    tower_gradients,
    weighted_loss,
)

log = logging.getLogger("stagegan")


@dataclass(frozen=True)
class UpdatePlan:
    """An update bound to real objects: its matched variables and its built optimizer."""

    update: object  # config.Update
    variables: tuple
    optimizer: object
    shared: bool
    loss_scale: object = None  # a `precision.LossScale` under mixed precision
    # State to update after each application, e.g. spectral norm's power iteration (see
    # `stagegan.layers.power_iteration_hook`); None for none.
    after_apply: object = None

    @property
    def terms(self):
        return tuple(term for term, _ in self.update.loss)

    def guard_names(self):
        return f"guard/{self.update.name}", f"guard_detail/{self.update.name}"

    def metric_names(self):
        names = [f"{self.update.name}/{term}" for term in self.terms]
        if len(self.terms) > 1:
            names.append(f"{self.update.name}/loss")
        names.append(f"{self.update.name}/grad_norm")
        if self.loss_scale is not None:
            names.append(f"{self.update.name}/loss_scale")
        return names


class StageStep:
    """The compiled step of one stage.

    Args:
        stage: the `config.Stage` record.
        plans: one `UpdatePlan` per update, in order.
        draw_batch: `() -> dict`, one global batch (real data and random inputs), drawn on the
            variable device so the draw does not depend on the number of towers.
        compute_terms: `(shard, terms) -> {term: scalar}`, one tower's forward pass.
        devices: `towers.Devices`.
        global_step: the run's int64 step counter, incremented by every stage step.
        after_step: optional `(global_step) -> None`, traced in after the increment (the
            generator EMA update).
        guard: `guard.policy`: "skip" or "stop" check finiteness and skip non-finite
            applications; "off" applies everything unchecked.
        replicas: a `strategies.StrategyReplicas` to run the replicas under a
            `tf.distribute` strategy; None (the `towers` backend) runs the towers here.
        jit: compile each tower's forward and backward pass with XLA (`devices.jit`).
    """

    def __init__(
        self,
        stage,
        plans,
        draw_batch,
        compute_terms,
        devices,
        global_step,
        after_step=None,
        guard="skip",
        replicas=None,
        jit=False,
    ):
        self.stage = stage
        self.plans = tuple(plans)
        self.draw_batch = draw_batch
        self.compute_terms = compute_terms
        self.devices = devices
        self.global_step = global_step
        self.after_step = after_step
        # Mixed precision's loss scaling needs the finiteness checks even with the guard off.
        self.guarded = guard != "off" or any(p.loss_scale is not None for p in self.plans)
        self.replicas = replicas
        self.jit = jit
        self.trace_count = 0
        self.gradient_trace_count = 0  # traces of the variant that also returns gradients
        self._gradients = None  # trace time only: where `_reduce` collects gradients
        self.dropped = {}  # update name -> paths of variables with no gradient
        self.problems = []  # ConfigErrors found while tracing, raised by `trace`
        self.function = tf.function(self._step)

    def __call__(self, stage_step, with_gradients=False):
        """Run stage step `stage_step` (an int); returns `{metric: scalar tensor}`.

        With `with_gradients` (for histograms) the result also holds every applied averaged
        gradient as `gradients/<update>/<variable path>`; that variant is traced separately
        and does exactly the same step.
        """
        if not self.trace_count:
            self.trace()
        return self.function(tf.constant(stage_step, tf.int64), with_gradients)

    def trace(self):
        """Trace now (once): logs dropped variables, raises what tracing found wrong."""
        self.function.get_concrete_function(tf.TensorSpec([], tf.int64))
        if self.problems:
            raise self.problems[0]
        for plan in self.plans:
            paths = self.dropped.get(plan.update.name)
            if paths:
                log.info(
                    "stage %r, update %r: %d variable(s) get no gradient from loss %s and are "
                    "left unchanged: %s",
                    self.stage.name,
                    plan.update.name,
                    len(paths),
                    "+".join(plan.terms),
                    ", ".join(paths),
                )

    def batches_per_step(self, stage_step):
        """How many global batches stage step `stage_step` draws (for examples/sec)."""
        active = [p.update for p in self.plans if p.update.is_active(stage_step)]
        if self.stage.mode == "simultaneous":
            return 1 if active else 0
        return sum(update.repeat for update in active)

    # Traced code ----------------------------------------------------------------------------

    def _step(self, stage_step, with_gradients=False):
        if with_gradients:
            self.gradient_trace_count += 1
        else:
            self.trace_count += 1
        self._gradients = {} if with_gradients else None
        metrics = {}
        if self.stage.mode == "sequential":
            for plan in self.plans:
                run = lambda plan=plan: self._run_sequential(plan)
                metrics.update(self._maybe(plan, stage_step, run))
        else:
            metrics.update(self._run_simultaneous(stage_step))
        with tf.device(self.devices.variables):
            self.global_step.assign_add(1)
            if self.after_step is not None:
                self.after_step(self.global_step)
        gradients, self._gradients = self._gradients or {}, None
        metrics.update({f"gradients/{name}": g for name, g in gradients.items()})
        return metrics

    def _maybe(self, plan, stage_step, run):
        """Run `run` on active steps only; inactive steps report NaN metrics."""
        if plan.update.every == 1:
            return run()
        collecting, self._gradients = self._gradients, None  # no tensors out of a tf.cond
        try:
            return self._cond(plan, stage_step, run)
        finally:
            self._gradients = collecting

    def _cond(self, plan, stage_step, run):
        def skipped():
            metrics = {name: tf.constant(float("nan")) for name in plan.metric_names()}
            metrics.update(self._inactive_guard(plan))
            return metrics

        active = tf.equal(stage_step % plan.update.every, 0)
        return tf.cond(active, run, skipped)

    def _inactive_guard(self, plan):
        count, detail = plan.guard_names()
        shape = [len(self.devices.towers), len(plan.terms) + 1]
        return {count: tf.constant(-1, tf.int32), detail: tf.ones(shape, tf.bool)}

    def _run_sequential(self, plan):
        metrics, skipped, detail = None, [], None
        for _ in range(plan.update.repeat):
            with tf.device(self.devices.variables):
                batch = self.draw_batch()
            ((gradients, metrics, finite, flags),) = self._compute([plan], batch)
            with tf.device(self.devices.variables):
                self._apply_if(plan, gradients, finite)
                skip = self._settle(plan, finite, flags, metrics)
                skipped.append(tf.cast(skip, tf.int32))
                detail = flags if detail is None else tf.logical_and(detail, flags)
        count_name, detail_name = plan.guard_names()
        with tf.device(self.devices.variables):
            metrics[count_name] = tf.add_n(skipped)
        metrics[detail_name] = detail
        return metrics

    def _apply_if(self, plan, gradients, finite, active=None):
        """Apply `gradients` when `finite` (unguarded: always) and `active` (if given)."""
        condition = finite if self.guarded else None
        if active is not None:
            condition = active if condition is None else tf.logical_and(active, condition)
        if self.replicas is not None:
            self.replicas.apply(plan, gradients, condition)
        elif condition is None:
            self._apply(plan, gradients)
        else:
            apply = lambda: self._apply(plan, gradients)
            tf.cond(condition, apply, lambda: tf.constant(False))

    def _settle(self, plan, finite, detail, metrics, active=None):
        """After an application: whether the NaN guard counts it as skipped. Under mixed
        precision, the loss scale adapts first, and a routine overflow is not a guard event
        (see `stagegan.precision`)."""
        if plan.loss_scale is None:
            return tf.logical_not(finite)
        terms_ok = tf.reduce_all(detail[:, :-1])
        grads_ok = tf.reduce_all(detail[:, -1])
        skip = plan.loss_scale.update(terms_ok, grads_ok, active)
        metrics[f"{plan.update.name}/loss_scale"] = plan.loss_scale.scale.read_value()
        return skip

    def _scales(self, plans):
        """Each plan's current loss scale (a tensor), or None without mixed precision."""
        if all(plan.loss_scale is None for plan in plans):
            return None
        with tf.device(self.devices.variables):
            return [
                None if plan.loss_scale is None else plan.loss_scale.scale.read_value()
                for plan in plans
            ]

    def _compute(self, plans, batch):
        """Every tower's (or replica's) forward pass and gradients for `plans`, combined.

        Returns one `(gradients, metrics, finite, detail)` per plan: what `_apply_if` applies
        (averaged `(gradient, variable)` pairs, or the strategy's per-replica payload), the
        update's metrics, and the guard's verdict and detail (see `_finite`).
        """
        if self.replicas is None:
            results = self._towers(plans, batch)
            out = []
            for k, plan in enumerate(plans):
                gradients, metrics = self._reduce(plan, k, results)
                out.append((gradients, metrics, *self._finite(plan, k, results)))
            return out
        out = []
        computed = self.replicas.compute(
            plans, batch, self._compute_terms, self.guarded, self._scales(plans)
        )
        for plan, result in zip(plans, computed, strict=True):
            both = list(zip(result["gradients"], plan.variables, strict=True))
            pairs = [(g, v) for g, v in both if g is not None]
            dropped = [v for g, v in both if g is None]
            metrics = self._metrics(plan, pairs, dropped, result["terms"])
            detail = result["detail"]
            out.append((result["payload"], metrics, tf.reduce_all(detail), detail))
        return out

    def _finite(self, plan, k, results):
        """Whether update k's loss terms and gradients are finite in every tower: `(finite,
        detail)`, a bool scalar and a bool [towers, terms + 1] array (see the module doc).
        Each tower checks its own values on its own device."""
        if not self.guarded:
            shape = [len(results), len(plan.terms) + 1]
            return tf.constant(True), tf.ones(shape, tf.bool)
        rows = []
        for device, result in zip(self.devices.towers, results, strict=True):
            with tf.device(device):
                rows.append(finite_flags(result.terms, plan.terms, result.gradients[k]))
        with tf.device(self.devices.variables):
            detail = tf.stack(rows)
            return tf.reduce_all(detail), detail

    def _run_simultaneous(self, stage_step):
        with tf.device(self.devices.variables):
            batch = self.draw_batch()
        metrics, applies = {}, []
        for plan, computed in zip(self.plans, self._compute(self.plans, batch), strict=True):
            gradients, update_metrics, finite, detail = computed
            metrics.update(update_metrics)
            applies.append((plan, gradients, finite, detail))
            metrics[plan.guard_names()[1]] = detail
        # All gradients above come from the same pre-update weights; now apply them all.
        for plan, gradients, finite, detail in applies:
            every = plan.update.every
            active = None if every == 1 else tf.equal(stage_step % every, 0)
            with tf.device(self.devices.variables):
                self._apply_if(plan, gradients, finite, active)
                skip = self._settle(plan, finite, detail, metrics, active)
                metrics[plan.guard_names()[0]] = tf.cast(skip, tf.int32)
            if active is None:
                continue
            nan = tf.constant(float("nan"))
            for name in plan.metric_names():
                metrics[name] = tf.where(active, metrics[name], nan)
            inactive = self._inactive_guard(plan)
            for name, value in inactive.items():
                metrics[name] = tf.where(active, metrics[name], value)
        return metrics

    def _apply(self, plan, gradients):
        with tf.device(self.devices.variables):
            plan.optimizer.apply_gradients(gradients)
            if plan.after_apply is not None:
                plan.after_apply()
        return tf.constant(True)

    def _towers(self, plans, batch):
        terms = tuple(dict.fromkeys(term for plan in plans for term in plan.terms))
        shards = split_batch(batch, len(self.devices.towers))
        compute = lambda shard: self._compute_terms(shard, terms)
        updates = [(plan.update.loss, plan.variables) for plan in plans]
        return tower_gradients(
            compute, updates, shards, self.devices.towers, jit=self.jit, scales=self._scales(plans)
        )

    def _compute_terms(self, shard, terms):
        values = self.compute_terms(shard, terms)
        missing = [t for t in terms if t not in values]
        if missing:
            raise RuntimeError(f"task returned no value for loss terms {missing}")
        return {t: tf.cast(values[t], tf.float32) for t in terms}

    def _reduce(self, plan, k, results):
        """Average update k's gradients over towers (None dropped) and collect its metrics."""
        with tf.device(self.devices.variables):
            pairs, dropped = average_gradients([r.gradients[k] for r in results], plan.variables)
            terms = average_terms([{t: r.terms[t] for t in plan.terms} for r in results])
        metrics = self._metrics(plan, pairs, dropped, terms)
        if not pairs:  # a config error, raised when tracing ends; keep tracing till then
            pairs = [(tf.zeros_like(v), v) for v in plan.variables]
        return pairs, metrics

    def _metrics(self, plan, pairs, dropped, terms):
        """Update metrics from its averaged gradients; records dropped variables and the
        config error of an update that no variable gets a gradient from (trace time)."""
        update = plan.update
        self.dropped[update.name] = [v.path for v in dropped]  # logged by `trace`
        if not pairs:
            loss = ", ".join(f"{t}: {w:g}" for t, w in update.loss)
            self.problems.append(
                ConfigError(
                    update.key,
                    f"no variable gets a gradient from loss {{{loss}}} in stage "
                    f"{self.stage.name!r}, update {update.name!r}: the loss does not depend "
                    f"on {', '.join(update.train)}",
                )
            )
            pairs = [(tf.zeros_like(v), v) for v in plan.variables]
        metrics = {f"{update.name}/{term}": value for term, value in terms.items()}
        if len(terms) > 1:
            metrics[f"{update.name}/loss"] = weighted_loss(terms, update.loss)
        metrics[f"{update.name}/grad_norm"] = tf.linalg.global_norm([g for g, _ in pairs])
        if isinstance(plan.optimizer._learning_rate, LearningRateSchedule):
            # The rate this application uses: the schedule at the optimizer's iteration count.
            metrics[f"{update.name}/learning_rate"] = plan.optimizer.learning_rate
        if self._gradients is not None:
            for gradient, variable in pairs:
                self._gradients[f"{update.name}/{variable.path}"] = gradient
        return metrics
