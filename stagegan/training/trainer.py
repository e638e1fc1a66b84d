"""The trainer: binds a validated config to real networks, optimizers and step functions.

trainer = Trainer(load_config("mog_ring"))   # builds and checks everything
trainer.trace()                              # traces every stage once (finds None grads)
train(trainer, run_dir)                      # the loop (training.loop): steps, logs, checkpoints

`Trainer.__init__` runs small builders, each returning a record: the placement
(`stagegan.core.placement`), the model (task, networks, variables), the updates (variable
optimizers, guards) and the stage steps.
"""

import contextlib
import functools
import logging
from dataclasses import dataclass

import keras
import tensorflow as tf

from stagegan.core import regularisers
from stagegan.core.ema import Ema
from stagegan.core.guard import Guard, GuardedApply
from stagegan.core.layers import power_iteration_hook
from stagegan.core.optimizers import make_optimizer
from stagegan.core.placement import CHIEF_DEVICE, resolve_placement
from stagegan.core.precision import LossScale, cpu_warning, dtype_policy, loss_scaled, policy_of
from stagegan.core.replicas import is_rng_state, own_gradient_reduction
from stagegan.core.schedule import Schedule
from stagegan.core.staging import Staging, to_replica_floats
from stagegan.core.steps import StageStep, UpdatePlan
from stagegan.core.until import check_metrics
from stagegan.core.variables import (
    check_partition,
    network_key,
    optimizer_key,
    scope_of,
    select_variables,
    slug,
)
from stagegan.errors import ConfigError
from stagegan.evaluation import registry
from stagegan.evaluation.registry import settle as settle_metrics
from stagegan.runfolder.samples import chunk_size
from stagegan.tasks import make_task
from stagegan.tasks.base import RandomStreams

log = logging.getLogger("stagegan")

# `parameter_server`: steps queued per worker before the chief waits for them all.
IN_FLIGHT = 2


@dataclass(frozen=True)
class Model:
    """What `build_model` returns: the task and its networks, built under the placement."""

    task: object
    rngs: object  # tasks.base.RandomStreams
    networks: dict  # {scope: keras.Model}
    variables: tuple  # every trainable variable, in network order
    precision: object  # the mixed-precision policy name, or None
    global_step: tf.Variable


@dataclass(frozen=True)
class Updates:
    """What `build_updates` returns: every update bound to variables and optimizers."""

    optimizers: dict  # optimizer key -> built Keras optimizer
    loss_scales: dict  # optimizer key -> precision.LossScale (mixed precision only)
    in_a_row: dict  # update name -> the guard's checkpointed counter
    plans: tuple  # per stage, a tuple of steps.UpdatePlan


class Trainer:
    """Everything a run needs, built and validated before the first step.

    Args:
        config: a `config.RunConfig`.
        ends: `{stage index: steps run}` of stages that ended on their `until` (a resume).
        until_state: the `until` checks' state at the checkpoint resumed from.
        recorded_clusters: the clusters the run found before (`data.labels: clusters`; read
            from its folder by `run.reading.read_clusters`), or None: a new run finds its own.
        optimizer_state: False for a trainer that only samples or evaluates
            (`run.reading.restore_run`): the optimizers hold no slots (Adam's two per weight,
            twice the networks' memory), and a checkpoint read leaves theirs unread.

    Raises:
        ConfigError: an unknown task or loss term, a pattern that matches nothing, bad
            optimizer options, devices that do not exist, overlapping updates in a
            simultaneous stage.
    """

    def __init__(
        self, config, ends=None, until_state=None, recorded_clusters=None, optimizer_state=True
    ):
        self.config = config
        self.until_state = until_state
        if config.deterministic:
            tf.config.experimental.enable_op_determinism()
        self.placement = resolve_placement(config.devices, config.batch_sizes)
        self.multi_worker = config.devices.strategy == "multi_worker"
        self.in_flight = 0  # steps scheduled on workers and not waited for
        keras.utils.set_random_seed(config.seed)
        model = build_model(config, self.placement, recorded_clusters)
        self.task, self.rngs, self.networks = model.task, model.rngs, model.networks
        self.variables, self.global_step = list(model.variables), model.global_step
        # every `mode: auto` resolved from its metric's declaration; what evaluations add
        config, self.added_metrics = settle_metrics(config, self.task)
        self.config = config
        self.ema = None
        if config.ema is not None:
            mirrored = self.placement.backend in ("mirrored", "multi_worker")
            strategy = self.placement.strategy if mirrored else None
            self.ema = Ema(config.ema, self.networks, self.placement.variables, strategy)
        self.schedule = Schedule(config.stages, ends)
        self.updates = build_updates(config, model, self.placement, optimizer_state)
        check_metrics(config.stages, self.updates.plans)
        self.optimizers, self.loss_scales = self.updates.optimizers, self.updates.loss_scales
        self.augmenters = build_augmenters(config, self.task, self.placement)
        # One staged batch for each size the stages draw (outside the strategy's scope:
        # plain variables), or none.
        self.stagings = {}
        if "staged" in self.task.capabilities:
            for size in dict.fromkeys(config.batch_of(stage) for stage in config.stages):
                # `task.real_batch` looked up when traced (a benchmark may replace it).
                fetch = lambda size=size: converted(self.task.real_batch)(size)
                name = "" if size == config.batch_size else f"b{size}_"
                self.stagings[size] = Staging(fetch, self.placement.variables, name)
        replicas = self.placement.make_replicas(self.state_variables)
        after_step = self.ema.update if self.ema is not None else None
        self.stage_steps = [
            StageStep(
                stage,
                plans,
                *self.stage_inputs(stage),
                replicas,
                self.global_step,
                after_step,
                augmenter=self.augmenter_of(stage),
                observe=functools.partial(regularisers.observe, self.task.context),
                before_step=lambda stage_step, stage=stage: self.task.begin_step(stage, stage_step),
            )
            for stage, plans in zip(config.stages, self.updates.plans, strict=True)
        ]
        self.guard = Guard(config.guard, self.placement.labels)
        self.checkpoint = tf.train.Checkpoint(**self.trackables())

    def augmenter_of(self, stage):
        """The `augment.Augmenter` of a stage's `augment:` section, or None."""
        return None if stage.augment is None else self.augmenters[stage.augment.key]

    def stage_inputs(self, stage):
        """A stage's `(draw_batch, compute_terms)`: the task's batch (its real part staged a
        step ahead for a task with "staged" capabilities) and losses (on each replica's shard, its
        uint8 images converted to float there), with the stage's augmentation (its random
        numbers drawn with the batch, its ops applied to every image the discriminator sees,
        through `task.context.augmenter` while the step traces).

        The step functions trace without AutoGraph (stagegan's own code has no tensor-
        dependent Python branches, and converting it, the optimizers and Keras tripled the
        trace time); the task's methods are converted, so they may use Python `if`/`for` over
        tensors as in any tf.function.
        """
        batch, losses = converted(self.task.batch), converted(self.task.losses)
        size, task = self.config.batch_of(stage), self.task
        staging = self.stagings.get(size)
        augmenter = self.augmenter_of(stage)

        def draw():
            drawn = batch(size) if staging is None else batch(size, real=staging.next())
            if augmenter is not None:
                drawn.update(augmenter.draw(self.rngs.augment, size))
            return drawn

        def compute(shard, terms):
            task.context.augmenter, task.context.stage = augmenter, stage
            try:
                return losses(to_replica_floats(shard), terms)
            finally:
                task.context.augmenter = task.context.stage = None

        return draw, compute

    def state_variables(self):
        """Every network's non-trainable variables (BatchNorm statistics, spectral-norm
        vectors, the seeds of random layers)."""
        return [v for net in self.networks.values() for v in net.non_trainable_variables]

    def term_state(self, terms):
        """The checkpointed state of loss terms `terms` (`regularisers.term_state`)."""
        return regularisers.term_state(self.task.context, terms)

    def trackables(self):
        """The objects a checkpoint holds, by stable names.

        Every network variable, trainable or not, is also listed at the top level under its
        Keras path with `:` for `/` (`generator:hidden:kernel`, `generator:bn0:moving_mean`).
        TensorFlow stores a variable under its shortest object path, so this keeps checkpoint
        keys readable (`tf.train.list_variables`).
        """
        objects = {"global_step": self.global_step}
        state = self.state_variables()
        objects.update({v.path.replace("/", ":"): v for v in [*self.variables, *state]})
        objects.update({network_key(scope): net for scope, net in self.networks.items()})
        objects.update({optimizer_key(key): opt for key, opt in self.optimizers.items()})
        objects.update(self.rngs.trackables())
        for key, scale in self.loss_scales.items():
            objects.update(scale.trackables(slug(key)))
        for name, counter in self.updates.in_a_row.items():
            objects[f"guard_in_a_row_{slug(name)}"] = counter
        objects.update(self.task.trackables())
        for staging in self.stagings.values():
            objects.update(staging.trackables())
        objects.update(self.term_state(self.config.used_terms()))  # LeCam's averages
        if self.ema is not None:
            objects.update(self.ema.trackables())
        for augmenter in self.augmenters.values():
            objects.update(augmenter.trackables())
        return objects

    def rollback_trackables(self):
        """The checkpointed objects that a rollback to an earlier checkpoint (`until:
        {restore: best}`) restores: the networks' variables, optimizers, loss scales, the EMA
        the augmentation state and the loss terms' (LeCam's averages, which describe the
        discriminator restored). What the run moves on with stays: the global step, the
        random streams, the task's own objects (its data position) and the guard's
        counters."""
        moving_on = {"global_step", *self.rngs.trackables(), *self.task.trackables()}
        for staging in self.stagings.values():  # the staged batch is part of the data position
            moving_on.update(staging.trackables())
        return {
            name: obj
            for name, obj in self.trackables().items()
            if name not in moving_on and not name.startswith("guard_in_a_row_")
        }

    def trace(self, from_step=0):
        """Trace the step function of every stage not finished at global step `from_step`
        (a resumed run skips the stages behind it); raises what tracing found wrong."""
        first = self.schedule.position(from_step).stage_index if from_step else 0
        for stage_step in self.stage_steps[first:]:
            stage_step.trace()

    @property
    def step_count(self):
        """Stage steps completed so far (the global step)."""
        self.join()
        return int(self.global_step.numpy())

    def join(self):
        """Wait for every step scheduled on a worker (`parameter_server`) to finish: a
        worker's error is raised here. Nothing to wait for on the other backends."""
        if self.placement.coordinator is not None:
            self.placement.coordinator.join()
            self.in_flight = 0

    def step(self, position, with_gradients=False, check=True):
        """Run the step at `position` (a `schedule.Position`); returns its `steps.StepOutput`.

        The caller walks positions from `step_count` (the step function advances it). The
        NaN/Inf guard acts here: a skipped update is logged, and `GuardStop` is raised when
        the policy says stop. With `check=False` the guard's results are only collected
        (nothing is read from the device); `guard.flush()` acts on them later.
        """
        stage_step = self.stage_steps[position.stage_index]
        output = stage_step(position.stage_step, with_gradients)
        coordinator = self.placement.coordinator
        if coordinator is not None:  # at most IN_FLIGHT steps a worker queued at once:
            self.in_flight += 1  # bounds staleness, and what a signal waits for
            if self.in_flight >= IN_FLIGHT * self.placement.workers:
                self.join()
        act = self.guard.check if check else self.guard.collect
        act(stage_step.stage, position.global_step + 1, output.guard)
        return output

    def nonfinite_variables(self):
        """Paths of checkpointed float variables holding NaN or Inf: network weights and
        state, the EMA, optimizer state. Checked before every checkpoint is written."""
        named = [(v.path, v) for v in [*self.variables, *self.state_variables()]]
        if self.ema is not None:
            named += list(self.ema.trackables().items())
        for optimizer in self.optimizers.values():
            named += [(getattr(v, "path", v.name), v) for v in optimizer.variables]
        bad = []
        with tf.device(self.placement.variables):
            for path, variable in named:
                if tf.as_dtype(variable.dtype).is_floating:
                    if not bool(tf.reduce_all(tf.math.is_finite(variable))):
                        bad.append(path)
        return bad

    def sample(self, inputs, ema=True):
        """The task's samples for `inputs`, from the EMA weights when the run keeps an EMA
        (and `ema` is True), else from the live weights."""
        with self.sampling_weights(ema):
            return self.task.sample(inputs)

    def sample_outputs(self, inputs, ema=True):
        """The task's named output arrays for `inputs` (see `Task.sample_outputs`)."""
        with self.sampling_weights(ema):
            return self.task.sample_outputs(inputs)

    def sampling_weights(self, ema=True):
        """A context in which the networks hold the weights to sample from."""
        if self.ema is None or not ema:
            return contextlib.nullcontext()
        return self.ema.swapped()

    def trace_counts(self):
        return {s.stage.name: s.trace_count for s in self.stage_steps}


def converted(method):
    """A task's method (or any callable) converted by AutoGraph (see `Trainer.__init__`); the
    callable itself when it is stagegan's own (no tensor-dependent Python branches: converting
    the built-in tasks, their augmentation and losses took half of a step's trace time), or
    when AutoGraph cannot convert it (no source code). A user's task is converted, its
    overrides of built-in methods included."""
    function = getattr(method, "__func__", method)
    if getattr(function, "__module__", "").startswith("stagegan."):
        return method
    try:
        graph_function = tf.autograph.to_graph(function)
    except Exception:  # noqa: BLE001 - AutoGraph raises several kinds for unconvertible code
        return method
    owner = getattr(method, "__self__", None)
    if owner is None:
        return graph_function
    return lambda *args, **kwargs: graph_function(owner, *args, **kwargs)


def build_model(config, placement, recorded_clusters=None):
    """The task and its networks, on the variable device, under the placement's scope."""
    with tf.device(placement.variables):
        rngs = RandomStreams(config.seed)
        options = {"data": config.data, "model": config.model, "loss": config.loss}
        task = make_task(config.task, options, rngs)
        largest_key, largest = config.largest_batch
        task.context.batch_key, task.context.batch_size = largest_key, largest
        task.context.batch_unit = config.batch_unit
        if recorded_clusters is not None:  # an image task on data.labels: clusters
            task.recorded_clusters = recorded_clusters
        if placement.coordinator is not None:  # the chief reads the data (and checkpoints
            task.context.host = task.context.reader = CHIEF_DEVICE  # a stream's position there)
        task.check(config.stages, config.batch_size, placement.replicas)
        counts = held_counts(config, task)
        counted = task.check_memory(largest, counts, chunk_size(config), batch_key=largest_key)
        # Outside the strategy's scope: the state of loss terms is plain variables here.
        updates = tuple(u for stage in config.stages for u in stage.updates)
        context = task.context
        context.lecam, context.consistency = regularisers.build(task, updates, placement.variables)
        task.prepare(updates, placement.variables)
        precision = policy_of(config.devices.mixed_precision, placement.towers)
        warning = cpu_warning(precision, placement.towers, config.devices.jit)
        if warning:
            log.warning(warning)
        with placement.scope(), dtype_policy(precision):
            networks = task.build()
        if not counted:  # a sample's size is known now (a user's task)
            counts = held_counts(config, task)
            task.check_memory(largest, counts, chunk_size(config), batch_key=largest_key)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    variables = tuple(check_partition(networks))
    return Model(task, rngs, networks, variables, precision, global_step)


def held_counts(config, task):
    """`(key, count)` of the samples a run holds at once: its sample dumps' and in-training
    evaluations' (the task's default count where the config names none)."""
    counts = []
    if config.samples is not None:
        counts.append(("samples.count", config.samples.count or task.sample_count))
    if config.eval is not None:
        usual = registry.usual_count(registry.evaluated(config, task))
        counts.append(("eval.count", config.eval.count or usual))
    return counts


def build_updates(config, model, placement, optimizer_state=True):
    """Every update's variables, optimizer (built on them with `optimizer_state`), guard and
    state, checked."""
    selections = select_all(config, model)
    optimizers = build_optimizers(config, selections, placement, optimizer_state)
    with tf.device(placement.variables):
        loss_scales = {}
        if loss_scaled(config.devices.mixed_precision, model.precision):
            loss_scales = {key: LossScale(slug(key)) for key in optimizers}
        names = dict.fromkeys(u.name for stage in config.stages for u in stage.updates)
        in_a_row = {
            name: tf.Variable(0, dtype=tf.int64, trainable=False, name=f"guard_{slug(name)}")
            for name in names
        }
    checking = config.guard.policy != "off"
    plans = tuple(
        tuple(
            UpdatePlan(
                update=update,
                variables=tuple(selections[update.key]),
                optimizer=optimizers[update.optimizer],
                guard=GuardedApply(
                    checking, in_a_row[update.name], loss_scales.get(update.optimizer)
                ),
                shared=update.optimizer in config.shared,
                state=trained_state(model.networks, selections[update.key]),
                after_apply=power_iteration_hook(model.networks.values(), selections[update.key]),
                monitors=monitors_of(model.task, update),
            )
            for update in stage.updates
        )
        for stage in config.stages
    )
    return Updates(optimizers, loss_scales, in_a_row, plans)


def build_augmenters(config, task, placement):
    """One `augment.Augmenter` per `augment:` section that a stage uses (`{key: ...}`), its
    state on the variable device.

    Raises:
        ConfigError: augmentation on a task whose discriminator does not see images.
    """
    specs = {s.augment.key: s.augment for s in config.stages if s.augment is not None}
    if not specs:
        return {}
    if "augments" not in task.capabilities:
        key = next(iter(specs))
        raise ConfigError(
            key,
            f"task {config.task!r} does not augment its discriminator's inputs (the image "
            "tasks unconditional and completion do); remove augment",
        )
    from stagegan.core.augment import Augmenter

    return {
        key: Augmenter(spec, config.batch_size, placement.variables) for key, spec in specs.items()
    }


def monitors_of(task, update):
    """The task's monitor terms of an update's loss terms (`Task.monitor_terms`)."""
    found = [m for term, _ in update.loss for m in task.monitor_terms.get(term, ())]
    return tuple(dict.fromkeys(found))


def trained_state(networks, variables):
    """The state an update training `variables` may write: the non-trainable variables of
    every network it trains (a variable of it among `variables`), except random number
    generators' seeds, which always advance (see `stagegan.core.replicas`)."""
    scopes = {scope_of(v) for v in variables}
    return tuple(
        v
        for scope, network in networks.items()
        if scope in scopes
        for v in network.non_trainable_variables
        if not is_rng_state(v)
    )


def select_all(config, model):
    """Each update's variables (`update.key -> list`), checked: loss terms the task knows,
    patterns that match, one update per variable in a simultaneous stage."""
    known_terms = tuple(model.task.loss_terms)
    selections = {}
    for stage in config.stages:
        owners = {}
        for update in stage.updates:
            for term, _ in update.loss:
                if known_terms and term not in known_terms:
                    raise ConfigError(
                        f"{update.key}.loss.{term}",
                        f"unknown loss term (task {config.task!r} has: {', '.join(known_terms)})",
                    )
            chosen = select_variables(update.train, model.variables, f"{update.key}.train")
            selections[update.key] = chosen
            if stage.mode == "simultaneous":
                check_one_owner(update, chosen, owners)
    return selections


def check_one_owner(update, chosen, owners):
    """In a simultaneous stage each variable has one update (`owners`: path -> update key)."""
    for variable in chosen:
        if variable.path in owners:
            raise ConfigError(
                f"{update.key}.train",
                f"{variable.path} is also trained by {owners[variable.path]} in this "
                "simultaneous stage; each variable may have one update per step",
            )
        owners[variable.path] = update.key


def build_optimizers(config, selections, placement, build=True):
    """One optimizer per key, built (with `build`) on the union of the variables of the
    updates using it."""
    users = {}
    for stage in config.stages:
        for update in stage.updates:
            users.setdefault(update.optimizer, []).extend(selections[update.key])
    optimizers = {}
    for key, variables in users.items():
        unique = list({id(v): v for v in variables}.values())
        spec = config.optimizers[key]
        where = f"optimizers.{key}" if key in config.shared else f"{key}.optimizer"
        with placement.scope():
            optimizer = make_optimizer(spec, where, name=slug(key))
            if build:
                with tf.device(placement.variables):
                    optimizer.build(unique)
        if placement.strategy is not None:
            own_gradient_reduction(optimizer)
        optimizers[key] = optimizer
    return optimizers


def set_learning_rates(trainer):
    """Give every optimizer the learning rate its config spec names. (A schedule needs
    nothing: it is built from the config and reads the restored iteration count.)"""
    for key, optimizer in trainer.optimizers.items():
        rate = trainer.config.optimizers[key].kwargs().get("learning_rate")
        if isinstance(rate, float | int):
            optimizer.learning_rate.assign(float(rate))
