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

The loop's parts are four modules (as Keras's `keras/src/callbacks/`):

    loop.py           `train`, the `Tick` and `Logs` the callbacks share, their list
    callbacks.py      the `Callback` base; MetricsLog, Histograms, Samples, EvaluationCallback,
                      LossPlots
    checkpointing.py  CheckpointWriter, Checkpoints, BestKeeper (`keep_best`), RestoreBest
    watchdogs.py      what stops a run besides its schedule: the NaN guard's flush, signals
                      (StopSignals), a silent peer (PeerDeadline), a lost server or peer
"""

import contextlib
import logging
import time
from dataclasses import dataclass, field

import tensorflow as tf

from stagegan.config.cluster import collective_timeout
from stagegan.config.schema import Plateau
from stagegan.core.until import Conditions
from stagegan.errors import GuardStop, PeerLost, ServerLost, WriteError
from stagegan.evaluation.evaluate import Evaluation
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.logs import RunLog, tensorboard_session_start
from stagegan.runfolder.samples import SampleDumper
from stagegan.training.callbacks import (
    EvaluationCallback,
    Histograms,
    LossPlots,
    MetricsLog,
    Samples,
)
from stagegan.training.checkpointing import BestKeeper, Checkpoints, CheckpointWriter, RestoreBest
from stagegan.training.watchdogs import (
    PeerDeadline,
    StopSignals,
    describe_peer_error,
    describe_server_error,
    extra_work,
    flush_guard,
    lost_a_server,
)

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
