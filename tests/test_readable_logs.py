"""What a user reads while a run trains: interval means in metrics.jsonl, the progress bar's
numbers, the loss plot's axes and stage labels, titled sample pictures, and completion
pictures laid out in columns."""

import io
import json
import math

import matplotlib
import numpy as np
import pytest
from test_outputs import config

from stagegan.core.schedule import Position, Schedule
from stagegan.runfolder import pictures
from stagegan.runfolder.logs import (
    PLOT_TICKS,
    Progress,
    format_duration,
    format_rate,
    loss_figure,
)
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer


def records(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


@pytest.fixture(scope="module")
def every_step(tmp_path_factory):
    """The toy run with a record at every step: each step's own losses."""
    run_dir = tmp_path_factory.mktemp("every1")
    train(Trainer(config(log={"every": 1, "progress": "lines"}, samples=None)), run_dir)
    return records(run_dir)


def test_logged_losses_are_means_over_the_log_interval(every_step, tmp_path):
    train(Trainer(config(log={"every": 3, "progress": "lines"}, samples=None)), tmp_path)
    logged = records(tmp_path)
    # Records at 2 (g_only's end: steps 1-2), 3 (d_only's first step alone: the interval
    # restarts at each record), 4 (d_only's end), 6 (joint steps 5-6) and 7 (step 7).
    assert sorted(logged) == [2, 3, 4, 6, 7]
    spans = {2: (1, 2), 3: (3,), 4: (4,), 6: (5, 6), 7: (7,)}
    for step, steps in spans.items():
        for name in ("generator/g_loss", "discriminator/d_loss", "generator/grad_norm"):
            values = [every_step[s][name] for s in steps if name in every_step[s]]
            if not values:
                continue
            assert logged[step][name] == pytest.approx(np.mean(values), rel=1e-6), (step, name)
    # The steps differ, so a single step's value would not pass.
    assert every_step[1]["generator/g_loss"] != every_step[2]["generator/g_loss"]


def test_durations_are_h_mm_ss_and_rates_have_sensible_digits():
    assert format_duration(0.0) == "0:00:00"
    assert format_duration(310.4) == "0:05:10"
    assert format_duration(3723) == "1:02:03"
    assert format_duration(float("nan")) == "--:--:--"
    assert format_rate(105500.0273) == "105,500"
    assert format_rate(523.4) == "523"
    assert format_rate(12.345) == "12.3"
    assert format_rate(0.4234) == "0.42"


def test_progress_bar_shows_eta_as_h_mm_ss_and_plain_rates():
    schedule = Schedule(config().stages)
    stream = io.StringIO()
    progress = Progress(schedule, "bar", 0, stream=stream)
    progress.stage_started(Position(0, 0, 0))
    progress.step(Position(0, 0, 0), 1, {"generator/g_loss": 0.69314718}, 105500.0273)
    progress.step(Position(1, 0, 1), 2)
    text = stream.getvalue()
    assert "[g_only] 2/2" in text and text.endswith("\n")
    assert "105,500 ex/s" in text and "| g_loss 0.6931" in text
    assert "e+0" not in text and "e-0" not in text
    left = [part for part in text.split() if part.count(":") == 2]
    assert left and all(len(p.split(":")[1]) == 2 for p in left)


def test_the_console_shows_the_trained_losses_and_full_shows_everything():
    from stagegan.config.schema import Stage, Update

    def update(name, *terms):
        loss = tuple((t, 1.0) for t in terms)
        return Update(name=name, train=("x/*",), loss=loss, optimizer="opt", key="u")

    updates = (update("d", "d_loss"), update("g", "g_loss"))
    stage = Stage(name="joint", steps=4, mode="simultaneous", updates=updates, key="stages[0]")
    updates = (update("a", "loss"), update("b", "loss", "gp"))
    twice = Stage(name="pair", steps=4, mode="simultaneous", updates=updates, key="stages[1]")
    values = {
        "d/d_loss": 1.25,
        "d/d_real_accuracy": 0.5,
        "d/grad_norm": 3.0,
        "g/g_loss": 0.75,
        "g/learning_rate": 1e-4,
        "augment/p": 0.1,
        "a/loss": 2.0,
        "b/loss": 3.0,
        "b/gp": 4.0,
    }
    progress = Progress(Schedule((stage, twice)), "lines", 0)
    assert progress.shown(Position(0, 0, 0), values) == {"d_loss": 1.25, "g_loss": 0.75}
    # Two updates train on a term named `loss`: theirs keep the update's name.
    shown = progress.shown(Position(4, 1, 0), values)
    assert shown == {"a/loss": 2.0, "b/loss": 3.0, "gp": 4.0}
    full = Progress(Schedule((stage, twice)), "lines", 0, console="full")
    assert full.shown(Position(0, 0, 0), values) == values
    bar = Progress(Schedule((stage, twice)), "bar", 0, console="full", stream=io.StringIO())
    assert "d/grad_norm" not in bar.shown(Position(0, 0, 0), values)
    bar.close()


def test_a_log_line_mid_stage_starts_on_a_line_of_its_own():
    import logging

    schedule = Schedule(config().stages)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("stagegan")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        progress = Progress(schedule, "bar", 0, stream=stream)
        progress.stage_started(Position(0, 0, 0))
        progress.step(Position(0, 0, 0), 1, {"generator/g_loss": 0.5}, 10.0)
        logger.info("eval at step 1")
        progress.close()
        logger.info("after the run")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = stream.getvalue().split("\n")
    assert "eval at step 1" in lines and "after the run" in lines
    assert any(line.startswith("\r[g_only] 1/2") for line in lines)


def stage_boxes(figure):
    """Each panel's stage-label boxes, in display pixels."""
    renderer = figure.canvas.get_renderer()
    return [
        [t.get_window_extent(renderer) for t in axes.texts if t.get_text().strip()]
        for axes in figure.axes
    ]


def test_loss_panels_share_the_run_axis_and_stage_labels_do_not_overlap():
    records = [
        {"step": s, "generator/g_loss": 1.0 / s, **({"discriminator/d_loss": 0.5} if s > 3 else {})}
        for s in range(1, 1001)
    ]
    stages = [("completion", 0), ("discriminator", 2), ("joint", 4), ("polish", 600)]
    figure = loss_figure(records, stages, total_steps=1200)
    assert len(figure.axes) == 2
    assert all(axes.get_xlim() == (0, 1200) for axes in figure.axes)
    for boxes in stage_boxes(figure):
        assert len(boxes) == 4
        for i, a in enumerate(boxes):
            assert not any(a.overlaps(b) for b in boxes[i + 1 :])


def test_sample_pictures_carry_a_title_strip():
    picture = np.zeros((40, 120, 3), np.uint8)
    titled = pictures.with_title(picture, "step 1,200, stage joint")
    assert titled.shape == (40 + pictures.TITLE_HEIGHT, 120, 3)
    np.testing.assert_array_equal(titled[pictures.TITLE_HEIGHT :], picture)
    strip = titled[: pictures.TITLE_HEIGHT]
    assert (strip < 128).any() and (strip > 250).mean() > 0.5  # dark text on white


@pytest.mark.parametrize("width", [230, 262, 401])  # widths matplotlib rounds a pixel off
def test_the_title_strip_fits_any_picture_width(width):
    titled = pictures.with_title(np.zeros((10, width, 3), np.uint8), "step 1, stage s")
    assert titled.shape == (10 + pictures.TITLE_HEIGHT, width, 3)


def test_many_completion_rows_are_laid_out_in_columns():
    rows = np.zeros((100, 16, 16, 3), np.float32)
    picture = pictures.image_rows([rows, rows, rows, rows])
    height, width = picture.shape[:2]
    assert 0.5 < width / height < 2.0  # not one 100-row column
    tile = 64 + pictures.GAP  # 16 px enlarged to 64
    per_block = math.ceil(math.sqrt(100 * 4))
    assert height == per_block * tile - pictures.GAP
    # A few rows keep the single column of rows.
    few = pictures.image_rows([rows[:8]] * 4)
    assert few.shape[:2] == (8 * tile - pictures.GAP, 4 * tile - pictures.GAP)


def drawn_ticks(axis):
    """The major ticks `axis` draws (inside its view)."""
    low, high = sorted(axis.get_view_interval())
    return [t for t in axis.get_major_ticks() if low <= t.get_loc() <= high]


def test_tick_labels_fit_the_figure_and_small_values_read_in_scientific_notation():
    """A learning rate decaying from 2e-4 by a millionth a step: its labels would be twelve
    characters (0.0001999975), cut by the figure's left edge, or differences from an offset.
    Every drawn tick label stays inside the figure, every axis draws 3 to `PLOT_TICKS`
    ticks, and the rate's labels times the 1e-4 above its axis are the tick values."""
    records = [
        {"step": s, "generator/learning_rate": 2e-4 * (1 - s / 1e6), "generator/g_loss": 10.0 * s}
        for s in range(1, 11)
    ]
    # matplotlib's defaults, whatever a matplotlibrc says (mathtext or a locale's decimal comma
    # would change the labels' text, not what the plot shows)
    defaults = {"axes.formatter.use_mathtext": False, "axes.formatter.use_locale": False}
    with matplotlib.rc_context(defaults):
        figure = loss_figure(records, [("polish", 0)], total_steps=10)
        figure.canvas.draw()  # places the labels as the saved PNG has them
    renderer = figure.canvas.get_renderer()
    width, height = figure.canvas.get_width_height()
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            shown = drawn_ticks(axis)
            assert 3 <= len(shown) <= PLOT_TICKS
            for tick in shown:
                box = tick.label1.get_window_extent(renderer)
                assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height
    rate = next(a for a in figure.axes if a.get_title() == "generator/learning_rate")
    minus = lambda text: text.replace("\u2212", "-")  # matplotlib's minus sign
    assert minus(rate.yaxis.get_offset_text().get_text()) == "1e-4"
    for tick in drawn_ticks(rate.yaxis):
        value = float(minus(tick.label1.get_text()))
        assert value * 1e-4 == pytest.approx(tick.get_loc(), abs=1e-12)
    # Runs of 2 steps and of 1: whole steps on the x axis, not 0.5 or 0.2.
    for steps in (2, 1):
        short = loss_figure(records[:steps], [("polish", 0)], total_steps=steps)
        short.canvas.draw()
        assert [t.get_loc() for t in drawn_ticks(short.axes[0].xaxis)] == list(range(steps + 1))
