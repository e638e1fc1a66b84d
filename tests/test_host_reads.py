"""No host round trip per step: the train loop reads what a step returns (metrics, the NaN
guard's results, an `until` threshold's metric) only at the steps where it reads anyway (log
lines, checkpoints, `until` checks, stage ends), and the guard still stops at the same step.

Every tensor a step returns is wrapped in a proxy that records, at each read (`float`, `int`,
`numpy`, `np.asarray`), the last step that had run: those must be read points only.
"""

import json

import numpy as np
import pytest
from toytask import two_stage_config

from stagegan.config.schema import parse_config
from stagegan.core.guard import GuardResult
from stagegan.core.steps import StageStep, StepOutput
from stagegan.errors import GuardStop
from stagegan.training.loop import train
from stagegan.training.trainer import Trainer


class Reads:
    """The steps (1-based, the last one run) at which each read happened."""

    def __init__(self):
        self.current = 0
        self.at = []


class Counted:
    def __init__(self, tensor, reads):
        self.tensor, self.reads = tensor, reads

    def _read(self):
        self.reads.at.append(self.reads.current)
        return self.tensor.numpy()

    def __float__(self):
        return float(self._read())

    def __int__(self):
        return int(self._read())

    def __bool__(self):
        return bool(self._read())

    def numpy(self):
        return self._read()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._read(), dtype=dtype)


@pytest.fixture
def counted(monkeypatch):
    reads = Reads()
    call = StageStep.__call__

    def wrapped(self, stage_step, with_gradients=False):
        output = call(self, stage_step, with_gradients)
        reads.current += 1

        def wrap(tensor):
            return Counted(tensor, reads)

        guard = {
            name: GuardResult(*(wrap(t) for t in result)) for name, result in output.guard.items()
        }
        metrics = {name: wrap(t) for name, t in output.metrics.items()}
        gradients = {name: wrap(t) for name, t in output.gradients.items()}
        return StepOutput(metrics, guard, gradients)

    monkeypatch.setattr(StageStep, "__call__", wrapped)
    return reads


def config(**changes):
    """D alone 6 steps (an `until` checked every 4 steps, never met), then 6 joint steps; a
    log line every 5 steps, a checkpoint every 9."""
    raw = two_stage_config(
        "reads",
        0,
        6,
        6,
        checkpoint={"every": 9, "keep": 3},
        log={"every": 5, "tensorboard": False, "progress": "lines"},
        **changes,
    )
    raw["stages"][0]["until"] = {"metric": "discriminator/d_loss", "below": -1.0, "check_every": 4}
    return raw


def test_reads_happen_only_at_log_checkpoint_check_and_stage_end_steps(counted, tmp_path):
    train(Trainer(parse_config(config())), tmp_path)
    # log lines: 5, 10 and the stage ends 6, 12; the until check: 4; the checkpoint: 9
    assert sorted(set(counted.at)) == [4, 5, 6, 9, 10, 12]
    assert counted.current == 12


def test_the_guard_still_stops_at_the_step_it_counted(counted, tmp_path):
    """Skips at steps 2 and 3 (real-batch draws 1 and 2 poisoned; D alone draws one batch a
    step): with max_consecutive 2 the run stops at step 3, found at the until check (step 4),
    before any checkpoint; guard.jsonl has both skips."""
    raw = config(
        data={"nan_draws": [1, 2], "nan_row": 0},
        guard={"policy": "skip", "max_consecutive": 2},
    )
    with pytest.raises(GuardStop, match=r"\[d_only\] step 3: .* 2 skips in a row"):
        train(Trainer(parse_config(raw)), tmp_path)
    assert sorted(set(counted.at)) == [4]
    events = [json.loads(line) for line in (tmp_path / "guard.jsonl").read_text().splitlines()]
    assert [(e["step"], e["in_a_row"], e["action"]) for e in events] == [
        (2, 1, "skip"),
        (3, 2, "stop"),
    ]
    assert not (tmp_path / "checkpoints").exists()


def test_an_until_threshold_ends_its_stage_at_the_same_step_as_when_read_every_step(tmp_path):
    """The threshold's mean is the same whether each step's value is read at once or at the
    check: the reference reads every step itself (a plain loop over `Trainer.step`)."""
    raw = config()
    trainer = Trainer(parse_config(raw))
    values = []
    for position in list(trainer.schedule.positions())[:4]:
        values.append(float(trainer.step(position).metrics["discriminator/d_loss"]))
    mean = float(np.mean(values))
    raw["stages"][0]["until"]["below"] = mean + 1e-6
    run = tmp_path / "until"
    run.mkdir()
    train(Trainer(parse_config(raw)), run)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ended = [r for r in records if "stage_ended" in r]
    assert ended[0]["step"] == 4
    assert ended[0]["stage_ended"] == (
        f"until discriminator/d_loss < {mean + 1e-6:g}: mean {mean:.4g} over 4 steps"
    )


def test_unchanged_for_direct_callers_of_trainer_step():
    """`Trainer.step` outside the loop still acts on the guard at once."""
    raw = config(data={"nan_draws": [0], "nan_row": 0}, guard={"policy": "stop"})
    trainer = Trainer(parse_config(raw))
    with pytest.raises(GuardStop, match=r"step 1: "):
        trainer.step(next(iter(trainer.schedule.positions())))
