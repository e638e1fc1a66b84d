"""The trainer: binds a validated config to real networks, optimizers and step functions.

trainer = Trainer(load_config("mog_ring"))   # builds and checks everything
trainer.trace()                              # traces every stage once (finds None grads)
train(trainer, run_dir)                      # the loop: steps, logs, checkpoints
"""

import contextlib
import logging
import math
import re
import signal
import threading
import time
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from stagegan.checkpoints import CheckpointStore
from stagegan.config import check_batch_divides
from stagegan.ema import Ema
from stagegan.errors import ConfigError, GuardStop, Interrupted, PeerLost
from stagegan.layers import power_iteration_hook
from stagegan.optimizers import make_optimizer
from stagegan.precision import LossScale, dtype_policy, policy_name
from stagegan.schedule import Schedule
from stagegan.steps import StageStep, UpdatePlan
from stagegan.strategies import (
    StrategyReplicas,
    make_strategy,
    own_gradient_reduction,
    replica_devices,
)
from stagegan.tasks import make_task
from stagegan.tasks.base import RandomStreams
from stagegan.towers import Devices, resolve_devices
from stagegan.variables import check_partition, select_variables

log = logging.getLogger("stagegan")


class Trainer:
    """Everything a run needs, built and validated before the first step.

    Args:
        config: a `config.RunConfig`.

    Raises:
        ConfigError: an unknown task or loss term, a pattern that matches nothing, bad
            optimizer options, devices that do not exist, overlapping updates in a
            simultaneous stage.
    """

    def __init__(self, config):
        self.config = config
        if config.deterministic:
            tf.config.experimental.enable_op_determinism()
        if config.devices.strategy == "multi_worker":
            # Made before anything else initialises TensorFlow's devices (it must be); it
            # uses every local GPU of each worker, or its CPU, as TensorFlow decides.
            self.strategy = make_strategy("multi_worker", (), config.devices.variables)
            self.devices = Devices(towers=(), variables=config.devices.variables)
        else:
            self.devices = resolve_devices(config.devices, config.batch_size)
            self.strategy = make_strategy(
                config.devices.strategy, self.devices.towers, self.devices.variables
            )
        self.replicas = None
        if self.strategy is not None:
            # The global batch divides across all replicas, of all workers.
            check_batch_divides(config.batch_size, self.strategy.num_replicas_in_sync)
            names = replica_devices(self.strategy, self.devices.towers)
            self.devices = Devices(towers=names, variables=self.devices.variables)
            self.replicas = StrategyReplicas(
                self.strategy, self._state_variables, jit=config.devices.jit
            )
        check_jit(config.devices, self.devices)
        self.multi_worker = config.devices.strategy == "multi_worker"
        keras.utils.set_random_seed(config.seed)
        options = {"data": config.data, "model": config.model, "loss": config.loss}
        with tf.device(self.devices.variables):
            self.rngs = RandomStreams(config.seed)
            self.task = make_task(config.task, options, self.rngs)
            self.task.batch_size = config.batch_size
            replicas = len(self.devices.towers)
            if self.strategy is not None:  # multi_worker: the replicas of every worker
                replicas = self.strategy.num_replicas_in_sync
            self.task.check_shard(config.batch_size, replicas)
            mixed = config.devices.mixed_precision
            self.precision = policy_name(self.devices.towers) if mixed else None
            if self.precision == "mixed_bfloat16" and not config.devices.jit:
                log.warning(
                    "devices.mixed_precision on CPUs computes in bfloat16, which CPUs run far "
                    "slower than float32 without XLA (measured 8x for the DCGAN pair); "
                    "add devices.jit: true, or leave mixed precision to GPUs"
                )
            with self.variable_scope(), dtype_policy(self.precision):
                self.networks = self.task.build()
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.variables = check_partition(self.networks)
        self.ema = None
        if config.ema is not None:
            self.ema = Ema(config.ema, self.networks, self.devices.variables)
        after_step = self.ema.update if self.ema is not None else None
        self.schedule = Schedule(config.stages)
        selections = self._select_variables()
        self.optimizers = self._build_optimizers(selections)
        self.loss_scales = {}
        if self.precision:
            with tf.device(self.devices.variables):
                self.loss_scales = {key: LossScale(slug(key)) for key in self.optimizers}
        draw = lambda: self.task.batch(config.batch_size)
        self.stage_steps = []
        for stage in config.stages:
            plans = [
                UpdatePlan(
                    update=update,
                    variables=tuple(selections[update.key]),
                    optimizer=self.optimizers[update.optimizer],
                    shared=update.optimizer in config.shared,
                    loss_scale=self.loss_scales.get(update.optimizer),
                    after_apply=power_iteration_hook(
                        self.networks.values(), selections[update.key]
                    ),
                )
                for update in stage.updates
            ]
            self.stage_steps.append(
                StageStep(
                    stage,
                    plans,
                    draw,
                    self.task.losses,
                    self.devices,
                    self.global_step,
                    after_step,
                    guard=config.guard.policy,
                    replicas=self.replicas,
                    jit=config.devices.jit,
                )
            )
        self.guard = Guard(config.guard, self.devices.towers)
        self.checkpoint = tf.train.Checkpoint(**self.trackables())

    def variable_scope(self):
        """Where the networks and optimizers create their variables: the strategy's scope,
        or (`towers`) the current device scope."""
        return self.strategy.scope() if self.strategy else contextlib.nullcontext()

    def _state_variables(self):
        return [v for net in self.networks.values() for v in net.non_trainable_variables]

    def _select_variables(self):
        known_terms = tuple(self.task.loss_terms)
        selections = {}
        for stage in self.config.stages:
            owners = {}
            for update in stage.updates:
                for term, _ in update.loss:
                    if known_terms and term not in known_terms:
                        raise ConfigError(
                            f"{update.key}.loss.{term}",
                            f"unknown loss term (task {self.config.task!r} has: "
                            f"{', '.join(known_terms)})",
                        )
                chosen = select_variables(update.train, self.variables, f"{update.key}.train")
                selections[update.key] = chosen
                if stage.mode == "simultaneous":
                    for variable in chosen:
                        if variable.path in owners:
                            raise ConfigError(
                                f"{update.key}.train",
                                f"{variable.path} is also trained by {owners[variable.path]} "
                                "in this simultaneous stage; each variable may have one update "
                                "per step",
                            )
                        owners[variable.path] = update.key
        return selections

    def _build_optimizers(self, selections):
        """One optimizer per key, built on the union of the variables of the updates using it."""
        users = {}
        for stage in self.config.stages:
            for update in stage.updates:
                users.setdefault(update.optimizer, []).extend(selections[update.key])
        optimizers = {}
        for key, variables in users.items():
            unique = list({id(v): v for v in variables}.values())
            spec = self.config.optimizers[key]
            where = f"optimizers.{key}" if key in self.config.shared else f"{key}.optimizer"
            with self.variable_scope():
                optimizer = make_optimizer(spec, where, name=slug(key))
                with tf.device(self.devices.variables):
                    optimizer.build(unique)
            if self.strategy is not None:
                own_gradient_reduction(optimizer)
            optimizers[key] = optimizer
        return optimizers

    def trackables(self):
        """The objects a checkpoint holds, by stable names.

        Every network variable, trainable or not, is also listed at the top level under its
        Keras path with `:` for `/` (`generator:hidden:kernel`, `generator:bn0:moving_mean`).
        TensorFlow stores a variable under its shortest object path, so this keeps checkpoint
        keys readable (`tf.train.list_variables`).
        """
        objects = {"global_step": self.global_step}
        state = self._state_variables()  # BatchNorm statistics, spectral-norm vectors
        objects.update({v.path.replace("/", ":"): v for v in [*self.variables, *state]})
        objects.update({f"network_{scope}": net for scope, net in self.networks.items()})
        objects.update({f"optimizer_{slug(key)}": opt for key, opt in self.optimizers.items()})
        objects.update(self.rngs.trackables())
        for key, scale in self.loss_scales.items():
            objects.update(scale.trackables(slug(key)))
        objects.update(self.task.trackables())
        if self.ema is not None:
            objects.update(self.ema.trackables())
        return objects

    def trace(self, from_step=0):
        """Trace the step function of every stage not finished at global step `from_step`
        (a resumed run skips the stages behind it); raises what tracing found wrong."""
        first = self.schedule.position(from_step).stage_index if from_step else 0
        for stage_step in self.stage_steps[first:]:
            stage_step.trace()

    @property
    def step_count(self):
        """Stage steps completed so far (the global step)."""
        return int(self.global_step.numpy())

    def step(self, position, with_gradients=False):
        """Run the step at `position` (a `schedule.Position`); returns scalar metric tensors
        (and, `with_gradients`, the applied gradients: see `StageStep.__call__`).

        The caller walks positions from `step_count` (the step function advances it). The
        NaN/Inf guard acts here: a skipped update is logged, and `GuardStop` is raised when
        the policy says stop.
        """
        stage_step = self.stage_steps[position.stage_index]
        metrics = stage_step(position.stage_step, with_gradients)
        flags = {k: metrics.pop(k) for k in list(metrics) if k.startswith(GUARD_PREFIXES)}
        self.guard.check(stage_step.stage, position.global_step + 1, flags)
        return metrics

    def nonfinite_variables(self):
        """Paths of checkpointed float variables holding NaN or Inf: network weights, the
        EMA, optimizer state. Checked before every checkpoint is written."""
        named = [(v.path, v) for v in self.variables]
        if self.ema is not None:
            named += list(self.ema.trackables().items())
        for optimizer in self.optimizers.values():
            named += [(getattr(v, "path", v.name), v) for v in optimizer.variables]
        bad = []
        with tf.device(self.devices.variables):
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


GUARD_PREFIXES = ("guard/", "guard_detail/")


class Guard:
    """Acts on the step function's finiteness flags (see `stagegan.steps`).

    Under `skip`, a skipped update is logged (stage, update, loss term, towers) and recorded
    in `events`; `max_consecutive` steps in a row on which one update was skipped stop the
    run. Under `stop` the first one does. The counts start afresh in a resumed process.

    Args:
        config: a `config.GuardConfig`.
        towers: the tower device names, for messages.
    """

    def __init__(self, config, towers):
        self.config = config
        self.towers = towers
        self.in_a_row = {}  # update name -> steps in a row on which it was skipped
        self.skipped = 0  # applications skipped in this process
        self.events = []  # records for RUN/guard.jsonl; `train` drains them

    def check(self, stage, done, flags):
        """After global step `done` of `stage`; `flags` as the step function returns them.

        Raises:
            GuardStop: the policy is `stop`, or an update was skipped too often in a row.
        """
        if self.config.policy == "off":
            return
        for update in stage.updates:
            count = int(flags[f"guard/{update.name}"])
            if count <= 0:
                if count == 0:
                    self.in_a_row[update.name] = 0
                continue
            in_a_row = self.in_a_row.get(update.name, 0) + 1
            self.in_a_row[update.name] = in_a_row
            self.skipped += count
            detail = np.asarray(flags[f"guard_detail/{update.name}"])
            where = self.describe(update, detail)
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
        """Which loss terms and gradients went non-finite in which towers."""
        terms = [term for term, _ in update.loss]
        found = {}
        for column, name in enumerate([*terms, "gradients"]):
            towers = [i for i in range(detail.shape[0]) if not detail[i, column]]
            if towers:
                found[name] = towers
        parts = []
        for name, towers in found.items():
            what = f"loss term {name}" if name != "gradients" else "gradients"
            devices = ", ".join(f"{i} ({self.towers[i]})" for i in towers)
            parts.append(f"non-finite {what} in tower{'s' if len(towers) > 1 else ''} {devices}")
        return {
            "terms": {k: v for k, v in found.items() if k != "gradients"},
            "gradient_towers": found.get("gradients", []),
            "text": "; ".join(parts) or "non-finite values",
        }


def check_jit(config, devices):
    """`devices.jit` compiles each tower's (replica's) forward and backward pass with XLA, on
    its device. XLA cannot read a variable that lives on another device, so the variables must
    live where the towers compute.

    Raises:
        ConfigError: jit with variables kept apart from the compute devices.
    """
    if not config.jit:
        return
    if config.strategy == "central_storage":
        raise ConfigError(
            "devices.jit",
            "XLA cannot read variables kept on another device, and central_storage keeps them "
            "on devices.variables; use devices.strategy: mirrored",
        )
    apart = [t for t in devices.towers if t != devices.variables]
    if config.strategy == "towers" and apart:
        raise ConfigError(
            "devices.jit",
            f"XLA cannot read variables on {devices.variables} from towers on "
            f"{', '.join(apart)}; use devices.strategy: mirrored (variables on every tower's "
            "device), or one tower on the variable device",
        )


def describe_peer_error(error):
    """One line from TensorFlow's error when a collective operation lost a peer."""
    text = str(getattr(error, "message", error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    aborted = [line for line in lines if line.startswith("Collective ops is aborted by: ")]
    first = aborted[0].split(": ", 1)[1] if aborted else (lines or [type(error).__name__])[0]
    remote = re.search(r"remote target (/job:\S+?)(?: while|$)", text, re.M)
    who = "a worker"
    if remote:
        who = f"worker {remote.group(1).rsplit('task:', 1)[-1]} ({remote.group(1)})"
    return f"lost contact with {who}: {first}"


def slug(key):
    """Checkpoint-safe optimizer key: `stages[0].updates[1]` -> `stages_0_updates_1`."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


@dataclass
class _Meter:
    """Throughput and metrics since the last log line."""

    start: float
    steps: int = 0
    examples: int = 0
    pending: list = field(default_factory=list)  # each step's metric tensors
    carried: dict = field(default_factory=dict)  # {name: [sum, count]} from before a resume

    def rate(self, now):
        return self.examples / max(now - self.start, 1e-9)

    def state(self):
        """`{name: [sum, count]}` over the interval so far, counting the steps in which the
        name's update ran (an update that did not run reports NaN: `every`, an alternation),
        and `[value, -1]` for learning rates (their last value where their update ran). A
        step the NaN guard skipped reports NaN too, and is left out (`guard.jsonl` has it)."""
        out = {name: list(value) for name, value in self.carried.items()}
        for metrics in self.pending:
            for name, tensor in metrics.items():
                value = float(tensor)
                if name.endswith("/learning_rate"):
                    if not math.isnan(value) or name not in out:
                        out[name] = [value, -1]
                elif not math.isnan(value):
                    total, count = out.get(name, [0.0, 0])
                    out[name] = [total + value, count + 1]
                else:
                    out.setdefault(name, [0.0, 0])
        self.carried, self.pending = out, []
        return out

    def means(self):
        """Each metric's mean over the interval (NaN where its update ran in none of its
        steps); learning rates at the last step."""
        return {
            name: total if count < 0 else (total / count if count else float("nan"))
            for name, (total, count) in self.state().items()
        }


def train(trainer, run_dir, stop_after=None, run_name=None):
    """Run the schedule from the trainer's current global step to the end.

    Writes into `run_dir`:
        checkpoints/      every `checkpoint.every` steps (the newest `keep` stay), at the end
                          of every stage (never rotated away), at the end of the run, and
                          when SIGINT or SIGTERM stops it
        metrics.jsonl     one record per logged step (`log.every`, and every stage end)
        tensorboard/      the same scalars, the sample pictures, weight and gradient
                          histograms (`log.histograms`, and every stage end)
        samples/          sample pictures (`samples.every`, and every stage end), manifest
        plots/losses.png  loss curves, redrawn at every stage end
        guard.jsonl       one record per update the NaN/Inf guard skipped

    SIGINT (Ctrl-C) and SIGTERM let the current step finish, write a checkpoint and raise
    `Interrupted`. No checkpoint is ever written with non-finite weights.

    Args:
        trainer: a built (or restored) `Trainer`.
        run_dir: the run folder (a `pathlib.Path`).
        stop_after: stop after this many steps (for tests); None runs to the end.
        run_name: the run folder that messages name, when it is not `run_dir` (a non-chief
            multi-worker worker trains into a temporary folder).

    Returns:
        The last logged metrics, as floats.

    Raises:
        GuardStop: the NaN/Inf guard stopped the run.
        Interrupted: SIGINT or SIGTERM, after the checkpoint was written.
        ConfigError: a file of the run could not be written (a full disk, permissions).
    """
    store = CheckpointStore(
        run_dir / "checkpoints", trainer.checkpoint, trainer.config.checkpoint.keep
    )
    try:
        # Workers of a multi-worker run cannot agree on a step to stop at: there, signals
        # act at once, and a resume starts from the last periodic or stage-end checkpoint.
        with _StopSignals(enabled=not trainer.multi_worker) as signals:
            return _train(trainer, run_dir, store, signals, stop_after)
    except GuardStop as e:
        latest = store.latest()
        last = (
            f"the last checkpoint, {latest['prefix']}, holds finite weights"
            if latest
            else "no checkpoint was written"
        )
        raise GuardStop(f"{e.message}; {last}") from None
    except tf.errors.OpError as e:
        if not trainer.multi_worker:
            raise
        latest = store.latest()
        last = f"the last checkpoint is step {latest['step']}" if latest else "no checkpoint yet"
        raise PeerLost(
            f"{describe_peer_error(e)} at step {trainer.step_count}; {last}; continue with: "
            f"python -m stagegan launch --workers N --resume {run_name or run_dir} (or train "
            "--resume on every worker)"
        ) from None
    except OSError as e:
        latest = store.latest()
        last = f"the last good checkpoint is {latest['prefix']}" if latest else "no checkpoint yet"
        raise ConfigError(
            str(e.filename or run_dir),
            f"cannot write: {e.strerror or e} ({last}; free space or fix permissions, then "
            f"continue with: python -m stagegan train --resume {run_dir})",
        ) from None


def check_evaluation(trainer):
    """The run's in-training `Evaluation` (None without `eval`), with what it needs loaded:
    feature extractors that cannot load, or an `eval.count` larger than the real images,
    fail here, before a run folder exists, not in an hour. Kept on the trainer."""
    from stagegan.evaluation import Evaluation

    config = trainer.config
    if config.eval is None:
        return None
    evaluation = getattr(trainer, "evaluation", None)
    if evaluation is None:
        evaluation = Evaluation(
            trainer,
            None,
            count=config.eval.count,
            seed=config.seed,
            features=config.eval.features,
            features_key="eval.features",
            count_key="eval.count",
        )
        evaluation.check()
        trainer.evaluation = evaluation
    return evaluation


def _train(trainer, run_dir, store, signals, stop_after):
    from stagegan.logs import (
        Progress,
        RunLog,
        append_jsonl,
        plot_losses,
        read_metrics,
        tensorboard_session_start,
    )
    from stagegan.samples import SampleDumper

    config = trainer.config
    schedule = trainer.schedule
    start = trainer.step_count
    evaluation = check_evaluation(trainer)
    if evaluation is not None:
        evaluation.run_dir = run_dir
    if config.log.tensorboard and start == 0 and not (run_dir / "tensorboard").exists():
        tensorboard_session_start(run_dir / "tensorboard", 0)  # see `resume.commit`
    runlog = RunLog(run_dir, config.log.tensorboard)
    dumper = SampleDumper(trainer, run_dir, config.samples) if config.samples else None
    progress = Progress(schedule, config.log.progress, start)
    boundaries = [
        (stage.name, schedule.stage_end(i) - stage.steps) for i, stage in enumerate(schedule.stages)
    ]
    began = time.perf_counter()
    meter = _Meter(began)
    # A resumed run goes on with the log interval it was in (see CheckpointStore.save).
    entry = next((e for e in store.entries() if e["step"] == start), None)
    if entry is not None and start % config.log.every:
        meter.carried = {k: list(v) for k, v in entry.get("log_pending", {}).items()}
    last = {}
    try:
        for position in schedule.positions(start):
            index = position.stage_index
            stage = schedule.stages[index]
            if position.stage_step == 0 or position.global_step == start:
                progress.stage_started(position, resumed=position.stage_step > 0)
            done = position.global_step + 1
            stage_done = done == schedule.stage_end(index)
            every = config.log.histograms
            histograms = config.log.tensorboard and (stage_done or (every and done % every == 0))
            try:
                metrics = trainer.step(position, with_gradients=histograms)
            finally:
                for event in trainer.guard.events:
                    append_jsonl(run_dir / "guard.jsonl", event)
                trainer.guard.events.clear()
            names = [k for k in metrics if k.startswith("gradients/")]
            gradients = {k: metrics.pop(k) for k in names}
            meter.pending.append(metrics)
            meter.steps += 1
            meter.examples += (
                trainer.stage_steps[index].batches_per_step(position.stage_step) * config.batch_size
            )
            if done % config.log.every == 0 or stage_done:
                now = time.perf_counter()
                last = meter.means()
                rate = meter.rate(now)
                record = {
                    "step": done,
                    "stage": stage.name,
                    "stage_step": position.stage_step + 1,
                    "time": round(now - began, 3),
                    "wall_time": round(time.time(), 3),
                    "examples_per_sec": round(rate, 2),
                    **last,
                }
                runlog.scalars(record)
                progress.step(position, done, last, rate)
                last = {k: v for k, v in last.items() if not np.isnan(v)}
                meter = _Meter(now)
            else:
                progress.step(position, done)
            if histograms:
                arrays = {f"weights/{v.path}": v.numpy() for v in trainer.variables}
                arrays.update({k: v.numpy() for k, v in gradients.items()})
                runlog.histograms(done, stage.name, arrays)
            if dumper is not None and dumper.due(done, stage_done):
                _, picture = dumper.dump(done, stage.name)
                runlog.image(done, "samples", picture)
            tags = []
            if stage_done:
                tags.append(f"stage_end:{stage.name}")
                if done == schedule.total_steps:
                    tags.append("final")
            elif config.checkpoint.every and done % config.checkpoint.every == 0:
                tags.append("periodic")
            if signals.received and not tags:
                tags.append("interrupted")
            if tags:
                bad = trainer.nonfinite_variables()
                if bad:
                    raise GuardStop(
                        f"[{stage.name}] step {done}: refusing to write a checkpoint with "
                        f"non-finite values in {', '.join(bad[:3])}"
                        f"{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}"
                    )
                path = store.save(done, tags, {"log_pending": meter.state()})
                if stage_done:
                    log.info("checkpoint %s (%s)", path, ", ".join(tags))
            if signals.received:
                log.info(
                    "%s at step %d: checkpoint %s written; continue with: "
                    "python -m stagegan train --resume %s",
                    signals.name,
                    done,
                    path,
                    run_dir,
                )
                raise Interrupted(f"{signals.name} at step {done}", 128 + signals.received)
            # After the checkpoint: a stage's own end is then a baseline it can find.
            if evaluation is not None and (
                stage_done or (config.eval.every and done % config.eval.every == 0)
            ):
                evaluate_into(evaluation, runlog, done, stage, position, began)
            if stage_done:
                plots = run_dir / "plots"
                plots.mkdir(exist_ok=True)
                plot_losses(
                    read_metrics(runlog.path),
                    boundaries,
                    plots / "losses.png",
                    total_steps=schedule.total_steps,
                )
            if stop_after is not None and done - start >= stop_after:
                break
    finally:
        progress.close()
        runlog.close()
    return last


class _StopSignals:
    """While active, SIGINT and SIGTERM only set `received` (the signal number), so the loop
    can finish its step and write a checkpoint. A second signal acts as usual (the handlers
    are restored after the first). Outside the main thread it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, enabled=True):
        self.received = 0
        self.saved = {}
        self.enabled = enabled

    @property
    def name(self):
        return signal.Signals(self.received).name if self.received else ""

    def _handle(self, signum, frame):
        self.received = signum
        self._restore()

    def _restore(self):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        self.saved = {}

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self.saved[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        self._restore()
        return False


def evaluate_into(evaluation, runlog, done, stage, position, began):
    """Evaluate inside `train`: numbers into metrics.jsonl and TensorBoard, a log line."""
    result = evaluation.run()
    values = {
        f"eval/{k}": v
        for k, v in result["metrics"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    runlog.scalars(
        {
            "step": done,
            "stage": stage.name,
            "stage_step": position.stage_step + 1,
            "time": round(time.perf_counter() - began, 3),
            **values,
        }
    )
    text = " ".join(f"{k[5:]}={v:.4g}" for k, v in values.items())
    log.info("[%s] eval at step %d: %s", stage.name, done, text)
