"""The training loop's callbacks that log (`stagegan.training.loop` lists them all, in the
order they run): the `Callback` base class; `MetricsLog` (with its `Meter`), `Histograms`,
`Samples`, `EvaluationCallback` and `LossPlots`. The callbacks that write checkpoints are in
`stagegan.training.checkpointing`."""

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from stagegan.runfolder.logs import Progress, plot_losses, read_metrics

log = logging.getLogger("stagegan")


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
