"""The training loop: `train(trainer, run_dir)` walks the schedule and, around every step,
runs the run's callbacks.

Callbacks have Keras's shape (`Callback`): `on_step_begin(tick)` before a step (a callback
that wants the step's gradients sets `tick.gradients`), `on_step_end(tick)` after it (one that
must stop the run sets `tick.stop`), and `close()`. They share the `Tick` and the loop's
`Logs`; none reads another's fields. They run in one list, in this order:

    MetricsLog    interval means into metrics.jsonl and TensorBoard, the console line or bar
    Histograms    weight and gradient histograms (`log.histograms`, and every stage end)
    Samples       sample pictures (`samples.every`, and every stage end)
    Checkpoints   every `checkpoint.every` steps, every stage end, the end, and on a signal
    Evaluation    `eval.every` steps and every stage end, after that step's checkpoint; with
                  `checkpoint.keep_best`, a better result tags that step's checkpoint `best`
    RestoreBest   the end of a stage whose `until` has `restore: best`: rolls the weights and
                  optimizer state back to the `best` checkpoint, then writes the stage-end
                  checkpoint (deferred by Checkpoints until then)
    LossPlots     plots/losses.png, redrawn at every stage end

The three that write checkpoints share one `CheckpointWriter`. A `Tick` says where the loop
is: the position, the global steps done after it, whether the stage or the run ends there,
and the step's `StepOutput`. Before the callbacks run, a stage's `until:` condition
(`stagegan.core.until`) may say that the stage ends at that step; the loop alone then changes the
schedule (`end_stage`).
"""

import collections
import contextlib
import functools
import logging
import math
import os
import re
import shutil
import signal
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from stagegan.config.cluster import PATIENCE, collective_timeout
from stagegan.config.schema import Plateau
from stagegan.core.monitor import Monitor
from stagegan.core.until import Conditions
from stagegan.errors import (
    ConfigError,
    GuardStop,
    Interrupted,
    PeerLost,
    ServerLost,
    WriteError,
    first_line,
)
from stagegan.evaluation.evaluate import Evaluation
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.logs import (
    Progress,
    RunLog,
    append_jsonl,
    plot_losses,
    read_metrics,
    tensorboard_session_start,
)
from stagegan.runfolder.samples import SampleDumper

log = logging.getLogger("stagegan")


@dataclass
class Tick:
    """Where the loop is, after the step at `position`."""

    position: object  # schedule.Position
    stage: object  # config.Stage
    done: int  # global steps completed
    stage_done: bool  # the stage ends with this step
    final: bool  # the run ends with this step
    output: object = None  # the step's steps.StepOutput
    first: bool = False  # the first step of its stage in this process (a stage starts)
    ended: object = None  # why the stage's `until` ended it here (a string), or None
    evaluation: object = None  # an evaluation the `until` check ran at this step
    gradients: bool = False  # a callback asked for the step's gradients (`on_step_begin`)
    stop: object = None  # an exception a callback asks the loop to raise after the step


@dataclass
class Logs:
    """What the callbacks share, as Keras's `logs`: none reads another's fields.

    `began`: when the loop started (perf_counter); `meter`: the log interval so far
    (`MetricsLog` starts a new one at each log line; a checkpoint keeps its state);
    `last`: the last logged metrics, as floats (what `train` returns); `conditions`: the
    `until` checks (their state goes into checkpoints); `keeper`: the `BestKeeper` of
    `checkpoint.keep_best`, or None."""

    began: float
    conditions: object
    keeper: object = None
    meter: object = None
    last: dict = field(default_factory=dict)


AUTO = "auto"  # `train(evaluation=AUTO)`: build the run's evaluation (`build_evaluation`)


def train(trainer, run_dir, stop_after=None, run_name=None, evaluation=AUTO, chief_config=None):
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
        evaluation: the run's in-training `Evaluation` (`build_evaluation`: the runner builds
            and checks it before the run folder exists), None for none; by default built
            here.
        chief_config: a non-chief multi-worker worker's: the chief's config, whose sample
            dumps, evaluations and histograms its own leaves out (`PeerDeadline` allows for
            the chief's time on them).

    Returns:
        The last logged metrics, as floats.

    Raises:
        GuardStop: the NaN/Inf guard stopped the run.
        Interrupted: SIGINT or SIGTERM, after the checkpoint was written.
        WriteError: a file of the run could not be written (a full disk, permissions).
    """
    store = RunFolder(run_dir).checkpoints(trainer.checkpoint, trainer.config.checkpoint.keep)
    if evaluation is AUTO:
        evaluation = build_evaluation(trainer)
    rejoin = (
        f"continue with: python -m stagegan launch --workers N --resume {run_name or run_dir} "
        "(or train --resume on every worker)"
    )
    try:
        # Workers of a multi-worker run cannot agree on a step to stop at: there, signals
        # act at once, and a resume starts from the last periodic or stage-end checkpoint.
        def expired(number, grace):
            latest = store.latest()
            newest = f"step {latest['step']}" if latest else "none yet"
            return (
                f"step {number} did not finish within {grace:.0f} s; stopped "
                f"without it (the newest checkpoint is {newest}; continue with: python -m "
                f"stagegan train --resume {run_dir})"
            )

        def silent(number, waited, newest):
            return (
                f"lost contact with a worker: step {number} waited {waited:.0f} s for a peer "
                f"that stopped answering (STAGEGAN_COLLECTIVE_TIMEOUT); {newest}; {rejoin}"
            )

        timeout = collective_timeout() if trainer.multi_worker else 0
        peers = PeerDeadline(timeout, silent, last_checkpoint(store)) if timeout else None
        with StopSignals(enabled=not trainer.multi_worker, expired=expired) as signals:
            with peers or contextlib.nullcontext():
                return _loop(
                    trainer, run_dir, store, signals, stop_after, evaluation, peers, chief_config
                )
    except GuardStop as e:
        latest = store.latest()
        last = (
            f"the last checkpoint, {latest['prefix']}, holds finite weights"
            if latest
            else "no checkpoint was written"
        )
        raise GuardStop(f"{e.message}; {last}") from None
    except tf.errors.OpError as e:
        servers = trainer.placement.coordinator is not None and lost_a_server(e)
        if not (trainer.multi_worker or servers):
            raise
        last = last_checkpoint(store)
        if servers:
            raise ServerLost(
                f"{describe_server_error(e)}; {last}; continue with: python -m stagegan "
                f"launch --ps M --workers N --resume {run_dir} (or train --resume on the "
                "chief, with the servers started again)"
            ) from None
        raise PeerLost(
            f"{describe_peer_error(e)} at step {trainer.step_count}; {last}; {rejoin}"
        ) from None
    except OSError as e:
        latest = store.latest()
        last = f"the last good checkpoint is {latest['prefix']}" if latest else "no checkpoint yet"
        raise WriteError(
            str(e.filename or run_dir),
            f"cannot write: {e.strerror or e} ({last}; free space or fix permissions, then "
            f"continue with: python -m stagegan train --resume {run_dir})",
        ) from None


def last_checkpoint(store):
    latest = store.latest()
    return f"the last checkpoint is step {latest['step']}" if latest else "no checkpoint yet"


def _loop(trainer, run_dir, store, signals, stop_after, evaluation, peers=None, chief_config=None):
    schedule = trainer.schedule
    start = trainer.step_count
    chief_config = chief_config or trainer.config
    conditions = Conditions(schedule, evaluation, trainer.until_state)
    logs = Logs(
        began=time.perf_counter(),
        conditions=conditions,
        keeper=BestKeeper.resume(trainer.config.checkpoint.keep_best, store, start),
    )
    callbacks = make_callbacks(trainer, run_dir, store, signals, start, logs, evaluation)
    traced = set()  # the step functions this process has run (their first run traces)
    after_extra = True  # whether the last step was followed by extra work (or none ran yet)
    try:
        for position in schedule.positions(start):
            tick = make_tick(schedule, position, resumed=position.global_step == start)
            for callback in callbacks:
                callback.on_step_begin(tick)
            variant = (position.stage_index, tick.gradients)
            busy = peers is not None and extra_work(chief_config, tick.done)
            if peers is not None:
                patient = after_extra or busy
                peers.step_started(tick.done, watched=variant in traced, patient=patient)
            traced.add(variant)
            signals.step_started(position.global_step + 1)
            tick.output = trainer.step(position, with_gradients=tick.gradients, check=False)
            signals.step_finished()
            stopping = stop_after is not None and tick.done - start >= stop_after
            # Read from the device only where something is read anyway (see `Callback.reads`).
            # Workers of a multi-worker run read every step: their callbacks differ (only the
            # chief samples and evaluates), and they must stop at the same step.
            if (
                trainer.multi_worker
                or stopping
                or conditions.checks(tick)
                or any(c.reads(tick) for c in callbacks)
            ):
                flush_guard(trainer, run_dir)
            if peers is not None:  # its collectives are done: the workers read its results
                peers.step_finished()
            reason = conditions.check(tick)
            if reason is not None:
                end_stage(schedule, tick, reason)
            for callback in callbacks:
                callback.on_step_end(tick)
            if tick.stop is not None:
                raise tick.stop
            if stopping:
                break
            after_extra = tick.stage_done or busy
            every = trainer.config.checkpoint.every
            if peers is not None and (tick.stage_done or (every and tick.done % every == 0)):
                peers.newest = last_checkpoint(store)  # read here: its watcher reads no file
    finally:
        for callback in callbacks:
            callback.close()
    return logs.last


def end_stage(schedule, tick, reason):
    """The stage of `tick` ends after its step, as its `until` decided (`reason`): the only
    place the loop's schedule changes while it walks it."""
    stage_steps = tick.position.stage_step + 1
    schedule.end_stage(tick.position.stage_index, stage_steps)
    tick.stage_done, tick.final = True, tick.done == schedule.total_steps
    tick.ended = reason
    log.info(
        "[%s] stage ends at step %d, after %d of at most %d steps: %s",
        tick.stage.name,
        tick.done,
        stage_steps,
        tick.stage.steps,
        reason,
    )


def flush_guard(trainer, run_dir):
    """Act on the NaN guard's collected results (`Guard.flush`: may raise `GuardStop`) and
    append its records to guard.jsonl. Steps still running on workers (`parameter_server`)
    finish first: whatever reads the run's state after this reads every step before it."""
    trainer.join()
    try:
        trainer.guard.flush()
    finally:
        for event in trainer.guard.events:
            append_jsonl(run_dir / RunFolder.GUARD, event)
        trainer.guard.events.clear()


def make_tick(schedule, position, resumed=False):
    """The `Tick` of the step at `position` (`resumed`: the first step of this process)."""
    done = position.global_step + 1
    return Tick(
        position=position,
        stage=schedule.stages[position.stage_index],
        done=done,
        stage_done=done == schedule.stage_end(position.stage_index),
        final=done == schedule.total_steps,
        first=position.stage_step == 0 or resumed,
    )


def make_callbacks(trainer, run_dir, store, signals, start, logs, evaluation):
    """The run's callbacks, in the order they run after a step (see the module doc)."""
    config = trainer.config
    if config.log.tensorboard and start == 0 and not (run_dir / "tensorboard").exists():
        tensorboard_session_start(run_dir / "tensorboard", 0)  # see `resume.commit`
    runlog = RunLog(run_dir, config.log.tensorboard)
    writer = CheckpointWriter(trainer, store, signals, run_dir, logs)
    callbacks = [MetricsLog(trainer, runlog, store, start, logs), Histograms(trainer, runlog)]
    if config.samples:
        callbacks.append(Samples(SampleDumper(trainer, run_dir, config.samples), runlog))
    callbacks.append(Checkpoints(writer))
    if evaluation is not None:
        evaluation.run_dir = run_dir
        scheduled = config.eval is not None
        every = config.eval.every if scheduled else 0
        callbacks.append(EvaluationCallback(evaluation, every, runlog, logs, scheduled, writer))
    if logs.keeper is not None:
        callbacks.append(RestoreBest(trainer, writer, logs.keeper))
    callbacks.append(LossPlots(trainer.schedule, runlog, run_dir))
    return callbacks


class Callback:
    """One thing the loop does around each step, as Keras's callbacks: `on_step_begin`
    before it (ask for its gradients: `tick.gradients`), `on_step_end` after it (stop the
    run: `tick.stop`), `close` at the end. They share the `Tick` and the loop's `Logs`."""

    def on_step_begin(self, tick):
        pass

    def reads(self, tick):
        """Whether `on_step_end` reads values from the device after this step (the NaN
        guard's results are read, and acted on, only at such steps: no host round trip on
        the others)."""
        return False

    def on_step_end(self, tick):
        pass

    def close(self):
        pass


class MetricsLog(Callback):
    """Interval means (`Meter`) of the step metrics: metrics.jsonl, TensorBoard and the
    console every `log.every` steps and at stage ends; the progress bar every step."""

    def __init__(self, trainer, runlog, store, start, logs):
        self.trainer, self.runlog, self.logs = trainer, runlog, logs
        self.config = trainer.config
        log_config = self.config.log
        self.progress = Progress(trainer.schedule, log_config.progress, start, log_config.console)
        logs.meter = Meter(logs.began)
        # A resumed run goes on with the log interval it was in (see CheckpointStore.save).
        entry = next((e for e in store.entries() if e["step"] == start), None)
        if entry is not None and start % self.config.log.every:
            logs.meter.carried = {k: list(v) for k, v in entry.get("log_pending", {}).items()}

    def on_step_begin(self, tick):
        if tick.first:
            self.progress.stage_started(tick.position, resumed=tick.position.stage_step > 0)

    def reads(self, tick):
        return tick.done % self.config.log.every == 0 or tick.stage_done

    def on_step_end(self, tick):
        position, meter = tick.position, self.logs.meter
        meter.pending.append(tick.output.metrics)
        stage_step = self.trainer.stage_steps[position.stage_index]
        batches = stage_step.batches_per_step(position.stage_step)
        meter.examples += batches * self.config.batch_of(tick.stage)
        if not self.reads(tick):
            self.progress.step(position, tick.done)
            return
        now = time.perf_counter()
        last = meter.means()
        rate = meter.rate(now)
        ended = {"stage_ended": tick.ended} if tick.ended else {}
        self.runlog.scalars(
            {
                "step": tick.done,
                "stage": tick.stage.name,
                "stage_step": position.stage_step + 1,
                "time": round(now - self.logs.began, 3),
                "wall_time": round(time.time(), 3),
                "examples_per_sec": round(rate, 2),
                **ended,
                **last,
            }
        )
        self.progress.step(position, tick.done, last, rate)
        self.logs.last = {k: v for k, v in last.items() if not np.isnan(v)}
        self.logs.meter = Meter(now)

    def close(self):
        self.progress.close()
        self.runlog.close()


class Histograms(Callback):
    """Weight and gradient histograms into TensorBoard: every `log.histograms` steps and at
    stage ends (it asks for the step's gradients before the step)."""

    def __init__(self, trainer, runlog):
        self.trainer, self.runlog = trainer, runlog
        self.config = trainer.config.log

    def due(self, tick):
        every = self.config.histograms
        return self.config.tensorboard and (
            tick.stage_done or bool(every and tick.done % every == 0)
        )

    def on_step_begin(self, tick):
        if self.due(tick):
            tick.gradients = True

    reads = due

    def on_step_end(self, tick):
        if not self.due(tick):
            return
        # (At a stage that its `until` ended here, the step was not asked for gradients:
        # the weights only.)
        arrays = {f"weights/{v.path}": v.numpy() for v in self.trainer.variables}
        arrays.update({f"gradients/{k}": np.asarray(v) for k, v in tick.output.gradients.items()})
        self.runlog.histograms(tick.done, tick.stage.name, arrays)


class Samples(Callback):
    """Sample pictures (`samples.every` steps and stage ends), also into TensorBoard."""

    def __init__(self, dumper, runlog):
        self.dumper, self.runlog = dumper, runlog

    def reads(self, tick):
        return self.dumper.due(tick.done, tick.stage_done)

    def on_step_end(self, tick):
        if self.reads(tick):
            _, picture = self.dumper.dump(tick.done, tick.stage.name)
            self.runlog.image(tick.done, "samples", picture)


class CheckpointWriter:
    """Writes the run's checkpoints, for the callbacks that do (`Checkpoints`, the `best` tag
    of `EvaluationCallback`, `RestoreBest`): tags at stage ends (`stage_end:<stage>`, and
    `final`), every `checkpoint.every` steps (`periodic`) and after a signal (`interrupted`:
    the step's `tick.stop` is then `Interrupted`). Never one with non-finite values
    (`GuardStop` instead). The index entry also keeps the log interval's partial means, the
    `until` checks' state and the best evaluation so far."""

    def __init__(self, trainer, store, signals, run_dir, logs):
        self.trainer, self.store, self.signals = trainer, store, signals
        self.run_dir, self.logs = run_dir, logs
        self.every = trainer.config.checkpoint.every

    def tags(self, tick):
        if tick.stage_done:
            return [f"stage_end:{tick.stage.name}"] + (["final"] if tick.final else [])
        if self.every and tick.done % self.every == 0:
            return ["periodic"]
        return ["interrupted"] if self.signals.received else []

    def defers(self, tick):
        """Whether this step's checkpoint waits for `RestoreBest` (a stage that ends here
        rolls back to the best checkpoint first)."""
        until = tick.stage.until
        return bool(tick.stage_done and until is not None and until.restore)

    def save(self, tick, tags):
        """Write the checkpoint of this step with `tags` (or add them to the one written).
        The guard is read first: no checkpoint past a step the guard stops at."""
        flush_guard(self.trainer, self.run_dir)
        bad = self.trainer.nonfinite_variables()
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            raise GuardStop(
                f"[{tick.stage.name}] step {tick.done}: refusing to write a checkpoint with "
                f"non-finite values in {', '.join(bad[:3])}{more}"
            )
        logs = self.logs
        extra = {"log_pending": logs.meter.state(), "until": logs.conditions.state()}
        if logs.keeper is not None:
            extra["best"] = logs.keeper.state()
        return self.store.save(tick.done, tags, extra)

    def write(self, tick):
        """This step's checkpoint with its tags; after a signal, stop the run once the step's
        other callbacks (its evaluation, the rollback) have run."""
        tags = self.tags(tick)
        path = self.save(tick, tags)
        if tick.stage_done:
            log.info("checkpoint %s (%s)", path, ", ".join(tags))
        if self.signals.received:
            log.info(
                "%s at step %d: checkpoint %s written; continue with: "
                "python -m stagegan train --resume %s",
                self.signals.name,
                tick.done,
                path,
                self.run_dir,
            )
            tick.stop = Interrupted(
                f"{self.signals.name} at step {tick.done}", 128 + self.signals.received
            )


class Checkpoints(Callback):
    """The checkpoints of `CheckpointWriter.tags`; the end of a stage with `restore: best`
    is left to `RestoreBest` (`CheckpointWriter.defers`)."""

    def __init__(self, writer):
        self.writer = writer

    def reads(self, tick):
        return bool(self.writer.tags(tick))

    def on_step_end(self, tick):
        if self.reads(tick) and not self.writer.defers(tick):
            self.writer.write(tick)


class EvaluationCallback(Callback):
    """In-training evaluation (`eval.every` steps and stage ends, when `scheduled`, and the
    evaluations of `until` plateaus): numbers into metrics.jsonl and TensorBoard, and a log
    line. It runs after the step's checkpoint, so a stage's own end is a baseline it can
    find; with `checkpoint.keep_best`, a better result tags that checkpoint `best`."""

    def __init__(self, evaluation, every, runlog, logs, scheduled=True, writer=None):
        self.evaluation, self.every = evaluation, every
        self.runlog, self.logs = runlog, logs
        self.scheduled, self.writer = scheduled, writer

    def reads(self, tick):
        if tick.evaluation is not None:
            return True
        return self.scheduled and (
            tick.stage_done or bool(self.every and tick.done % self.every == 0)
        )

    def on_step_end(self, tick):
        if not self.reads(tick):
            return
        result = tick.evaluation if tick.evaluation is not None else self.evaluation.run()
        values = {
            f"eval/{k}": v
            for k, v in result["metrics"].items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.runlog.scalars(
            {
                "step": tick.done,
                "stage": tick.stage.name,
                "stage_step": tick.position.stage_step + 1,
                "time": round(time.perf_counter() - self.logs.began, 3),
                **values,
            }
        )
        text = " ".join(f"{k[5:]}={v:.4g}" for k, v in values.items())
        log.info("[%s] eval at step %d: %s", tick.stage.name, tick.done, text)
        keeper = self.logs.keeper
        if keeper is not None and keeper.consider(tick.done, result["metrics"]):
            # This step's checkpoint (written already, or written now) becomes the best. At a
            # stage end that waits for `RestoreBest`, this is that checkpoint (nothing to roll
            # back): written with its stage-end tags at once.
            writer = self.writer
            deferred = writer.tags(tick) if writer.defers(tick) else []
            writer.save(tick, ["best", *deferred])
            writer.store.move_tag("best", tick.done)
            log.info(
                "[%s] checkpoint of step %d tagged best (%s=%.4g)",
                tick.stage.name,
                tick.done,
                keeper.spec.metric,
                keeper.value,
            )


class BestKeeper:
    """`checkpoint.keep_best`: the best evaluation so far (`value`, at global step `step`),
    kept in every checkpoint's index entry so a resumed run ranks as the uninterrupted one."""

    def __init__(self, spec, value=None, step=None):
        self.spec, self.value, self.step = spec, value, step
        self.monitor = Monitor(spec.metric, spec.mode, who="checkpoint.keep_best")

    @classmethod
    def resume(cls, spec, store, start):
        """The keeper of a run (re)starting at global step `start` (None without
        `keep_best`). A resume from an earlier checkpoint than the newest (the later ones
        superseded) gives the `best` tag back to the best one as of that checkpoint."""
        if spec is None:
            return None
        entry = next((e for e in store.entries() if e["step"] == start), None)
        state = (entry or {}).get("best") or {}
        keeper = cls(spec, state.get("value"), state.get("step"))
        if keeper.step is not None:
            entries = store.entries()
            tagged = [e["step"] for e in entries if "best" in e["tags"]]
            if any(e["step"] == keeper.step for e in entries):
                if tagged != [keeper.step]:  # a kill between a save and its tag move
                    store.move_tag("best", keeper.step)
            else:
                log.warning(
                    "checkpoint.keep_best: the best checkpoint as of step %d (step %d, %s=%.4g) "
                    "is no longer listed (a resume from an earlier checkpoint); later "
                    "evaluations are still ranked against it, and restore: best has no "
                    "checkpoint to go back to until one beats it",
                    start,
                    keeper.step,
                    spec.metric,
                    keeper.value,
                )
        return keeper

    def state(self):
        return {"metric": self.spec.metric, "value": self.value, "step": self.step}

    def consider(self, step, values):
        """Whether the evaluation `values` of global step `step` is the best so far (ties go
        to the earlier step); records it when it is."""
        value = self.monitor.read(values, step)
        if value is None:
            return False
        if not self.monitor.improves(value, self.value):
            return False
        self.value, self.step = value, step
        return True


class RestoreBest(Callback):
    """At the end of a stage whose `until` has `restore: best`: the weights, their state,
    the optimizers (moments and iteration counts), the EMA, loss scales and augmentation
    probabilities go back to the `best` checkpoint, so the next stage starts from there.
    What moves on regardless stays: the global step, the random streams and the data
    position. Then the stage-end checkpoint is written (`Checkpoints.defers`), so a resume
    from it starts from the restored state."""

    def __init__(self, trainer, writer, keeper):
        self.trainer, self.writer, self.keeper = trainer, writer, keeper

    def reads(self, tick):
        return self.writer.defers(tick)

    def on_step_end(self, tick):
        if not self.reads(tick):
            return
        store, name = self.writer.store, tick.stage.name
        entry = store.tagged("best")
        if entry is None:
            log.warning(
                "[%s] %s.restore: no best checkpoint to go back to; the next stage starts "
                "from this stage's end",
                name,
                tick.stage.until.key,
            )
        elif entry["step"] == tick.done:
            log.info("[%s] restore best: the stage's end (step %d) is the best", name, tick.done)
        else:
            restore_trainer_state(self.trainer, store, entry, tick.stage.until.key)
            log.info(
                "[%s] restored the best checkpoint, step %d (%s=%.4g), for the next stage",
                name,
                entry["step"],
                self.keeper.spec.metric,
                self.keeper.value,
            )
        self.writer.write(tick)


def restore_trainer_state(trainer, store, entry, key):
    """Read the rolled-back part of the trainer's state (`Trainer.rollback_trackables`) from
    the listed checkpoint `entry`."""
    from stagegan.training.trainer import set_learning_rates

    path = store.path_of(entry)
    problem = store.verify(entry)
    if problem is not None:
        raise ConfigError(f"{key}.restore", f"the best checkpoint {path} is damaged: {problem}")
    try:
        # Objects the best checkpoint predates (stages appended on a resume since) keep
        # their current state.
        held = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
        objects = {k: v for k, v in trainer.rollback_trackables().items() if k in held}
        status = tf.train.Checkpoint(**objects).read(path)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except Exception as e:  # noqa: BLE001 - DataLossError, OpError, AssertionError, ...
        raise ConfigError(f"{key}.restore", f"cannot restore {path}: {first_line(e)}") from None
    set_learning_rates(trainer)  # the config's rates, as a resume from here would set them


class LossPlots(Callback):
    """plots/losses.png, redrawn at every stage end; a stage that ended on its `until` is
    labelled so, with a red line where it ended."""

    def __init__(self, schedule, runlog, run_dir):
        self.schedule, self.runlog, self.folder = schedule, runlog, run_dir / "plots"

    def reads(self, tick):
        return tick.stage_done

    def on_step_end(self, tick):
        if not tick.stage_done:
            return
        self.folder.mkdir(exist_ok=True)
        schedule = self.schedule
        plot_losses(
            read_metrics(self.runlog.path),
            [
                (f"{stage.name} (until)" if i in schedule.ends else stage.name, first)
                for i, (stage, first) in enumerate(
                    zip(schedule.stages, schedule.starts, strict=True)
                )
            ],
            self.folder / "losses.png",
            total_steps=schedule.total_steps,
            ended=[schedule.stage_end(i) for i in sorted(schedule.ends)],
        )


def build_evaluation(trainer):
    """The run's in-training `Evaluation` (None without `eval` or an `until` plateau), with
    what it needs loaded: feature extractors that cannot load, or an `eval.count` larger
    than the real images, fail here (the runner calls it before a run folder exists), not
    in an hour."""
    config = trainer.config
    plateaus = [s.until for s in config.stages if isinstance(s.until, Plateau)]
    if config.eval is None and not plateaus:
        return None
    where = "eval" if config.eval is not None else plateaus[0].key
    evaluation = Evaluation(
        trainer,
        None,
        count=config.eval.count if config.eval else None,
        seed=config.seed,
        features=config.eval.features if config.eval else None,
        features_key=f"{where}.features",
        count_key=f"{where}.count",
        batch_key=f"{where}.batch_size",
    )
    evaluation.check()
    return evaluation


@dataclass
class Meter:
    """Throughput and metrics since the last log line."""

    start: float
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


class StopSignals:
    """While active, SIGINT and SIGTERM only set `received` (the signal number), so the loop
    can finish its step and write a checkpoint. A second signal acts as usual (the handlers
    are restored after the first). Outside the main thread it does nothing.

    A step that cannot finish (its input blocks, a device hangs) must not make the signal
    wait forever, and while the main thread is blocked inside TensorFlow, Python runs no
    signal handler. So a watcher thread learns of the signal through `signal.set_wakeup_fd`
    (written by the C-level handler, whatever the main thread is doing): when the step in
    flight (or the next one) has not finished `grace` seconds after it began, the watcher
    prints `expired(step number, grace)`'s line and ends the process at once (`os._exit`,
    status 128 + the signal); a second signal meanwhile ends it at once too. It writes no checkpoint
    then: the stuck step may have applied some of its updates, and its data iterator and
    random streams are in its hands, so the newest checkpoint is the one to resume from.
    The grace period is at least three times the last finished step's time, so a slow
    model's step is not taken for a hang."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    GRACE = 10.0  # seconds
    POLL = 0.1

    def __init__(self, enabled=True, expired=None, grace=None):
        self.received = 0
        self.saved = {}
        self.enabled = enabled
        self.expired = expired or (
            lambda number, grace: f"step {number} did not finish within {grace:g} s"
        )
        self.grace = self.GRACE if grace is None else grace
        self.in_step = None  # when the step in flight began (None: none in flight)
        self.number = 0  # and its number
        self.last_step = 0.0  # how long the last finished step took
        self.pipe = None
        self.wakeup = None
        self.done = threading.Event()

    @property
    def name(self):
        return signal.Signals(self.received).name if self.received else ""

    def step_started(self, number):
        """Step `number` (counted from 1) begins."""
        self.number = number
        self.in_step = time.monotonic()

    def step_finished(self):
        if self.in_step is not None:
            self.last_step = time.monotonic() - self.in_step
        self.in_step = None

    def _handle(self, signum, frame):
        self.received = signum
        self._restore()

    def _restore(self):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        self.saved = {}

    def _watch(self, fd):
        """The watcher thread: waits for a signal byte on `fd`, then for the step in flight."""
        seen = 0
        while True:
            try:
                data = os.read(fd, 1)
            except OSError:
                data = b""
            if not data:  # the loop is over
                os.close(fd)
                return
            signum = data[0]
            if signum not in self.SIGNALS:
                continue
            if seen:  # a second signal while the main thread could not act on the first
                self._exit(signum, "a second signal; stopped at once")
            seen = signum
            threading.Thread(target=self._deadline, args=(signum,), daemon=True).start()

    def _deadline(self, signum):
        grace = max(self.grace, 3 * self.last_step)
        while not self.done.wait(self.POLL):
            began = self.in_step
            if began is not None and time.monotonic() - began > grace:
                self._exit(signum, self.expired(self.number, grace))

    def _exit(self, signum, message):
        say_and_exit(f"{signal.Signals(signum).name}: {message}", 128 + signum)

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self.saved[signum] = signal.signal(signum, self._handle)
            self.pipe = os.pipe()
            os.set_blocking(self.pipe[1], False)
            self.wakeup = signal.set_wakeup_fd(self.pipe[1], warn_on_full_buffer=False)
            threading.Thread(
                target=self._watch, args=(self.pipe[0],), daemon=True, name="stop-signals"
            ).start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self._restore()
        if self.pipe is not None:
            signal.set_wakeup_fd(self.wakeup)
            os.close(self.pipe[1])  # the watcher reads end-of-file and returns
            self.pipe = None
        return False


# Folders a process removes even when it ends at once (`say_and_exit`): a non-chief worker's
# temporary run folder, which holds its checkpoints (`runner.worker`).
TEMPORARY = []


def say_and_exit(message, status, fallback="stopped at once"):
    """Write `stagegan: error: {message}` (a string, or a function that returns it) as one
    line on stderr, remove the `TEMPORARY` folders, and end the process at once with
    `status`, from any thread: the main thread may be blocked inside TensorFlow. The line
    goes to `sys.stderr`, not descriptor 2, which the CLI points at /dev/null
    (`cli.main.import_tensorflow`). When `message` fails, `fallback` is written."""
    try:
        try:
            text = message() if callable(message) else message
        except Exception:  # noqa: BLE001 - the process ends anyway: still say why
            text = fallback
        sys.stderr.write(f"stagegan: error: {text}\n")
        sys.stderr.flush()
        for folder in TEMPORARY:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        os._exit(status)


class PeerDeadline:
    """A multi-worker step that waits too long for a peer ends the process: a watcher thread
    writes `message(step number, seconds waited, newest)` (`newest`: the words on the last
    checkpoint, which the loop keeps current, so the watcher reads no file) as one line and
    exits at once with `PeerLost`'s status (4). Nothing is saved then: every checkpoint needs
    the silent peer.

    How long is too long, with `timeout` T (`STAGEGAN_COLLECTIVE_TIMEOUT`): three times the
    median of the last steps' times, at least T and at most `PATIENCE` x T; a `patient` step
    (one after a stage's end or a step where the chief does more than the others:
    histograms, sample dumps or an evaluation, while the others wait in the next step) gets
    the most. A step function's first run in this process (it traces) is not watched.
    TensorFlow's own collective deadline is longer still (`cluster.TF_DEADLINE` x T,
    `placement._multi_worker_strategy`), so stagegan acts first: TensorFlow's abort of a
    receive still pending from the silent peer can crash the process (SIGSEGV, no
    message)."""

    POLL = 0.1
    HISTORY = 16  # the steps whose median time sets an ordinary step's deadline

    def __init__(self, timeout, message, newest=""):
        self.timeout, self.message = timeout, message
        self.newest = newest  # the words on the last checkpoint, which the loop keeps current
        self.watch = None  # (step number, when it began, its deadline in seconds) or None
        self.began = None
        self.times = collections.deque(maxlen=self.HISTORY)
        self.done = threading.Event()

    def step_started(self, number, watched=True, patient=False):
        self.began = time.monotonic()
        most = PATIENCE * self.timeout
        usual = 3 * statistics.median(self.times) if self.times else 0.0
        grace = most if patient else min(max(self.timeout, usual), most)
        self.watch = (number, self.began, grace) if watched else None

    def step_finished(self):
        if self.began is not None:
            self.times.append(time.monotonic() - self.began)
        self.watch = self.began = None

    def _watch(self):
        while not self.done.wait(self.POLL):
            watch = self.watch
            if watch is None:
                continue
            number, began, grace = watch
            waited = time.monotonic() - began
            if waited > grace:
                fallback = f"{PeerLost.key_name}: step {number} waited {waited:.0f} s for a peer"
                say_and_exit(
                    functools.partial(self._line, number, waited), PeerLost.status, fallback
                )

    def _line(self, number, waited):
        return f"{PeerLost.key_name}: {self.message(number, waited, self.newest)}"

    def __enter__(self):
        threading.Thread(target=self._watch, daemon=True, name="peer-deadline").start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        return False


def extra_work(config, done):
    """Whether the chief of a multi-worker run does more than the others after global step
    `done` (`config`: the chief's, whose samples and evaluations the others leave out):
    histograms (its step computes the gradients too, a variant it may trace then), sample
    dumps or an evaluation. Stage ends too, which `Tick.stage_done` says. (Checkpoints every
    process writes alike.)"""
    every = [config.log.histograms if config.log.tensorboard else 0]
    every += [config.samples.every] if config.samples is not None else []
    every += [config.eval.every] if config.eval is not None else []
    return any(e and done % e == 0 for e in every)


def lost_a_server(error):
    """Whether a parameter-server run's error is a lost server (its connection refused or
    closed, a deadline passed), not an error of the step itself (bad data, memory)."""
    lost = (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
        tf.errors.DeadlineExceededError,
    )
    return isinstance(error, lost)


def describe_server_error(error):
    """One line from TensorFlow's error when a parameter-server run lost a server."""
    text = str(getattr(error, "message", error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = (lines or [type(error).__name__])[0]
    task = re.search(r"/job:(ps|worker)/replica:\d+/task:(\d+)", text)
    job = {"ps": "parameter server", "worker": "worker"}
    who = f"{job[task.group(1)]} {task.group(2)}" if task else "a server"
    return f"lost contact with {who}: {first}"


def describe_peer_error(error):
    """One line from TensorFlow's error when a collective operation lost a peer."""
    text = str(getattr(error, "message", error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    aborted = [line for line in lines if line.startswith("Collective ops is aborted by: ")]
    # TensorFlow's wrapper lines say nothing of what failed.
    said = [
        line
        for line in lines
        if line != "Graph execution error:" and not line.startswith(("Detected at node", "File "))
    ]
    first = aborted[0].split(": ", 1)[1] if aborted else (said or [type(error).__name__])[0]
    # The peer: the target of a failed call or, when the coordination service noticed first,
    # the task it lists as no longer sending heartbeats (and names the error's source).
    task = r"/job:\w+/(?:replica:\d+/)?task:\d+"
    peer = (
        re.search(r"remote target (/job:\S+?)(?: while|$)", text, re.M)
        or re.search(rf"stopped sending heartbeats\):\s*({task})", text)
        or re.search(rf"Error reported from ({task})", text)
    )
    who = "a worker"
    if peer:
        who = f"worker {peer.group(1).rsplit('task:', 1)[-1]} ({peer.group(1)})"
    return f"lost contact with {who}: {first}"
