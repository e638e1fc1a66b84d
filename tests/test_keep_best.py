"""Keeping the best checkpoint (`checkpoint.keep_best`) and rolling a stage back to it
(`until: {restore: best}`).

The best step is found by hand: a reference run keeps a checkpoint at every evaluation, and
the toy task's `gap` is computed from each checkpoint's weights in numpy. The rollback is
checked against the reference run's checkpoints (rolled-back objects as at the best step,
the rest as at the stage's end), and a run stopped after the rollback and resumed must end
bit-identical to the uninterrupted one.
"""

import copy
import json
import logging

import numpy as np
import pytest
from clihelp import assert_user_error, inprocess
from toytask import EVAL_Z, G_UPDATE, finished_run, read_checkpoint, two_stage_config

from stagegan.config.schema import parse_config
from stagegan.errors import ConfigError

EVERY = 2  # evaluations (and the reference run's checkpoints) every 2 steps
FIRST = 14  # the stage that rolls back: at most 14 steps
POLISH = {"name": "polish", "steps": 3, "updates": [{**G_UPDATE, "optimizer": "p"}]}


def rollback_config(restore=True, keep=1):
    """D alone 2 steps, then D and G together (with a fast G, so the gap wanders) for at
    most 14 steps, ended by a gap plateau (patience 3) and rolled back to the best, then a
    G-only polish with its own optimizer."""
    raw = two_stage_config(
        "best",
        3,
        2,
        FIRST,
        deterministic=True,
        checkpoint={"every": EVERY, "keep": keep, "keep_best": {"metric": "gap", "mode": "min"}},
        eval={"every": EVERY},
    )
    raw["optimizers"]["g"]["learning_rate"] = 0.3
    raw["optimizers"]["p"] = {"type": "adam", "learning_rate": 0.001}
    until = {"eval": "gap", "mode": "min", "patience": 3, "check_every": EVERY}
    if restore:
        until["restore"] = "best"
    raw["stages"][1]["until"] = until
    raw["stages"].append(copy.deepcopy(POLISH))
    return raw


def gap_by_hand(checkpoint, mean=1.0):
    """The toy task's `gap` from a checkpoint's generator weights, in numpy."""
    values = read_checkpoint(checkpoint)

    def weight(name):
        return values[f"generator:{name}/.ATTRIBUTES/VARIABLE_VALUE"]

    z = np.array(EVAL_Z, np.float32)
    hidden = np.tanh(z @ weight("hidden:kernel") + weight("hidden:bias"))
    out = hidden @ weight("out:kernel") + weight("out:bias")
    return float(np.abs(out.mean(axis=0) - np.array([mean, -mean])).sum())


def index_of(run):
    return json.loads((run / "checkpoints" / "index.json").read_text())["checkpoints"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(reference: every checkpoint kept, no rollback; rollback: keep 1, rollback)."""
    folder = tmp_path_factory.mktemp("best")
    reference = finished_run(folder / "reference", rollback_config(restore=False, keep=100))
    rollback = finished_run(folder / "rollback", rollback_config())
    return reference, rollback


def stage_end(run, stage):
    return next(e for e in index_of(run) if f"stage_end:{stage}" in e["tags"])


def test_the_best_checkpoint_is_the_lowest_gap_by_hand_and_survives_rotation(runs):
    reference, rollback = runs
    end = stage_end(reference, "joint")["step"]
    evaluated = [e for e in index_of(reference) if e["step"] % EVERY == 0 and e["step"] <= end]
    gaps = {e["step"]: gap_by_hand(reference / "checkpoints" / e["prefix"]) for e in evaluated}
    best = min(gaps, key=lambda step: (gaps[step], step))
    assert best < end, gaps  # the stage went on past its best: there is something to roll back
    tagged = [e for e in index_of(reference) if "best" in e["tags"]]
    assert [e["step"] for e in tagged] == [best]
    assert tagged[0]["best"]["value"] == pytest.approx(gaps[best], abs=1e-6)
    # keep 1: the periodic checkpoint at the best step would have rotated away; `best` keeps it
    rolled = [e for e in index_of(rollback) if "best" in e["tags"]]
    assert rolled and rolled[0]["step"] == best
    periodic = [e for e in index_of(rollback) if e["tags"] == ["periodic"]]
    assert len(periodic) <= 1


def test_the_next_stage_starts_from_the_best_weights_and_optimizer_state(runs):
    reference, rollback = runs
    best = next(e for e in index_of(reference) if "best" in e["tags"])["step"]
    end = stage_end(reference, "joint")
    assert stage_end(rollback, "joint")["step"] == end["step"]
    at_best = read_checkpoint(reference / "checkpoints" / f"ckpt-{best:08d}")
    at_end = read_checkpoint(reference / "checkpoints" / end["prefix"])
    restored = read_checkpoint(rollback / "checkpoints" / stage_end(rollback, "joint")["prefix"])
    moving_on = ("global_step", "rng_", "toy_draws", "guard_in_a_row_")
    assert any(k.startswith("optimizer_g") for k in restored)
    for key, value in restored.items():
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        expected = at_end if key.startswith(moving_on) else at_best
        np.testing.assert_array_equal(value, expected[key], err_msg=key)
    # the polish stage moved on from there: the final weights differ from the best's
    final = read_checkpoint(rollback / "checkpoints" / index_of(rollback)[-1]["prefix"])
    key = "generator:out:kernel/.ATTRIBUTES/VARIABLE_VALUE"
    assert not np.array_equal(final[key], at_best[key])


def test_a_run_stopped_after_the_rollback_resumes_bit_identical(runs, tmp_path):
    from stagegan.training.loop import train
    from stagegan.training.trainer import Trainer

    _, rollback = runs
    end = stage_end(rollback, "joint")["step"]
    run = tmp_path / "stopped"
    run.mkdir()
    config = parse_config(rollback_config())
    (run / "config.yaml").write_text(config.to_yaml())
    # Stop one step into the polish: the newest checkpoint is the rolled-back stage end.
    train(Trainer(config), run, stop_after=end + 1)
    assert index_of(run)[-1]["step"] == end
    result = inprocess("train", "--resume", run)
    assert result.returncode == 0, result.stderr
    expected = read_checkpoint(rollback / "checkpoints" / index_of(rollback)[-1]["prefix"])
    actual = read_checkpoint(run / "checkpoints" / index_of(run)[-1]["prefix"])
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)
    assert [e["step"] for e in index_of(run) if "best" in e["tags"]] == [
        e["step"] for e in index_of(rollback) if "best" in e["tags"]
    ]


def test_sample_and_eval_take_checkpoint_best(runs, tmp_path):
    reference, _ = runs
    best = next(e for e in index_of(reference) if "best" in e["tags"])
    result = inprocess("eval", "--run", reference, "--checkpoint", "best", "--json")
    assert result.returncode == 0, result.stderr
    metrics = json.loads(result.stdout)
    assert metrics["step"] == best["step"]
    by_hand = gap_by_hand(reference / "checkpoints" / best["prefix"])
    assert metrics["metrics"]["gap"] == pytest.approx(by_hand, abs=1e-6)


def test_one_rule_decides_better_for_keep_best_and_plateaus():
    from stagegan.core.monitor import improves, reading

    assert improves(3.0, None, "min") and improves(3.0, None, "max")  # the first is the best
    assert improves(2.9, 3.0, "min") and not improves(3.0, 3.0, "min")  # ties do not
    assert improves(3.1, 3.0, "max") and not improves(2.9, 3.0, "max")
    assert not improves(2.6, 3.0, "min", min_delta=0.5) and improves(2.4, 3.0, "min", 0.5)
    assert [reading({"fid": v}, "fid") for v in (2, 2.5, True, None, "x", float("nan"))] == [
        2.0, 2.5, None, None, None, None,
    ]  # fmt: skip
    assert reading({}, "fid") is None
    with pytest.raises(ValueError, match="'auto'"):  # resolved when the run is built
        improves(1.0, 2.0, "auto")


def test_keep_best_and_a_plateau_warn_alike_of_an_evaluation_without_the_value(caplog):
    """The one monitor reads for both: NaN, None or a missing name count for neither, with
    the same warning naming who watches, the step and the metric."""
    from stagegan.core.monitor import Monitor

    with caplog.at_level(logging.WARNING, logger="stagegan"):
        for who in ("checkpoint.keep_best", "stages[1].until"):
            monitor = Monitor("fid", "min", who=who)
            assert monitor.read({"fid": float("nan")}, 40) is None
            assert monitor.read({"fid": 3}, 42) == 3.0
    assert [r.getMessage() for r in caplog.records] == [
        f"{who}: the evaluation at step 40 has no value for fid; it neither improves nor counts"
        for who in ("checkpoint.keep_best", "stages[1].until")
    ]


def test_plan_shows_keep_best_and_the_rollback():
    from stagegan.run.planning import describe_checkpoints

    config = parse_config(rollback_config())
    assert describe_checkpoints(config) == [
        "checkpoints: keep best: the checkpoint of the lowest eval gap, tagged best"
    ]
    assert config.stages[1].until.describe().endswith("; at its end, restore the best checkpoint")


@pytest.mark.parametrize(
    "change, key",
    [
        (
            {"checkpoint": {"keep_best": {"metric": "gap", "mode": "up"}}},
            "checkpoint.keep_best.mode",
        ),
        ({"checkpoint": {"keep_best": {"mode": "min"}}}, "checkpoint.keep_best.metric"),
        ({"checkpoint": {"keep_best": {"metric": "gap", "when": 1}}}, "checkpoint.keep_best.when"),
        (
            {"checkpoint": {"keep_best": {"metric": "gap", "mode": "min"}}, "eval": None},
            "checkpoint.keep_best",
        ),
        ({"checkpoint": {"keep_best": None}}, "stages[1].until.restore"),
    ],
)
def test_bad_keep_best_settings_name_their_key(change, key):
    raw = rollback_config()
    if "eval" in change:
        raw["stages"][1].pop("until")
        raw["eval"] = None
    raw["checkpoint"] = {**raw["checkpoint"], **change["checkpoint"]}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert caught.value.key == key


def test_restore_must_be_best():
    raw = rollback_config()
    raw["stages"][1]["until"]["restore"] = "latest"
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert caught.value.key == "stages[1].until.restore"


def test_checkpoint_best_of_a_run_without_one_is_one_line(tmp_path):
    raw = two_stage_config("plain", 0, 1, 1, checkpoint={"every": 1, "keep": 2})
    run = finished_run(tmp_path / "plain", raw)
    out = tmp_path / "s.npy"
    result = inprocess("sample", "--run", run, "--checkpoint", "best", "--num", 4, "--output", out)
    assert_user_error(result, "--checkpoint", "no checkpoint tagged best")
    assert not out.exists()


def test_keep_best_cannot_change_on_resume(runs):
    reference, _ = runs
    before = (reference / "checkpoints" / "index.json").read_text()
    result = inprocess("train", "--resume", reference, "--set", "checkpoint.keep_best.mode=max")
    assert_user_error(result, "checkpoint.keep_best", "cannot change on resume")
    assert (reference / "checkpoints" / "index.json").read_text() == before


def test_keep_best_is_refused_for_multi_worker_runs():
    raw = rollback_config()
    raw["devices"] = {"strategy": "multi_worker"}
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert caught.value.key == "checkpoint.keep_best"


def test_a_metric_the_task_does_not_evaluate_is_refused_before_the_first_step():
    from stagegan.training.trainer import Trainer

    raw = rollback_config()
    raw["checkpoint"]["keep_best"] = {"metric": "fid", "mode": "min"}
    with pytest.raises(ConfigError) as caught:
        Trainer(parse_config(raw))
    assert caught.value.key == "checkpoint.keep_best.metric"
    assert "evaluates no 'fid' (it has: gap)" in caught.value.message


def test_a_resume_repairs_a_best_tag_left_on_two_checkpoints(tmp_path):
    """A kill between writing the new best and moving the tag leaves `best` on both; the
    resume from the new one leaves it there alone (the old keeps its periodic slot)."""
    from stagegan.config.schema import KeepBest
    from stagegan.runfolder.checkpoints import CheckpointStore
    from stagegan.training.checkpointing import BestKeeper

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    best = {"metric": "gap", "value": 0.5, "step": 4}
    entries = [
        {"step": 2, "prefix": "ckpt-00000002", "tags": ["best", "periodic"], "files": {}},
        {"step": 4, "prefix": "ckpt-00000004", "tags": ["best"], "files": {}, "best": best},
    ]
    (folder / "index.json").write_text(json.dumps({"checkpoints": entries}))
    store = CheckpointStore(folder, None, 3)
    keeper = BestKeeper.resume(KeepBest("gap", "min"), store, 4)
    assert (keeper.value, keeper.step) == (0.5, 4)
    assert [(e["step"], e["tags"]) for e in store.entries()] == [(2, ["periodic"]), (4, ["best"])]
