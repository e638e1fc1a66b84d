"""Where a run is: one global step counter across all stages, mapped to (stage, step in stage).

Stages run in order, each for `stage.steps` stage steps. Global step g (0-based, counting steps
already taken) lies in the stage whose cumulative range holds it. Example, with stages of 200,
100 and 5000 steps: global step 250 is step 50 of stage 1; the run ends at global step 5300.

A stage with an `until:` condition (`stagegan.core.until`) may end before its `steps`: `end_stage`
records how many steps it ran, and every later stage moves earlier. Those ends are part of a
checkpoint, so a resumed run maps global steps to stages as the original did.
"""

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class Position:
    """The next step to run: `stage_step` of stage `stage_index`, which is global `global_step`."""

    global_step: int
    stage_index: int
    stage_step: int


class Schedule:
    """Walks the stage records. Knows nothing about what a stage does.

    Args:
        stages: the `config.Stage` records.
        ends: `{stage index: steps run}` for stages that ended early on their condition.
    """

    def __init__(self, stages, ends=None):
        self.stages = tuple(stages)
        self.ends = {}
        self._layout()
        for index, length in (ends or {}).items():
            self.end_stage(index, length)

    def _layout(self):
        self.lengths = [self.ends.get(i, stage.steps) for i, stage in enumerate(self.stages)]
        self.starts, total = [], 0
        for length in self.lengths:
            self.starts.append(total)
            total += length
        self.total_steps = total

    def end_stage(self, stage_index, length):
        """Stage `stage_index` ends after `length` of its steps (1 <= length <= its steps)."""
        if not 1 <= length <= self.stages[stage_index].steps:
            raise ValueError(
                f"stage {self.stages[stage_index].name!r} cannot end after {length} steps"
            )
        self.ends[stage_index] = length
        self._layout()

    def position(self, global_step):
        """The position of global step `global_step` (0 <= global_step < total_steps)."""
        if not 0 <= global_step < self.total_steps:
            raise IndexError(f"global step {global_step} is outside 0..{self.total_steps - 1}")
        index = bisect.bisect_right(self.starts, global_step) - 1
        return Position(global_step, index, global_step - self.starts[index])

    def stage_end(self, stage_index):
        """The global step count at which stage `stage_index` is complete."""
        return self.starts[stage_index] + self.lengths[stage_index]

    def steps_done(self, stage_index, global_step):
        """How many of stage `stage_index`'s steps are done at global step `global_step`."""
        return min(max(global_step - self.starts[stage_index], 0), self.lengths[stage_index])

    def positions(self, start=0):
        """Every position from global step `start` to the end of the run (which moves when a
        stage ends early while they are walked)."""
        global_step = start
        while global_step < self.total_steps:
            yield self.position(global_step)
            global_step += 1
