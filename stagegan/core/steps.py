"""Stage step functions: one `tf.function` per stage, traced once, whatever order stages run in.

A stage step runs the stage's updates:

* `sequential`: the updates run one after another, each drawing its own global batch.
  `repeat: k` runs an update k times per stage step (unrolled: k batches, k applies).
* `simultaneous`: one global batch and one forward pass per replica; every update's loss is
  differentiated with respect to its own variables, and all updates are applied together
  after all gradients are computed.

`every: n` runs an update only on stage steps divisible by n (`gated`: a `tf.cond` around a
sequential update, a mask over a simultaneous one), so no step retraces. The step takes the
stage step as an int64 tensor, so one trace serves every step.

Every backend runs through one interface (`stagegan.core.replicas`): `compute` runs the replicas
and averages their gradients, `apply` applies an update. The NaN/Inf guard and the loss scale
wrap each application (`stagegan.core.guard.GuardedApply`).

A step returns a `StepOutput`: the metrics (`<update>/<term>`, `/loss`, `/grad_norm`,
`/learning_rate` under a schedule, `/loss_scale` under mixed precision; NaN on steps an
update does not run), a `GuardResult` per update, and, when asked, the applied gradients.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import tensorflow as tf
from keras.optimizers.schedules import LearningRateSchedule

from stagegan.core.guard import GuardResult
from stagegan.core.replicas import weighted_loss
from stagegan.errors import ConfigError

log = logging.getLogger("stagegan")


class StepOutput(NamedTuple):
    """What a stage step returns."""

    metrics: dict  # {name: float32 scalar}
    guard: dict  # {update name: GuardResult}
    gradients: dict  # {"<update>/<variable path>": averaged gradient}; empty unless asked


@dataclass(frozen=True)
class UpdatePlan:
    """An update bound to real objects.

    Attributes:
        update: the `config.Update`.
        variables: its matched variables.
        optimizer: its built optimizer.
        guard: its `guard.GuardedApply` (the NaN/Inf guard and the loss scale).
        shared: whether the optimizer is shared with other updates.
        state: the non-trainable variables of the networks it trains (BatchNormalization
            statistics): the only state its forward passes may write.
        after_apply: state to update after each application (spectral norm's power
            iteration, see `stagegan.core.layers.power_iteration_hook`), or None.
        monitors: the task's monitor terms of its loss terms (`Task.monitor_terms`).
    """

    update: object
    variables: tuple
    optimizer: object
    guard: object
    shared: bool = False
    state: tuple = ()
    after_apply: object = None
    monitors: tuple = ()

    @property
    def terms(self):
        """The loss terms it trains on."""
        return tuple(term for term, _ in self.update.loss)

    @property
    def reported(self):
        """What its replicas compute and average: the loss terms, then the task's monitors
        of them (`Task.monitor_terms`: logged, never trained on)."""
        return self.terms + self.monitors

    def metric_names(self):
        name = self.update.name
        names = [f"{name}/{term}" for term in self.reported]
        if len(self.terms) > 1:
            names.append(f"{name}/loss")
        names.append(f"{name}/grad_norm")
        if isinstance(self.optimizer._learning_rate, LearningRateSchedule):
            names.append(f"{name}/learning_rate")
        if self.guard.loss_scale is not None:
            names.append(f"{name}/loss_scale")
        return names


@dataclass(frozen=True)
class TracedUpdate:
    """What tracing found out about an update: which variables get a gradient."""

    plan: UpdatePlan
    variables: tuple  # paths of the variables that get a gradient
    dropped: tuple  # paths of those that get none, left unchanged


class StageStep:
    """The compiled step of one stage.

    Args:
        stage: the `config.Stage` record.
        plans: one `UpdatePlan` per update, in order.
        draw_batch: `() -> dict`, one global batch (real data and random inputs), drawn on the
            variable device so the draw does not depend on the number of replicas.
        compute_terms: `(shard, terms) -> {term: scalar}`, one replica's forward pass.
        replicas: the `replicas.Replicas` that run it.
        global_step: the run's int64 step counter, incremented by every stage step.
        after_step: optional `(global_step) -> None`, traced in after the increment (the
            generator EMA update).
        augmenter: the stage's `augment.Augmenter`, or None. Its p and r_t are logged
            (`augment/p`, `augment/rt`), and every applied update that reports
            `d_real_accuracy` (a discriminator update) feeds its adaptive p.
        observe: optional `(terms, applied) -> None`, traced in after each update's
            application on the variable device, with its averaged terms
            (`regularisers.observe`).
        before_step: optional `(stage_step) -> None`, traced in first on the variable device
            (`Task.begin_step`: progressive growing's alpha).
    """

    def __init__(
        self,
        stage,
        plans,
        draw_batch,
        compute_terms,
        replicas,
        global_step,
        after_step=None,
        augmenter=None,
        observe=None,
        before_step=None,
    ):
        self.stage = stage
        self.plans = tuple(plans)
        self.draw_batch = draw_batch
        self.compute_terms = compute_terms
        self.replicas = replicas
        self.global_step = global_step
        self.after_step = after_step
        self.augmenter = augmenter
        self.observe = observe
        self.before_step = before_step
        self.trace_count = 0
        self.gradient_trace_count = 0  # traces of the variant that also returns gradients
        self.traced = {}  # update name -> TracedUpdate, filled by tracing
        self.function = tf.function(self._step, autograph=False)
        # TensorFlow counts traces per Python code object, so every stage's one trace (and
        # its histogram variant) adds up to its "frequent retracing" warning; the trace
        # counts are checked by the tests instead (as Keras does for its step functions).
        self.function._omit_frequent_tracing_warning = True

    def __call__(self, stage_step, with_gradients=False):
        """Run stage step `stage_step` (an int); returns a `StepOutput` of tensors. With
        `with_gradients` (for histograms) it holds the applied averaged gradients too; that
        variant is traced separately and does exactly the same step."""
        if not self.trace_count:
            self.trace()
        args = (tf.constant(stage_step, tf.int64), with_gradients)
        coordinator = self.replicas.coordinator
        if coordinator is None:
            return self.function(*args)
        # `parameter_server`: queued for the next free worker; read when first needed.
        return scheduled_output(coordinator.schedule(self.function, args=args))

    def trace(self):
        """Trace now (once): logs dropped variables, raises an update with no gradient."""
        self.function.get_concrete_function(tf.TensorSpec([], tf.int64))
        for plan in self.plans:
            traced = self.traced[plan.update.name]
            update = plan.update
            if not traced.variables:
                loss = ", ".join(f"{t}: {w:g}" for t, w in update.loss)
                raise ConfigError(
                    update.key,
                    f"no variable gets a gradient from loss {{{loss}}} in stage "
                    f"{self.stage.name!r}, update {update.name!r}: the loss does not depend "
                    f"on {', '.join(update.train)}",
                )
            if traced.dropped:
                log.info(
                    "stage %r, update %r: %d variable(s) get no gradient from loss %s and are "
                    "left unchanged: %s",
                    self.stage.name,
                    update.name,
                    len(traced.dropped),
                    "+".join(plan.terms),
                    ", ".join(traced.dropped),
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
        gradients = {} if with_gradients else None
        if self.before_step is not None:
            with tf.device(self.replicas.variables):
                self.before_step(stage_step)
        if self.stage.mode == "sequential":
            outputs = [self._sequential(plan, stage_step, gradients) for plan in self.plans]
        else:
            outputs = self._simultaneous(stage_step, gradients)
        with tf.device(self.replicas.variables):
            self.global_step.assign_add(1)
            if self.after_step is not None:
                self.after_step(self.global_step)
        metrics, guard = {}, {}
        for plan, (update_metrics, result) in zip(self.plans, outputs, strict=True):
            metrics.update(update_metrics)
            guard[plan.update.name] = result
        if self.augmenter is not None:
            with tf.device(self.replicas.variables):
                metrics.update(self.augmenter.metrics())
        return StepOutput(metrics, guard, gradients or {})

    def _sequential(self, plan, stage_step, gradients):
        def run(active):
            del active  # inside the gate's tf.cond
            skipped, detail = [], None
            for _ in range(plan.update.repeat):
                with tf.device(self.replicas.variables):
                    batch = self.draw_batch()
                (averaged,) = self._compute([plan], batch)
                # No tensors out of a tf.cond: gradients only from updates that always run.
                metrics = self._metrics(plan, averaged, gradients if always else None)
                skip, metrics = self._apply(plan, averaged, metrics)
                self._observe(averaged, tf.logical_not(skip))
                skipped.append(tf.cast(skip, tf.int32))
                detail = averaged.detail if detail is None else detail & averaged.detail
            with tf.device(self.replicas.variables):
                return metrics, plan.guard.result(tf.add_n(skipped), detail)

        always = plan.update.every == 1
        return gated(plan.update, stage_step, run, lambda: self._idle(plan), lazy=True)

    def _simultaneous(self, stage_step, gradients):
        with tf.device(self.replicas.variables):
            batch = self.draw_batch()
        computed = self._compute(self.plans, batch)
        # Every update's metrics and gradients come from the same pre-update weights ...
        metrics = [
            self._metrics(p, a, gradients) for p, a in zip(self.plans, computed, strict=True)
        ]
        outputs = []
        for plan, averaged, update_metrics in zip(self.plans, computed, metrics, strict=True):
            # ... and only then are they all applied.
            def run(active, plan=plan, averaged=averaged, update_metrics=update_metrics):
                skip, update_metrics = self._apply(plan, averaged, update_metrics, active)
                applied = tf.logical_not(skip)
                self._observe(averaged, applied if active is None else applied & active)
                with tf.device(self.replicas.variables):
                    result = plan.guard.result(tf.cast(skip, tf.int32), averaged.detail, active)
                return update_metrics, result

            outputs.append(
                gated(plan.update, stage_step, run, lambda plan=plan: self._idle(plan), lazy=False)
            )
        return outputs

    def _compute(self, plans, batch):
        scales = [plan.guard.scale() for plan in plans]
        if all(scale is None for scale in scales):
            scales = None
        computed = self.replicas.compute(
            plans, batch, self._compute_terms, any(p.guard.guarded for p in plans), scales
        )
        for plan, averaged in zip(plans, computed, strict=True):
            self.traced[plan.update.name] = TracedUpdate(
                plan,
                tuple(v.path for v in averaged.variables),
                tuple(v.path for v in averaged.dropped),
            )
        return computed

    def _apply(self, plan, averaged, metrics, active=None):
        """Apply through the update's guard: `(skipped, metrics)`."""
        with tf.device(self.replicas.variables):
            apply = lambda: self.replicas.apply(plan, averaged)
            skip = plan.guard.apply(apply, averaged.detail, active)
            if plan.guard.loss_scale is not None:
                metrics = {**metrics, f"{plan.update.name}/loss_scale": plan.guard.scale()}
        return skip, metrics

    def _observe(self, averaged, applied):
        """After an update's application: its averaged terms to `observe` (LeCam's averages),
        and a discriminator update's `d_real_accuracy` to the adaptive augmentation."""
        with tf.device(self.replicas.variables):
            if self.observe is not None:
                self.observe(averaged.terms, applied)
            if self.augmenter is not None and "d_real_accuracy" in averaged.terms:
                accuracy = averaged.terms["d_real_accuracy"]
                self.augmenter.observe(accuracy, applied, self.stage.batch_size)

    def _idle(self, plan):
        """An update's output on a step it does not run: NaN metrics, skipped -1."""
        metrics = {name: tf.constant(float("nan")) for name in plan.metric_names()}
        shape = [self.replicas.count, len(plan.terms) + 1]
        with tf.device(self.replicas.variables):
            in_a_row = plan.guard.in_a_row.read_value()
        return metrics, GuardResult(tf.constant(-1, tf.int32), in_a_row, tf.ones(shape, tf.bool))

    def _compute_terms(self, shard, terms):
        values = self.compute_terms(shard, terms)
        missing = [t for t in terms if t not in values]
        if missing:
            raise RuntimeError(f"task returned no value for loss terms {missing}")
        return {t: tf.cast(values[t], tf.float32) for t in terms}

    def _metrics(self, plan, averaged, gradients=None):
        """An update's metrics from its averaged terms and gradients; with `gradients` (a
        dict), the applied gradients are collected into it."""
        update, terms = plan.update, averaged.terms
        with tf.device(self.replicas.variables):
            metrics = {f"{update.name}/{term}": value for term, value in terms.items()}
            if len(update.loss) > 1:
                metrics[f"{update.name}/loss"] = weighted_loss(terms, update.loss)
        # Where the averaged gradients are (a replica's device under tf.distribute): only
        # the norm, a scalar, goes to the host.
        metrics[f"{update.name}/grad_norm"] = tf.linalg.global_norm(list(averaged.gradients))
        if isinstance(plan.optimizer._learning_rate, LearningRateSchedule):
            with tf.device(self.replicas.variables):
                # The rate this application uses: the schedule at the optimizer's iteration.
                metrics[f"{update.name}/learning_rate"] = plan.optimizer.learning_rate
        if gradients is not None:
            for gradient, variable in zip(averaged.gradients, averaged.variables, strict=True):
                gradients[f"{update.name}/{variable.path}"] = gradient
        return metrics


class Fetched(Mapping):
    """One field of a `StepOutput` that a worker computes (`parameter_server`): reading it
    waits for that step and fetches its values (numpy) from the worker."""

    def __init__(self, remote, field, cache):
        self.remote, self.field, self.cache = remote, field, cache

    def _values(self):
        if not self.cache:  # once per step, shared by its fields
            self.cache.append(self.remote.fetch())
        return getattr(self.cache[0], self.field)

    def __getitem__(self, key):
        return self._values()[key]

    def __iter__(self):
        return iter(self._values())

    def __len__(self):
        return len(self._values())


def scheduled_output(remote):
    """The `StepOutput` of a step scheduled on a worker (`remote`: its `RemoteValue`), each
    field fetched when first read, so unread steps do not wait for one another."""
    cache = []
    return StepOutput(*(Fetched(remote, field, cache) for field in StepOutput._fields))


def gated(update, stage_step, run, idle, lazy):
    """`every: n`, the one implementation: `run(active)` on stage steps divisible by n, and
    `idle()`'s output (same structure) on the others.

    `lazy` (a sequential update) puts `run` in a `tf.cond`, so inactive steps draw no batch
    and compute nothing. Otherwise (a simultaneous update, whose forward pass is shared)
    `run(active)` always runs and must apply only where `active`; its outputs are masked.
    """
    if update.every == 1:
        return run(None)
    active = tf.equal(stage_step % update.every, 0)
    if lazy:
        return tf.cond(active, lambda: run(None), idle)
    return tf.nest.map_structure(lambda a, b: tf.where(active, a, b), run(active), idle())
