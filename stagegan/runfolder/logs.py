"""What a run reports while it trains: `metrics.jsonl`, TensorBoard, the console, loss plots.

* `RunLog` appends one JSON object per logged step to `RUN/metrics.jsonl` and mirrors the
  scalars, sample pictures and histograms into TensorBoard event files (`RUN/tensorboard/`).
* `Progress` draws a progress bar per stage when stdout is a terminal, and writes plain log
  lines otherwise.
* `plot_losses` draws `RUN/plots/losses.png` from `metrics.jsonl`.
"""

import json
import logging
import math
import sys
import time

import numpy as np

from stagegan.runfolder.atomic import atomic_write
from stagegan.runfolder.dirs import RunFolder

log = logging.getLogger("stagegan")

METRICS = RunFolder.METRICS
RECORD_FIELDS = (
    "step",
    "stage",
    "stage_step",
    "time",
    "wall_time",
    "examples_per_sec",
    "stage_ended",
)


class RunLog:
    """`metrics.jsonl` plus TensorBoard.

    Args:
        run_dir: the run folder.
        tensorboard: also write TensorBoard event files.
    """

    def __init__(self, run_dir, tensorboard=True):
        self.path = run_dir / METRICS
        self.writer = None
        if tensorboard:
            import tensorflow as tf

            self.writer = tf.summary.create_file_writer(str(run_dir / "tensorboard"))

    def scalars(self, record):
        """Append `record` (RECORD_FIELDS plus `{name: value}`) and write its scalars."""
        append_jsonl(self.path, _jsonable(record))
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default(step=record["step"]):
            for name, value in record.items():
                if name in ("step", "stage", "stage_step"):
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    if math.isfinite(value):
                        tf.summary.scalar(name, value)
        self.writer.flush()

    def image(self, step, name, picture):
        """A uint8 [H, W, 3] picture, into TensorBoard."""
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default(step=step):
            tf.summary.image(name, picture[None], max_outputs=1)
        self.writer.flush()

    def histograms(self, step, stage, arrays):
        """Histograms of `{name: array}` (weights and gradients), grouped under the stage."""
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default(step=step):
            for name, value in arrays.items():
                tf.summary.histogram(f"{stage}/{name}", value)
        self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()


def tensorboard_session_start(folder, step):
    """Write a `SessionLog.START` event at `step` into its own event file in `folder`.

    TensorBoard takes the first START of a run as its beginning and every later one as a
    restart: it then drops the events at or after that step that it read before, as it does
    after a TensorFlow crash. A new run writes one at step 0; a resumed run one just after its
    checkpoint, which hides what the interrupted process logged past it.
    """
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    # Event files are read in name order; names hold the creation second, host, pid and a
    # counter: ".0-start" sorts before a TensorFlow writer's ".<n>.v2" made in the same second.
    writer = EventFileWriter(str(folder), filename_suffix=".0-start")
    writer.add_event(
        Event(step=step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START))
    )
    writer.close()


def append_jsonl(path, record):
    """Append one JSON line (metrics, sample manifests, eval results) and flush it."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def _jsonable(record):
    out = {}
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no NaN
        out[key] = value
    return out


def read_metrics(path):
    """The records of a `metrics.jsonl` (skipping a torn last line)."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        return []
    return records


# Console --------------------------------------------------------------------------------------


def format_duration(seconds):
    """h:mm:ss (`--:--:--` while unknown)."""
    if not math.isfinite(seconds):
        return "--:--:--"
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def format_rate(per_second):
    """Examples per second with digits that mean something: 105,500 / 523 / 12.3 / 0.42."""
    if not math.isfinite(per_second):
        return "-"
    if per_second >= 100:
        return f"{per_second:,.0f}"
    return f"{per_second:.1f}" if per_second >= 10 else f"{per_second:.2f}"


def format_number(value):
    """A logged value in 4 significant digits."""
    return f"{value:.4g}"


BAR_WIDTH = 24
BAR_INTERVAL = 0.1  # seconds between redraws


class Progress:
    """The console view of training: a progress bar per stage, or plain log lines.

    The bar is one line per stage, redrawn in place at most every `BAR_INTERVAL` seconds:

        [joint] 340/1100 [======>.................] 0:00:12 left, run 0:02:31 | 1,234 ex/s |
            d_loss 1.243 g_loss 0.4615

    Args:
        schedule: the run's `Schedule`.
        mode: "bar", "lines" or "auto" (a bar when stdout is a terminal).
        start_step: the global step the run starts from (for the run ETA).
        stream: where the bar goes (stdout).
    """

    def __init__(self, schedule, mode, start_step, console="brief", stream=None):
        self.console = console
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "lines"
        self.mode = mode
        self.schedule = schedule
        self.start_step = start_step
        self.started = time.perf_counter()
        self.stream = stream or sys.stdout
        self.values, self.rate, self.drawn = {}, float("nan"), 0.0
        self.open = False  # a bar line without its newline is on screen
        if self.mode == "bar":  # a log line mid-stage starts on a line of its own
            log.addFilter(self._end_bar_line)

    def _end_bar_line(self, record):
        if self.open:
            self.stream.write("\n")
            self.open = False
        return True

    def close(self):
        """End the bar's line and stop watching the log."""
        self._end_bar_line(None)
        log.removeFilter(self._end_bar_line)

    def pace(self, done):
        """Seconds per step since this process started (NaN before the first step)."""
        steps = done - self.start_step
        return (time.perf_counter() - self.started) / steps if steps > 0 else float("nan")

    def run_eta(self, done):
        """Seconds left in the run, from the average pace since this process started."""
        return self.pace(done) * (self.schedule.total_steps - done)

    def stage_started(self, position, resumed=False):
        stage = self.schedule.stages[position.stage_index]
        log.info(
            "stage %d/%d %r: %s, %s%d steps%s, updates: %s%s",
            position.stage_index + 1,
            len(self.schedule.stages),
            stage.name,
            stage.mode,
            "at most " if stage.until else "",
            stage.steps,
            f" (from step {position.stage_step})" if resumed else "",
            ", ".join(u.name for u in stage.updates),
            f"; until {stage.until.describe()}" if stage.until else "",
        )
        self.values, self.drawn = {}, 0.0

    def step(self, position, done, values=None, examples_per_sec=None):
        """After stage step `position` (global steps completed: `done`); `values` on log steps."""
        if self.mode != "bar":
            if values is not None:
                self._line(position, done, values, examples_per_sec)
            return
        if values is not None:
            self.values = self.shown(position, values)
            self.rate = examples_per_sec
        stage = self.schedule.stages[position.stage_index]
        finished = position.stage_step + 1 == stage.steps
        now = time.perf_counter()
        if finished or values is not None or now - self.drawn >= BAR_INTERVAL:
            self.drawn = now
            end = "\n" if finished else ""
            self.stream.write("\r" + self.bar_text(position, done) + end)
            self.stream.flush()
            self.open = not finished

    def shown(self, position, values):
        """The values a console line shows: with `log.console: brief`, the loss terms the
        stage's updates train on (named without their update where that is unambiguous);
        with `full`, every value (the bar leaves out gradient norms)."""
        if self.console == "full":
            bar = self.mode == "bar"
            return {k: v for k, v in values.items() if not (bar and k.endswith("grad_norm"))}
        stage = self.schedule.stages[position.stage_index]
        trained = [f"{u.name}/{term}" for u in stage.updates for term, _ in u.loss]
        present = [key for key in dict.fromkeys(trained) if key in values]
        terms = [key.split("/", 1)[-1] for key in present]
        return {
            (term if terms.count(term) == 1 else key): values[key]
            for key, term in zip(present, terms, strict=True)
        }

    def bar_text(self, position, done):
        stage = self.schedule.stages[position.stage_index]
        current = position.stage_step + 1
        filled = int(BAR_WIDTH * current / stage.steps)
        bar = "=" * filled + (">" if filled < BAR_WIDTH else "") + "." * (BAR_WIDTH - filled - 1)
        left = self.pace(done) * (stage.steps - current)
        values = " ".join(
            f"{k} {format_number(v)}" for k, v in self.values.items() if math.isfinite(v)
        )
        return (
            f"[{stage.name}] {current}/{stage.steps} [{bar[:BAR_WIDTH]}] "
            f"{format_duration(left)} left, run {format_duration(self.run_eta(done))} | "
            f"{format_rate(self.rate)} ex/s | {values}"
        )

    def _line(self, position, done, values, examples_per_sec):
        stage = self.schedule.stages[position.stage_index]
        stage_left = self.pace(done) * (stage.steps - position.stage_step - 1)
        shown = self.shown(position, values)
        text = " ".join(f"{k}={format_number(v)}" for k, v in shown.items() if math.isfinite(v))
        log.info(
            "[%s] step %d/%d (stage %d/%d) %s | %s ex/s | ETA stage %s, run %s",
            stage.name,
            done,
            self.schedule.total_steps,
            position.stage_step + 1,
            stage.steps,
            text,
            format_rate(examples_per_sec),
            format_duration(stage_left),
            format_duration(self.run_eta(done)),
        )


# Plots ----------------------------------------------------------------------------------------

PLOT_COLUMNS = 2
PLOT_TILE = (6.0, 3.0)  # inches per subplot
PLOT_DPI = 100


def loss_names(records):
    """The loss curves to plot: every logged value except bookkeeping, norms and evals."""
    names = []
    for record in records:
        for key in record:
            if key in RECORD_FIELDS or key in names:
                continue
            if key.endswith("grad_norm") or key.startswith("eval/"):
                continue
            names.append(key)
    return names


def plot_size(count):
    """The pixel size (width, height) of a loss plot with `count` curves."""
    rows = max(1, math.ceil(count / PLOT_COLUMNS))
    return int(PLOT_COLUMNS * PLOT_TILE[0] * PLOT_DPI), int(rows * PLOT_TILE[1] * PLOT_DPI)


def smooth(values, weight):
    """TensorBoard-style exponential smoothing with debiasing, skipping missing values."""
    out, average, count = [], 0.0, 0
    for value in values:
        if value is None or not math.isfinite(value):
            out.append(float("nan"))
            continue
        count += 1
        average = weight * average + (1 - weight) * value
        out.append(average / (1 - weight**count))
    return out


def plot_losses(records, stages, path, total_steps=None, ended=()):
    """Draw the loss curves of `records` (from metrics.jsonl) into the PNG `path`.

    One panel per loss value, all on one x axis (global steps 0 to `total_steps`, or to the
    last record); the smoothed curve solid, the raw values faint behind; every stage boundary
    a dashed vertical line, labelled at the top with the name of the stage it starts. Labels
    that would overlap (short stages) move down a row.

    Args:
        records: metrics records.
        stages: `[(name, first global step)]`, in order.
        path: the PNG to write (atomically).
        total_steps: the right end of the x axis (the run's length).
        ended: global steps where a stage ended on its `until` condition (a solid red line
            under the dashed boundary).
    """
    figure = loss_figure(records, stages, total_steps, ended)
    atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=PLOT_DPI, format="png"))
    return path


def loss_figure(records, stages, total_steps=None, ended=()):
    """The matplotlib `Figure` that `plot_losses` saves."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = loss_names(records)
    width, height = plot_size(len(names))
    figure = Figure(figsize=(width / PLOT_DPI, height / PLOT_DPI), dpi=PLOT_DPI)
    canvas = FigureCanvasAgg(figure)
    rows = max(1, math.ceil(len(names) / PLOT_COLUMNS))
    if not names:
        figure.text(0.5, 0.5, "no losses logged yet", ha="center", va="center")
    weight = 0.9 if len(records) > 50 else 0.6
    right = total_steps or max([r["step"] for r in records] + [1])
    panels = []
    for index, name in enumerate(names):
        axes = figure.add_subplot(rows, PLOT_COLUMNS, index + 1)
        points = [(r["step"], r.get(name)) for r in records if r.get(name) is not None]
        steps = np.array([p[0] for p in points])
        values = [p[1] for p in points]
        if name.endswith("/learning_rate"):  # a schedule: drawn as it is, not smoothed
            axes.plot(steps, values, color="tab:blue", linewidth=1.5)
        else:
            axes.plot(steps, values, color="tab:blue", alpha=0.25, linewidth=0.8)
            axes.plot(steps, smooth(values, weight), color="tab:blue", linewidth=1.5)
        for step in ended:
            axes.axvline(step, color="tab:red", linewidth=1.2, alpha=0.7)
        for stage_index, (_, first) in enumerate(stages):
            if stage_index:
                axes.axvline(first, color="grey", linestyle="--", linewidth=0.8)
        axes.set_title(name, fontsize=9)
        axes.tick_params(labelsize=7)
        compact_ticks(axes)
        axes.set_xlabel("global step", fontsize=7)
        axes.set_xlim(0, right)
        panels.append(axes)
    margins(figure, rows)
    renderer = canvas.get_renderer()
    for axes in panels:
        label_stages(axes, stages, renderer)
    return figure


PLOT_TICKS = 6  # at most, per axis (and at least 3 on y, 2 on x)


def compact_ticks(axes):
    """Up to `PLOT_TICKS` ticks a side (at least 3 on y; whole steps on x, so a 1-step run has
    2), and y labels that fit the left margin: an axis whose largest tick in magnitude is
    below 0.01 or from 1e4 in scientific notation (a learning rate decaying from 0.0002 to
    0.0001996 reads 1.999 to 1.996 under a 1e-4, not 0.0001999 cut by the figure's edge),
    and no offset: a label is its value, not its difference from a constant shared by the
    axis. A nearly flat curve elsewhere may still need many digits (0.01999980 for a rate of
    0.02 decaying by a millionth a step), as wide as the margin allows or wider."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    steps = [1, 2, 2.5, 5, 10]  # round numbers, as matplotlib's default locator
    bins = PLOT_TICKS - 1  # MaxNLocator's bins: one tick more than intervals
    axes.xaxis.set_major_locator(MaxNLocator(bins, steps=steps, integer=True, min_n_ticks=2))
    axes.yaxis.set_major_locator(MaxNLocator(bins, steps=steps, min_n_ticks=3))
    axes.yaxis.set_major_formatter(ScalarFormatter(useOffset=False))
    axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
    axes.yaxis.get_offset_text().set_fontsize(7)


# Inches around each panel: tick labels (7 pt, up to 8 characters) and the x label below, the
# title (9 pt) above. Fixed margins rather than `tight_layout`, which measured every text and
# took a third of a plot's time, on every stage end of every run.
PLOT_MARGINS = {"left": 0.6, "right": 0.15, "top": 0.3, "bottom": 0.45}


def margins(figure, rows):
    """Lay out `rows` x `PLOT_COLUMNS` panels of `PLOT_TILE` inches with `PLOT_MARGINS`."""
    (tile_w, tile_h), m = PLOT_TILE, PLOT_MARGINS
    width, height = PLOT_COLUMNS * tile_w, rows * tile_h
    axes_w, axes_h = tile_w - m["left"] - m["right"], tile_h - m["top"] - m["bottom"]
    figure.subplots_adjust(
        left=m["left"] / width,
        right=1 - m["right"] / width,
        bottom=m["bottom"] / height,
        top=1 - m["top"] / height,
        wspace=(m["left"] + m["right"]) / axes_w,
        hspace=(m["top"] + m["bottom"]) / axes_h,
    )


LABEL_ROW = 0.09  # axes fraction between rows of stage labels


def label_stages(axes, stages, renderer):
    """Stage names at the top of `axes`, each starting at its stage's first step; a label
    that would overlap one already placed moves down a row. Returns the labels' boxes."""
    placed = []
    for name, first in stages:
        y = 0.98
        while True:
            text = axes.text(
                first,
                y,
                f" {name}",
                transform=axes.get_xaxis_transform(),
                fontsize=7,
                va="top",
                ha="left",
                color="dimgrey",
                clip_on=False,
            )
            box = text.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed) or y < 0.1:
                break
            text.remove()
            y -= LABEL_ROW
        placed.append(box)
    return placed
