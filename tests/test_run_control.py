"""Run control: extending a run on resume, and stages that end on a condition (`until`).

Extending is checked against the longer config trained from the start, to the last bit.
An `until` stage's end is checked against the step computed by hand from a plain run's
metrics, and a run killed (SIGKILL, a real subprocess) in the middle of that stage must end it
at the same step, with the same weights.
"""

import json
import logging
import signal
import sys
import time

import numpy as np
import pytest
import yaml
import zygote
from clihelp import ROOT, inprocess
from toytask import G_UPDATE, finished_run, read_checkpoint, two_stage_config

import stagegan
from stagegan.config.schema import parse_config
from stagegan.core.losses import AccuracyMonitor, discriminator_accuracy
from stagegan.core.schedule import Schedule
from stagegan.core.steps import StepOutput
from stagegan.core.until import Conditions, never_checked
from stagegan.training.loop import end_stage, make_tick
from stagegan.training.trainer import monitors_of

TIME_FIELDS = ("time", "wall_time", "examples_per_sec")
G2 = {"type": "adam", "learning_rate": 0.02}
MORE_G = {"name": "g_more", "steps": 2, "updates": [{**G_UPDATE, "optimizer": "g2"}]}
# Its own optimizer, the default (inline, private to this update).
MORE_D = {"name": "d_more", "steps": 2, "updates": [{"train": "discriminator/*", "loss": "d_loss"}]}


def records(path, drop=TIME_FIELDS):
    lines = path.read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


def assert_same_checkpoints(expected, actual, subset=False):
    """Every value equal; `subset`: `actual` may lack objects (a run before its extension)."""
    expected, actual = read_checkpoint(expected), read_checkpoint(actual)
    if subset:
        assert set(actual) < set(expected)
        expected = {k: v for k, v in expected.items() if k in actual}
        del expected["_CHECKPOINTABLE_OBJECT_GRAPH"], actual["_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)


# Extending a finished run -----------------------------------------------------------------


def short_config():
    """D alone 2 steps, then 3 joint steps that carry an `until` never met and never checked
    (check_every 10): its running sum goes on over the extension."""
    raw = two_stage_config("ext", 5, 2, 3, deterministic=True, checkpoint={"every": 0, "keep": 1})
    until = {"metric": "discriminator/d_loss", "below": -1.0, "check_every": 10}
    raw["stages"][1]["until"] = until
    return raw


def test_extended_run_is_bit_identical_to_the_longer_config_from_the_start(tmp_path):
    short = finished_run(tmp_path / "short", short_config())
    extend = [
        "stages[1].steps=5",  # the finished last stage grows by 2
        f"optimizers.g2={json.dumps(G2)}",  # a new named optimizer, for a new stage
        f"stages[+]={json.dumps(MORE_G)}",
        f"stages[+]={json.dumps(MORE_D)}",
    ]
    result = inprocess("train", "--resume", short, *[a for s in extend for a in ("--set", s)])
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stdout and "changed on resume: stages[2]" in result.stdout

    raw = short_config()
    raw["stages"][1]["steps"] = 5
    raw["optimizers"]["g2"] = G2
    raw["stages"] += [MORE_G, MORE_D]
    longer = finished_run(tmp_path / "long", raw)
    for step in (2, 7, 9, 11):  # before the extension, then the longer config's stage ends
        name = f"checkpoints/ckpt-{step:08d}"
        assert_same_checkpoints(longer / name, short / name, subset=step == 2)
    assert records(short / "metrics.jsonl") == records(longer / "metrics.jsonl")
    entries = [json.loads((run / "checkpoints/index.json").read_text()) for run in (short, longer)]
    states = [{e["step"]: e["until"] for e in index["checkpoints"]} for index in entries]
    assert states[0][11] == states[1][11] and states[1][11]["count"] == 5  # joint's 5 steps
    finals = [
        [e["step"] for e in index["checkpoints"] if "final" in e["tags"]] for index in entries
    ]
    assert finals == [[11], [11]]  # the old end (step 5) lost its `final` on the extension
    resumed = records(short / "resume.jsonl", drop=())
    assert resumed[0]["no_longer_final"] == ["ckpt-00000005"]
    saved = yaml.safe_load((short / "config.yaml").read_text())
    assert [s["name"] for s in saved["stages"]] == ["d_only", "joint", "g_more", "d_more"]
    assert saved["stages"][1]["steps"] == 5 and saved["optimizers"]["g2"] == G2
    again = inprocess("train", "--resume", short)
    assert again.returncode == 0 and "already finished at step 11" in again.stdout


# Stages that end on a condition -----------------------------------------------------------

CHECK = 3  # check_every
ENDS_AT_CHECK = 4  # the threshold is chosen so that the 4th check ends the stage: step 12


def until_config(threshold=None):
    """D alone for up to 30 steps (until its loss falls below `threshold`), then 3 joint."""
    raw = two_stage_config(
        "until",
        2,
        30,
        3,
        deterministic=True,
        checkpoint={"every": 4, "keep": 9},
        optimizers={"g": {"type": "adam", "learning_rate": 0.01}, "d": {"type": "sgd"}},
    )
    if threshold is not None:
        until = {"metric": "discriminator/d_loss", "below": threshold, "check_every": CHECK}
        raw["stages"][0]["until"] = until
    return raw


@pytest.fixture(scope="module")
def threshold(tmp_path_factory):
    """The threshold, from the d_loss of every step of the same run without `until`: between
    the mean of the 4th check's interval and the lowest mean of the 3 before it."""
    run = finished_run(tmp_path_factory.mktemp("plain") / "run", until_config())
    losses = [r["discriminator/d_loss"] for r in records(run / "metrics.jsonl")[:30]]
    means = [float(np.mean(losses[i : i + CHECK])) for i in range(0, 30, CHECK)]
    before, at = min(means[: ENDS_AT_CHECK - 1]), means[ENDS_AT_CHECK - 1]
    assert at < before, means  # the stage's loss goes down: a threshold in between exists
    return (at + before) / 2


@pytest.fixture(scope="module")
def until_runs(tmp_path_factory, threshold):
    """The `until` run uninterrupted (in process), and killed with SIGKILL after step 10 (a
    real process; the last checkpoint is step 8, inside the interval of the check at 12),
    then resumed."""
    base = tmp_path_factory.mktemp("until")
    raw = until_config(threshold)
    whole = finished_run(base / "whole", raw)
    (base / "until.yaml").write_text(yaml.safe_dump(raw))
    killed = zygote.run(
        [sys.executable, str(ROOT / "tests" / "crash_run.py"), "after-step", "10", "--"]
        + ["train", "--config", str(base / "until.yaml"), "--run-dir", str(base / "killed")],
        cwd=ROOT,
        env={
            "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
            "PATH": "/usr/bin:/bin",
            "STAGEGAN_TEST_NO_GRAPPLER": "1",  # computes as the in-process `whole` run does
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = inprocess("train", "--resume", base / "killed")
    assert resumed.returncode == 0, resumed.stderr
    return whole, base / "killed", resumed


def test_until_ends_the_stage_at_the_step_computed_by_hand(until_runs):
    whole, _, _ = until_runs
    index = json.loads((whole / "checkpoints" / "index.json").read_text())["checkpoints"]
    tags = {e["step"]: e["tags"] for e in index}
    assert tags[CHECK * ENDS_AT_CHECK] == ["stage_end:d_only"]
    assert tags[15] == ["final", "stage_end:joint"]  # 12 + 3 joint steps
    assert index[-1]["until"]["ends"] == {"d_only": 12}
    ended = [r for r in records(whole / "metrics.jsonl") if "stage_ended" in r]
    assert [(r["step"], r["stage"]) for r in ended] == [(12, "d_only")]
    assert ended[0]["stage_ended"].startswith("until discriminator/d_loss < ")
    assert (whole / "plots" / "losses.png").stat().st_size > 0


def test_until_stage_ends_at_the_same_step_after_a_sigkill(until_runs):
    whole, killed, resumed = until_runs
    assert "stage ends at step 12, after 12 of at most 30 steps: until" in resumed.stdout
    resumes = records(killed / "resume.jsonl", drop=())
    assert [r["step"] for r in resumes] == [8]
    for step in (12, 15):
        name = f"checkpoints/ckpt-{step:08d}"
        assert_same_checkpoints(whole / name, killed / name)
    assert records(killed / "metrics.jsonl") == records(whole / "metrics.jsonl")


def test_plan_shows_the_condition(tmp_path):
    path = tmp_path / "until.yaml"
    path.write_text(yaml.safe_dump(until_config(0.5)))
    result = inprocess("plan", "--config", path)
    assert result.returncode == 0, result.stderr
    assert "2 stages, 33 steps at most" in result.stdout
    assert (
        "  until: discriminator/d_loss (mean since the last check) < 0.5, checked every 3 "
        "steps; at most 30 steps"
    ) in result.stdout


def test_plan_warns_of_an_until_that_is_never_checked(tmp_path):
    """Checked every 40 steps of a 30-step stage, the condition never is: a warning line
    under the stage, from the command and the API alike (not an error)."""
    raw = until_config(0.5)
    raw["stages"][0]["until"]["check_every"] = 40
    path = tmp_path / "until.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = inprocess("plan", "--config", path)
    assert result.returncode == 0, result.stderr
    warning = (
        "  warning: stages[0].until.check_every: 40 is more than the stage's 30 steps, so the "
        "condition is never checked and the stage runs all its steps"
    )
    assert warning in result.stdout.splitlines()
    assert warning in stagegan.plan(raw).splitlines()
    assert "warning" not in stagegan.plan(until_config(0.5))


@pytest.mark.parametrize(
    "steps, check_every, min_steps, first",
    [(30, 40, 0, 40), (30, 7, 29, 35), (30, 30, 0, None), (30, 7, 28, None), (30, 1, 0, None)],
)
def test_never_checked_by_hand(steps, check_every, min_steps, first):
    """Checks fall at multiples of check_every; those before min_steps do not count. 7, 29:
    the first that counts would be 35 > 30. 7, 28: 28 counts."""
    raw = until_config(0.5)
    raw["stages"][0]["steps"] = steps
    raw["stages"][0]["until"].update(check_every=check_every, min_steps=min_steps)
    warning = never_checked(parse_config(raw).stages[0])
    if first is None:
        assert warning is None
    else:
        assert warning.startswith(f"stages[0].until.check_every: {check_every} ")
        assert ("more than the stage's" if first == check_every else f"would be at {first}") in (
            warning
        )


def test_an_ended_until_stage_cannot_be_extended_and_later_stages_move(until_runs):
    whole, _, _ = until_runs
    result = inprocess("train", "--resume", whole, "--set", "stages[0].steps=40")
    assert result.returncode == 2
    assert "stage 'd_only' ended on its until condition after 12 steps" in result.stderr
    grown = inprocess("train", "--resume", whole, "--set", "stages[1].steps=5")
    assert grown.returncode == 0, grown.stderr
    index = json.loads((whole / "checkpoints" / "index.json").read_text())["checkpoints"]
    assert index[-1]["step"] == 17 and "final" in index[-1]["tags"]


class FakeEvaluation:
    def __init__(self, values):
        self.values = iter(values)

    def run(self):
        return {"metrics": {"fid": next(self.values)}}


def test_plateau_counts_checks_without_improvement_by_hand():
    """fid at checks 1..7: 10, 8, none, 7.6, 7.7, 7.5, 7.45 with min_delta 0.5 and patience
    3: 8 improves on 10 (best 8); check 3 has no value and does not count; 7.6, 7.7, 7.5 do not
    improve by more than 0.5: the 3rd check without improvement (check 6, stage step 12) ends
    the stage."""
    raw = until_config()
    until = {"eval": "fid", "patience": 3, "min_delta": 0.5, "check_every": 2, "mode": "min"}
    raw["stages"][0]["until"] = until
    config = parse_config(raw)
    schedule = Schedule(config.stages)
    conditions = Conditions(schedule, FakeEvaluation([10, 8, None, 7.6, 7.7, 7.5, 7.45]))
    logging.getLogger("stagegan").setLevel(logging.WARNING)
    ended = None
    for position in schedule.positions(0):
        tick = make_tick(schedule, position)
        reason = conditions.check(tick)
        if reason:
            end_stage(schedule, tick, reason)
            ended = position.global_step + 1
            break
    assert ended == 12 and schedule.ends == {0: 12} and schedule.total_steps == 15
    assert conditions.state() == {
        "ends": {"d_only": 12},
        "total": 0.0,
        "count": 0,
        "best": 8.0,
        "bad": 3,
    }


def test_threshold_skips_steps_where_its_update_did_not_run():
    """The interval mean leaves out NaN (an update's idle steps): (0.4 + 0.2) / 2 = 0.3."""
    raw = until_config()
    raw["stages"][0]["until"] = {"metric": "discriminator/d_loss", "below": 0.31, "check_every": 4}
    config = parse_config(raw)
    schedule = Schedule(config.stages)
    conditions = Conditions(schedule)

    for position, value in zip(
        schedule.positions(0), [0.4, float("nan"), 0.2, float("nan")], strict=False
    ):
        tick = make_tick(schedule, position)
        tick.output = StepOutput({"discriminator/d_loss": value}, {}, {})
        reason = conditions.check(tick)
    end_stage(schedule, tick, reason)
    assert reason == "until discriminator/d_loss < 0.31: mean 0.3 over 2 steps"
    assert tick.stage_done and not tick.final and schedule.total_steps == 7


def test_discriminator_accuracy_by_hand():
    """Logits (and critics) call a sample real above 0; least squares above 0.5."""
    real, fake = [1.0, -1.0, 2.0, 0.0], [-1.0, 0.5, -2.0, 0.0]
    values = discriminator_accuracy(real, fake)
    assert float(values["d_real_accuracy"]) == 0.5  # 1 and 2 are above 0
    assert float(values["d_fake_accuracy"]) == 0.75  # -1, -2 and 0 are not
    monitor = AccuracyMonitor("least_squares")
    values = monitor(real, fake, ("d_loss", "d_fake_accuracy"))
    # Against 0.5, every fake (-1, 0.5, -2, 0) is at or below: called fake.
    assert list(values) == ["d_fake_accuracy"] and float(values["d_fake_accuracy"]) == 1.0
    assert AccuracyMonitor("hinge")(real, fake, ("d_loss",)) == {}


def test_built_in_tasks_log_accuracy_beside_their_discriminator_loss():
    from stagegan.tasks.mog2d import Mog2D

    update = parse_config(until_config()).stages[0].updates[0]
    assert monitors_of(Mog2D, update) == ("d_real_accuracy", "d_fake_accuracy")


STUCK = """
import sys
from stagegan.cli.main import main
from stagegan.training.watchdogs import StopSignals
StopSignals.GRACE = 2.0  # the test's patience; 10 s in a real run
sys.exit(main(sys.argv[1:]))
"""


def test_a_step_that_never_finishes_still_stops_on_sigterm(tmp_path):
    """Real batches that block forever inside step 5 (a py_function sleeping, where Python's
    signal handler cannot run): SIGTERM still ends the run after the grace period, with one
    line naming the stuck step and the newest checkpoint, status 143."""
    raw = two_stage_config("stuck", 0, 2, 20, samples=None)
    raw["task"] = "toytask:blocking_factory"
    raw["data"] = {"block_after": 4}  # draws 1-4: steps 1-4; step 5 blocks
    config = tmp_path / "stuck.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "run"
    process = zygote.Process(
        [sys.executable, "-c", STUCK, "train", "--config", str(config), "--run-dir", str(run_dir)],
        cwd=ROOT / "tests",
        stdout=zygote.PIPE,
        stderr=zygote.PIPE,
        text=True,
    )
    index = run_dir / "checkpoints" / "index.json"
    deadline = time.monotonic() + 120
    while not (index.exists() and '"step": 4' in index.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(process.communicate()[1])
        time.sleep(0.2)
    time.sleep(1.0)  # inside step 5 by now, for good
    process.send_signal(signal.SIGTERM)
    began = time.monotonic()
    try:
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert time.monotonic() - began < 15
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1] == (
        "stagegan: error: SIGTERM: step 5 did not finish within 2 s; stopped without it (the "
        f"newest checkpoint is step 4; continue with: python -m stagegan train --resume {run_dir})"
    )
    steps = [e["step"] for e in json.loads(index.read_text())["checkpoints"]]
    assert steps[-1] == 4  # nothing of the stuck step was written


def test_until_decides_the_same_in_a_two_worker_run(tmp_path, threshold):
    """Two real worker processes (MultiWorkerMirroredStrategy) compute the same averaged metrics,
    so both end the `until` stage at the step computed by hand (12), in step with each
    other (a disagreement would hang their collectives), and the run finishes at 15."""
    from clihelp import workers

    (tmp_path / "until.yaml").write_text(yaml.safe_dump(until_config(threshold)))
    (tmp_path / "tmp").mkdir()
    args = ["--config", "until.yaml", "--run-dir", "run"]
    results = workers(*args, cwd=tmp_path, env={"TMPDIR": str(tmp_path / "tmp")})
    assert [r.returncode for r in results] == [0, 0], [r.stderr[-3000:] for r in results]
    index = json.loads((tmp_path / "run/checkpoints/index.json").read_text())["checkpoints"]
    tags = {e["step"]: e["tags"] for e in index}
    assert tags[CHECK * ENDS_AT_CHECK] == ["stage_end:d_only"]
    assert tags[15] == ["final", "stage_end:joint"]
    assert index[-1]["until"]["ends"] == {"d_only": 12}
