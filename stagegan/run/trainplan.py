"""One run plan: what a `train` will do (a new run, a warm start, or a resume), checked once.

Either door (the CLI or the Python API) makes a `TrainPlan` before TensorFlow is imported,
so every refusal comes first, as one line, with nothing on disk; `stagegan.run.runner.run(plan)`
then builds the trainer and trains. Nothing is checked twice: the runner trusts the plan.
As stylegan2-ada's `train.py`, which validates its arguments once and then launches.

This module imports no TensorFlow.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from stagegan.config.cluster import is_chief
from stagegan.core.until import never_checked
from stagegan.run.reading import resolve_init
from stagegan.run.resume import plan_resume
from stagegan.runfolder.dirs import RunFolder

log = logging.getLogger("stagegan")


@dataclass(frozen=True)
class TrainPlan:
    """A checked train.

    Attributes:
        config: the `RunConfig` to train; a warm start's with its source checkpoint's step
            filled in, a resume's with the accepted `--set` changes.
        run_dir: the run folder (`pathlib.Path`), or None: a new run's next
            `runs/<name>-N`, made when training starts.
        chief: whether this process writes the folder (not a non-chief multi-worker
            worker's).
        init_prefix: a warm start's source checkpoint (`--init-from`), or None.
        resume: the `stagegan.run.resume.ResumePlan` of `train --resume`, or None.
    """

    config: object
    run_dir: object
    chief: bool
    init_prefix: object = None
    resume: object = None

    @classmethod
    def new(cls, config, run_dir=None, chief=None):
        """A new run of `config` (a `RunConfig`) into `run_dir` (None: the next free one);
        `chief`: None asks the cluster (a multi_worker run).

        Raises:
            ConfigError: a warm start's source run or checkpoint is missing or damaged;
                `run_dir` exists and is not empty; a multi-worker run without a folder.
        """
        config, prefix = resolve_init(config)
        if chief is None:
            chief = is_chief(config, run_dir)
        if run_dir and chief:
            RunFolder.check_new(run_dir)
        return cls(config, Path(run_dir) if run_dir else None, chief, prefix)

    @classmethod
    def resumed(cls, run_dir, overrides=(), checkpoint=None, chief=None):
        """`train --resume run_dir` from `checkpoint` (None: the newest), with the `--set`
        changes `overrides`; `chief`: None asks the cluster.

        Raises:
            ConfigError: no run there, a damaged index or checkpoint, a change that a
                resume cannot make (see `stagegan.run.resume`).
        """
        plan = plan_resume(run_dir, overrides, checkpoint)
        done = plan.step >= plan.total_steps
        if chief is None:
            chief = True if done else is_chief(plan.config, plan.run_dir)
        return cls(plan.config, plan.run_dir, chief, None, plan)

    @property
    def finished(self):
        """A resume of a run that has already run every step: nothing to do."""
        return self.resume is not None and self.resume.step >= self.resume.total_steps

    def warnings(self):
        """Lines a chief warns with at the start (an `until` that is never checked)."""
        if not self.chief or self.resume is not None:
            return []
        return [w for w in map(never_checked, self.config.stages) if w]
