"""The training loop's checkpoints: `CheckpointWriter` writes them for the callbacks that do
(`Checkpoints`; `EvaluationCallback`'s `best` tag; `RestoreBest`, which rolls a stage's end
back to the `best` checkpoint through `restore_trainer_state`); `BestKeeper` is
`checkpoint.keep_best`'s record of the best evaluation so far."""

import logging

import tensorflow as tf

from stagegan.core.monitor import Monitor
from stagegan.errors import ConfigError, GuardStop, Interrupted, first_line
from stagegan.training.callbacks import Callback
from stagegan.training.watchdogs import flush_guard

log = logging.getLogger("stagegan")


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
