import pytest

from stagegan.config.schema import Stage
from stagegan.core.schedule import Schedule


def stages(*lengths):
    return [
        Stage(name=f"s{i}", steps=n, mode="sequential", updates=(), key=f"stages[{i}]")
        for i, n in enumerate(lengths)
    ]


def test_positions_follow_cumulative_stage_lengths():
    schedule = Schedule(stages(200, 100, 5000))
    assert schedule.total_steps == 5300
    p = schedule.position(0)
    assert (p.global_step, p.stage_index, p.stage_step) == (0, 0, 0)
    p = schedule.position(250)
    assert (p.global_step, p.stage_index, p.stage_step) == (250, 1, 50)
    p = schedule.position(199)
    assert (p.stage_index, p.stage_step) == (0, 199)
    p = schedule.position(200)
    assert (p.stage_index, p.stage_step) == (1, 0)
    p = schedule.position(5299)
    assert (p.stage_index, p.stage_step) == (2, 4999)
    assert schedule.stage_end(1) == 300
    with pytest.raises(IndexError):
        schedule.position(5300)


def test_positions_resume_midway():
    schedule = Schedule(stages(2, 3))
    got = [(p.stage_index, p.stage_step) for p in schedule.positions(start=1)]
    assert got == [(0, 1), (1, 0), (1, 1), (1, 2)]
