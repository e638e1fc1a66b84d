"""The trainer: binds a validated config to real networks, optimizers and step functions.

trainer = Trainer(load_config("mog_ring"))   # builds and checks everything
trainer.trace()                              # traces every stage once (finds None grads)
train(trainer, run_dir)                      # the loop: steps, logs, checkpoints
"""

import logging
import re
import time
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from stagegan.checkpoints import CheckpointStore
from stagegan.ema import Ema
from stagegan.errors import ConfigError
from stagegan.optimizers import make_optimizer
from stagegan.schedule import Schedule
from stagegan.steps import StageStep, UpdatePlan
from stagegan.tasks import make_task
from stagegan.tasks.base import RandomStreams
from stagegan.towers import resolve_devices
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
        self.devices = resolve_devices(config.devices, config.batch_size)
        keras.utils.set_random_seed(config.seed)
        options = {"data": config.data, "model": config.model, "loss": config.loss}
        with tf.device(self.devices.variables):
            self.rngs = RandomStreams(config.seed)
            self.task = make_task(config.task, options, self.rngs)
            self.task.batch_size = config.batch_size
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
        draw = lambda: self.task.batch(config.batch_size)
        self.stage_steps = []
        for stage in config.stages:
            plans = [
                UpdatePlan(
                    update=update,
                    variables=tuple(selections[update.key]),
                    optimizer=self.optimizers[update.optimizer],
                    shared=update.optimizer in config.shared,
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
                )
            )
        self.checkpoint = tf.train.Checkpoint(**self.trackables())

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
            optimizer = make_optimizer(spec, where, name=slug(key))
            with tf.device(self.devices.variables):
                optimizer.build(unique)
            optimizers[key] = optimizer
        return optimizers

    def trackables(self):
        """The objects a checkpoint holds, by stable names.

        Every network variable is also listed at the top level under its Keras path with `:`
        for `/` (`generator:hidden:kernel`). TensorFlow stores a variable under its shortest
        object path, so this keeps checkpoint keys readable (`tf.train.list_variables`).
        """
        objects = {"global_step": self.global_step}
        objects.update({v.path.replace("/", ":"): v for v in self.variables})
        objects.update({f"network_{scope}": net for scope, net in self.networks.items()})
        objects.update({f"optimizer_{slug(key)}": opt for key, opt in self.optimizers.items()})
        objects.update(self.rngs.trackables())
        objects.update(self.task.trackables())
        if self.ema is not None:
            objects.update(self.ema.trackables())
        return objects

    def trace(self):
        """Trace every stage's step function once; raises what tracing found wrong."""
        for stage_step in self.stage_steps:
            stage_step.trace()

    @property
    def step_count(self):
        """Stage steps completed so far (the global step)."""
        return int(self.global_step.numpy())

    def step(self, position):
        """Run the step at `position` (a `schedule.Position`); returns scalar metric tensors.

        The caller walks positions from `step_count` (the step function advances it).
        """
        return self.stage_steps[position.stage_index](position.stage_step)

    def sample(self, inputs, ema=True):
        """The task's samples for `inputs`, from the EMA weights when the run keeps an EMA
        (and `ema` is True), else from the live weights."""
        if self.ema is None or not ema:
            return self.task.sample(inputs)
        with self.ema.swapped():
            return self.task.sample(inputs)

    def trace_counts(self):
        return {s.stage.name: s.trace_count for s in self.stage_steps}


def slug(key):
    """Checkpoint-safe optimizer key: `stages[0].updates[1]` -> `stages_0_updates_1`."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


@dataclass
class _Meter:
    """Throughput since the last log line."""

    start: float
    steps: int = 0
    examples: int = 0

    def rates(self, now):
        elapsed = max(now - self.start, 1e-9)
        return self.examples / elapsed, elapsed / max(self.steps, 1)


def train(trainer, run_dir, stop_after=None):
    """Run the schedule from the trainer's current global step to the end.

    Checkpoints go to `run_dir/checkpoints`: every `checkpoint.every` steps (the newest `keep`
    stay), at the end of every stage (never rotated away), and at the end of the run.

    Args:
        trainer: a built `Trainer`.
        run_dir: the run folder (a `pathlib.Path`).
        stop_after: stop after this many steps (for tests); None runs to the end.

    Returns:
        The last logged metrics, as floats.
    """
    config = trainer.config
    schedule = trainer.schedule
    store = CheckpointStore(run_dir / "checkpoints", trainer.checkpoint, config.checkpoint.keep)
    start = trainer.step_count
    meter = _Meter(time.perf_counter())
    last = {}
    for position in schedule.positions(start):
        stage = schedule.stages[position.stage_index]
        stage_step = trainer.stage_steps[position.stage_index]
        if position.stage_step == 0 or position.global_step == start:
            log.info(
                "stage %d/%d %r: %s, %d steps, updates: %s",
                position.stage_index + 1,
                len(schedule.stages),
                stage.name,
                stage.mode,
                stage.steps,
                ", ".join(u.name for u in stage.updates),
            )
        metrics = trainer.step(position)
        done = position.global_step + 1
        meter.steps += 1
        meter.examples += stage_step.batches_per_step(position.stage_step) * config.batch_size
        stage_done = done == schedule.stage_end(position.stage_index)
        if done % config.log.every == 0 or stage_done:
            last = {k: float(v) for k, v in metrics.items() if not np.isnan(float(v))}
            examples_per_sec, sec_per_step = meter.rates(time.perf_counter())
            values = " ".join(f"{k}={v:.4f}" for k, v in last.items())
            log.info(
                "[%s] step %d/%d (stage %d/%d) %s | %.0f ex/s %.4f s/step",
                stage.name,
                done,
                schedule.total_steps,
                position.stage_step + 1,
                stage.steps,
                values,
                examples_per_sec,
                sec_per_step,
            )
            meter = _Meter(time.perf_counter())
        tags = []
        if stage_done:
            tags.append(f"stage_end:{stage.name}")
            if done == schedule.total_steps:
                tags.append("final")
        elif config.checkpoint.every and done % config.checkpoint.every == 0:
            tags.append("periodic")
        if tags:
            path = store.save(done, tags)
            if stage_done:
                log.info("checkpoint %s (%s)", path, ", ".join(tags))
        if stop_after is not None and done - start >= stop_after:
            break
    return last
