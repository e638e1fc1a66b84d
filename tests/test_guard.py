"""The NaN/Inf guard: a NaN injected by the test's toy task into one row of one global batch
(so into one tower's shard, on one chosen step) must skip exactly that update, name the stage,
update, loss term and tower, stop when told to, and never reach a checkpoint."""

import json
import logging

import numpy as np
import pytest
import yaml
from toytask import D_UPDATE, G_UPDATE, two_stage_config

from stagegan.cli import main as cli
from stagegan.config.schema import parse_config
from stagegan.errors import GuardStop
from stagegan.runfolder.checkpoints import CheckpointStore
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer

# 4 towers of 2 rows: row 5 lies in tower 2. Real-batch draws: alternating step k draws 2k (D)
# and 2k+1 (G); joint step j draws 8 + j.
BASE = two_stage_config(
    "guarded",
    1,
    4,
    3,
    first_name="alternating",
    first_updates=[D_UPDATE, G_UPDATE],
    devices={"towers": 4},
)


def make(nan_draws, **changes):
    raw = {**BASE, "data": {"nan_draws": nan_draws, "nan_row": 5}, **changes}
    return Trainer(parse_config(raw))


def state(trainer):
    weights = {v.path: v.numpy().copy() for v in trainer.variables}
    counts = {k: int(o.iterations.numpy()) for k, o in trainer.optimizers.items()}
    return weights, counts


def changed(before, after, scope):
    return [p for p in before if p.startswith(scope) and not np.array_equal(before[p], after[p])]


@pytest.mark.parametrize("strategy", ["towers", "mirrored"])
@pytest.mark.parametrize("draw, step", [(2, 1), (9, 5)], ids=["sequential", "simultaneous"])
def test_skip_leaves_only_the_poisoned_update_unapplied(draw, step, strategy, caplog):
    trainer = make([draw], devices={"towers": 4, "strategy": strategy})
    positions = list(trainer.schedule.positions())
    for position in positions[:step]:
        trainer.step(position)
    (weights, counts) = state(trainer)
    with caplog.at_level(logging.WARNING, logger="stagegan"):
        metrics = trainer.step(positions[step]).metrics
    after, after_counts = state(trainer)
    assert changed(weights, after, "discriminator/") == []
    assert counts["d"] == after_counts["d"]  # the optimizer never saw the update
    assert len(changed(weights, after, "generator/")) == 4 and after_counts["g"] == counts["g"] + 1
    assert np.isnan(float(metrics["discriminator/d_loss"]))
    assert np.isfinite(float(metrics["generator/g_loss"]))
    stage = positions[step].stage_index
    name = BASE["stages"][stage]["name"]
    assert trainer.guard.events == [
        {
            "step": step + 1,
            "stage": name,
            "update": "discriminator",
            "skipped": 1,
            "in_a_row": 1,
            "terms": {"d_loss": [2]},
            "gradient_towers": [2],
            "text": "non-finite loss term d_loss in tower 2 (/CPU:2); "
            "non-finite gradients in tower 2 (/CPU:2)",
            "action": "skip",
        }
    ]
    assert f"[{name}] step {step + 1}: update 'discriminator' not applied: " in caplog.text
    # The next step trains both again.
    before = state(trainer)[0]
    trainer.step(positions[step + 1])
    assert changed(before, state(trainer)[0], "discriminator/")


def test_stop_policy_stops_at_once_and_keeps_the_last_finite_checkpoint(tmp_path):
    trainer = make([4], guard={"policy": "stop"})  # alternating step 2's D batch
    with pytest.raises(GuardStop) as stopped:
        train(trainer, tmp_path)
    assert stopped.value.message == (
        "[alternating] step 3: update 'discriminator' not applied: non-finite loss term d_loss "
        "in tower 2 (/CPU:2); non-finite gradients in tower 2 (/CPU:2); stopped: guard.policy "
        "is stop; the last checkpoint, ckpt-00000002, holds finite weights"
    )
    assert [e["step"] for e in CheckpointStore(tmp_path / "checkpoints", None, 1).entries()] == [
        1,
        2,
    ]
    events = [json.loads(line) for line in (tmp_path / "guard.jsonl").read_text().splitlines()]
    assert [(e["step"], e["action"]) for e in events] == [(3, "stop")]


def test_skips_in_a_row_stop_the_run(tmp_path):
    trainer = make([2, 4, 6], guard={"policy": "skip", "max_consecutive": 3})
    with pytest.raises(
        GuardStop, match=r"step 4: .* stopped: 3 skips in a row \(guard\.max_consecutive\)"
    ):
        train(trainer, tmp_path)
    events = [json.loads(line) for line in (tmp_path / "guard.jsonl").read_text().splitlines()]
    assert [(e["step"], e["in_a_row"], e["action"]) for e in events] == [
        (2, 1, "skip"),
        (3, 2, "skip"),
        (4, 3, "stop"),
    ]


def test_skips_in_a_row_are_counted_across_a_resume(tmp_path):
    """The same run as above, checkpointed after two skips in a row and restored into a fresh
    trainer: the third skip still stops it (the counter is checkpointed, not restarted)."""
    first = make([2, 4, 6], guard={"policy": "skip", "max_consecutive": 3})
    positions = list(first.schedule.positions())
    for position in positions[:3]:
        first.step(position)
    assert [e["in_a_row"] for e in first.guard.events] == [1, 2]
    path = first.checkpoint.write(str(tmp_path / "ckpt"))
    second = make([2, 4, 6], guard={"policy": "skip", "max_consecutive": 3})
    second.checkpoint.read(path).assert_existing_objects_matched()
    with pytest.raises(GuardStop, match=r"step 4: .* stopped: 3 skips in a row"):
        second.step(positions[3])
    assert [(e["in_a_row"], e["action"]) for e in second.guard.events] == [(3, "stop")]


def test_skips_apart_do_not_add_up(tmp_path):
    trainer = make([2, 6], guard={"policy": "skip", "max_consecutive": 2})
    train(trainer, tmp_path)  # steps 2 and 4 skip D; step 3 applied it in between
    assert trainer.guard.skipped == 2 and trainer.step_count == 7


def test_unguarded_nan_never_reaches_a_checkpoint(tmp_path):
    trainer = make([2], guard={"policy": "off"})
    with pytest.raises(
        GuardStop,
        match=r"^guard: \[alternating\] step 2: refusing to write a checkpoint with non-finite "
        r"values in generator/hidden/kernel, .* and 21 more; the last checkpoint, ckpt-00000001",
    ):
        train(trainer, tmp_path)
    store = CheckpointStore(tmp_path / "checkpoints", None, 1)
    assert [e["step"] for e in store.entries()] == [1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "ckpt-00000001.data-00000-of-00001",
        "ckpt-00000001.index",
        "index.json",
    ]


def test_cli_prints_one_line_and_exits_3(tmp_path, capfd):
    config = tmp_path / "c.yaml"
    raw = {**BASE, "data": {"nan_draws": [4], "nan_row": 5}, "guard": {"policy": "stop"}}
    config.write_text(yaml.safe_dump(raw))
    status = cli.main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")])
    err = capfd.readouterr().err
    assert status == 3
    assert err.splitlines() == [
        "stagegan: error: guard: [alternating] step 3: update 'discriminator' not applied: "
        "non-finite loss term d_loss in tower 2 (/CPU:2); non-finite gradients in tower 2 "
        "(/CPU:2); stopped: guard.policy is stop; the last checkpoint, ckpt-00000002, holds "
        "finite weights"
    ]


def test_guard_off_is_spelled_off_or_false():
    assert parse_config({**BASE, "guard": {"policy": False}}).guard.policy == "off"
    assert parse_config({**BASE, "guard": {"policy": "off"}}).guard.policy == "off"
    assert parse_config(BASE).guard.max_consecutive == 20
