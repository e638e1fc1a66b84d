"""What `train`, `train --resume`, `plan`, `sample` and `eval` do, once their input is checked:
the library code under both the command line (`stagegan.cli.main`) and the Python API
(`stagegan.api`), so the two give the same results.

Importing this module imports TensorFlow (the CLI silences its native log lines first).
"""

import dataclasses
import json
import logging
import tempfile
from pathlib import Path

import numpy as np

from stagegan.config.objects import find_user_modules
from stagegan.run.planning import describe_budget, describe_plan
from stagegan.run.reading import evaluate_run, read_clusters, restore_run, sample_arrays
from stagegan.run.resume import commit, restore
from stagegan.run.warmstart import warm_start
from stagegan.runfolder.dirs import RunFolder
from stagegan.training import watchdogs
from stagegan.training.loop import build_evaluation, train
from stagegan.training.trainer import Trainer

log = logging.getLogger("stagegan")


def run(plan):
    """Train as the `TrainPlan` `plan` says (checked already: nothing is checked again);
    returns the run folder."""
    if plan.resume is not None:
        return _resume(plan)
    return _start(plan)


def _start(plan):
    """A new run, trained to its end. What needs the networks is checked before the folder
    exists (the warm start's variables, the evaluation's needs, tracing every stage). A
    non-chief multi-worker worker trains into a temporary folder (`worker`)."""
    config, chief = plan.config, plan.chief
    for warning in plan.warnings():
        log.warning("warning: %s", warning)
    trainer = Trainer(config)  # a new run finds its own clusters
    if chief:
        announce(trainer.placement)
        for key, value, why in trainer.task.decided_options():
            log.info("%s auto: %s (%s)", key, value, why)
    if plan.init_prefix is not None:
        warm_start(trainer, plan.init_prefix)
    # before the run folder exists, and the slow trace
    evaluation = build_evaluation(trainer) if chief else None
    trainer.trace()
    if not chief:
        return worker(trainer, plan.run_dir)
    folder = RunFolder.create(plan.run_dir, name=config.name)
    lock = folder.lock()  # noqa: F841 - held while training
    config = record_decisions(config, trainer.task)
    folder.write(RunFolder.CONFIG, config.to_yaml())
    record_data(trainer, folder)
    log.info("run folder: %s", folder.path)
    train(trainer, folder.path, evaluation=evaluation)
    return folder.path


def _resume(plan):
    """Go on with a run from its resume plan's checkpoint, with the accepted changes."""
    resume = plan.resume
    if plan.finished:
        log.info("%s already finished at step %d; nothing to do", resume.run_dir, resume.step)
        return resume.run_dir
    find_user_modules()  # custom tasks and networks, as in a fresh `train`
    recorded = read_clusters(resume.run_dir, resume.config.data, "--resume")
    trainer = Trainer(resume.config, resume.ends, resume.until, recorded_clusters=recorded)
    if plan.chief:
        announce(trainer.placement)
    trainer.trace(from_step=resume.step)
    restore(trainer, resume)
    evaluation = build_evaluation(trainer) if plan.chief else None  # before any change
    if not plan.chief:
        return worker(trainer, resume.run_dir)
    lock = RunFolder(resume.run_dir).lock("--resume")  # noqa: F841 - held while training
    commit(resume, log)
    record_data(trainer, RunFolder(resume.run_dir))
    train(trainer, resume.run_dir, evaluation=evaluation)
    return resume.run_dir


def record_decisions(config, task):
    """`config` with the values the task decided for its `auto` options, which the run's
    config.yaml records (a resume, `sample` and `eval` then use them as they are)."""
    raw = dict(config.raw)
    for key, value, _ in task.decided_options():
        section, name = key.split(".")
        raw[section] = {**raw.get(section, {}), name: value}
    return dataclasses.replace(
        config, data=raw.get("data", config.data), model=raw.get("model", config.model), raw=raw
    )


def record_data(trainer, folder):
    """Write the clusters of a run on `data.labels: clusters` into its folder, unless they
    are there: the classes a resumed run, `sample` and `eval` reuse; and its `data.holdout`
    split as this start found the folder, for people to read."""
    source = getattr(trainer.task, "source", None)
    clustered = getattr(source, "clusters", None)
    if clustered is not None and not (folder.path / RunFolder.CLUSTERS).exists():
        folder.write(RunFolder.CLUSTERS, json.dumps(clustered))
    split = getattr(source, "split", None)
    if split is not None:  # the folder as this start read it (files may have been added)
        folder.write(RunFolder.HOLDOUT, json.dumps(split, indent=1))


def announce(placement):
    """Say where the run computes (one line), and warn when GPUs were asked for but none is
    seen (a broken CUDA install would otherwise train on the CPU without a word)."""
    log.info("%s", placement.describe())
    if placement.warning:
        log.warning("warning: %s", placement.warning)


def worker(trainer, run_dir):
    """A non-chief worker: the same steps and checkpoint saves as the chief (TensorFlow's
    multi-worker rule), into a temporary folder that is deleted at the end. It writes no
    samples, logs or evaluations, and logs warnings only."""
    log.setLevel(logging.WARNING)
    config = trainer.config
    trainer.config = dataclasses.replace(
        config,
        samples=None,
        eval=None,
        log=dataclasses.replace(config.log, tensorboard=False, histograms=0, progress="lines"),
    )
    with tempfile.TemporaryDirectory(prefix="stagegan-worker-") as folder:
        watchdogs.TEMPORARY.append(folder)  # removed too if a peer's loss ends the process at once
        try:
            train(trainer, Path(folder), run_name=run_dir, chief_config=config)
        finally:
            watchdogs.TEMPORARY.remove(folder)
    return Path(run_dir) if run_dir else None


def describe(config, run_dir=None, budget=None):
    """The plan of `config`: a built and traced trainer, described (`stagegan plan`; with
    `run_dir`, the plan of that run, on the clusters it recorded; with `budget`, seconds, a
    few steps of each stage are timed and the plan says how many fit: `describe_budget`)."""
    trainer = traced_trainer(config, run_dir)
    text = describe_plan(trainer)
    if budget is not None:
        text += "\n\n" + "\n".join(describe_budget(trainer, budget))
    return text


def traced_trainer(config, run_dir=None):
    """A `Trainer` of `config`, built and every stage traced, quietly (a plan lists the
    dropped variables itself); with `run_dir`, on the clusters that run recorded. Nothing is
    written: `plan` describes it, `plan --budget` and `compare --budget` time its steps."""
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        recorded = None if run_dir is None else read_clusters(run_dir, config.data)
        trainer = Trainer(config, recorded_clusters=recorded)
        trainer.trace()
    finally:
        log.setLevel(level)
    return trainer


def sample(run_dir, num, checkpoint=None, **options):
    """`num` samples of a run's checkpoint, as `sample --output X.npy` writes them; `options`
    are `reading.sample_arrays`'s (seed, ema, batch_size, class_name, truncation, interpolate)."""
    trainer, _ = restore_run(run_dir, checkpoint)
    _, outputs, _, _ = sample_arrays(trainer, num, **options)
    return np.asarray(trainer.task.export(outputs), np.float32)


def evaluate(run_dir, count=None, seed=None, checkpoint=None, features=None, **options):
    """A run's checkpoint evaluated, as `eval --json` prints it (also appended to
    `RUN/eval.jsonl`); `options` are `reading.evaluate_run`'s (ema, batch_size, memorise,
    nearest)."""
    trainer, path = restore_run(run_dir, checkpoint)
    return evaluate_run(trainer, run_dir, path, count, seed, features, **options)
