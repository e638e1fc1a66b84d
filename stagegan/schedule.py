"""Where a run is: one global step counter across all stages, mapped to (stage, step in stage).

Stages run in order, each for `stage.steps` stage steps. Global step g (0-based, counting steps
already taken) lies in the stage whose cumulative range holds it. Example, with stages of 200,
100 and 5000 steps: global step 250 is step 50 of stage 1; the run ends at global step 5300.
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
    """Walks the stage records. Knows nothing about what a stage does."""

    def __init__(self, stages):
        self.stages = tuple(stages)
        self.starts = []
        total = 0
        for stage in self.stages:
            self.starts.append(total)
            total += stage.steps
        self.total_steps = total

    def position(self, global_step):
        """The position of global step `global_step` (0 <= global_step < total_steps)."""
        if not 0 <= global_step < self.total_steps:
            raise IndexError(f"global step {global_step} is outside 0..{self.total_steps - 1}")
        index = bisect.bisect_right(self.starts, global_step) - 1
        return Position(global_step, index, global_step - self.starts[index])

    def stage_end(self, stage_index):
        """The global step count at which stage `stage_index` is complete."""
        return self.starts[stage_index] + self.stages[stage_index].steps

    def positions(self, start=0):
        """Every position from global step `start` to the end of the run."""
        for global_step in range(start, self.total_steps):
            yield self.position(global_step)
