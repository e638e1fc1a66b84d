"""Resuming a run: `python -m stagegan train --resume RUN [--checkpoint STEP] [--set K=V ...]`.

A checkpoint holds everything the next step depends on, so a resumed run goes on exactly as
the uninterrupted run would have (with `deterministic: true`, to the last bit on CPU):

    global step         -> the stage and the step within it (`Schedule.position`)
    network weights     every variable, BatchNorm statistics included
    optimizers          each one's slots (moments) and iteration count
    EMA                 the generator average
    random streams      the philox states of the data stream (generated data, batch indices
                        into in-memory images) and the noise stream (latents, masks)
    data position       in-memory sources (shapes, folder, npz, keras datasets) draw batches
                        from the data stream, so its state is their position, exactly;
                        `tfrecord` checkpoints its tf.data iterator (shuffle buffer included);
                        an image task's batch staged for the next step is checkpointed too
    sample inputs       `samples/inputs.npz`, written before the first step and reused

Resuming runs in three steps, and nothing in the run folder changes until the first two pass:
`plan_resume` (no TensorFlow: the folder, the checkpoint's files, the `--set` changes),
`restore` (into a freshly built trainer), then `commit` (clean-up and records).
"""

import datetime
import json
import re
from dataclasses import dataclass
from pathlib import Path

from stagegan.config.overrides import format_key_path
from stagegan.config.schema import (
    BEFORE_START,
    WHILE_RUNNING,
    apply_overrides,
    parse_config,
    resumable_keys,
    stage_resume_rule,
)
from stagegan.core.schedule import Schedule
from stagegan.core.until import stage_ends
from stagegan.core.variables import STAGED_PREFIX, optimizer_key, slug
from stagegan.errors import ConfigError, first_line
from stagegan.run.reading import pick_checkpoint, run_config
from stagegan.runfolder.atomic import atomic_write
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.logs import append_jsonl, tensorboard_session_start
from stagegan.runfolder.samples import INPUTS, read_inputs

RESUME_LOG = RunFolder.RESUME_LOG
# What `--set` may change on resume: keys that do not change what was already computed. The
# sections' fields say so themselves (`option(..., resume=True)` in `stagegan.config.schema`).
SAFE = (
    re.compile(r"optimizers\.[^.\[\]]+\.learning_rate(\.\w+)?"),
    re.compile(r"stages\[\d+\]\.updates\[\d+\]\.optimizer\.learning_rate(\.\w+)?"),
    re.compile("|".join(re.escape(key) for key in resumable_keys())),
    re.compile(r"eval"),  # evaluation turned on or off: it writes only its own records
    re.compile(r"devices\.towers\[\d+\]"),  # one device of a tower list
)
SAFE_TEXT = (
    "learning rates; the steps of the current stage (more than it has run) and of stages not "
    "yet reached; the until of stages not yet reached; new stages at the end (stages[+]) and "
    "new named optimizers for them; eval (any of it); "
    + ", ".join(k for k in resumable_keys() if not k.startswith("eval."))
)
# Run-folder logs keyed by global step; a resumed run drops their records after its checkpoint.
STEP_LOGS = (RunFolder.METRICS, RunFolder.GUARD, f"{RunFolder.SAMPLES}/manifest.jsonl")


@dataclass(frozen=True)
class ResumePlan:
    """A checked resume: the run's config with the accepted changes, and where to start.

    `entry` is the checkpoint's index entry (None: no checkpoint yet, start from step 0);
    `changes` maps each changed key path to `(old, new)`; `kept_stages`: how many stages the
    run had before (the rest were appended on this resume); `ends`: `{stage index: steps
    run}` of the stages that ended on their `until` (see `stagegan.core.until`); `until`: the
    condition checks' state at the checkpoint.
    """

    run_dir: Path
    config: object
    entry: object
    step: int
    changes: dict
    checkpoint_key: str
    kept_stages: int
    ends: dict
    until: dict

    @property
    def total_steps(self):
        """Where the run ends now (an upper bound while an `until` stage is ahead)."""
        return Schedule(self.config.stages, self.ends).total_steps

    @property
    def store(self):
        return RunFolder(self.run_dir).checkpoints()

    @property
    def prefix(self):
        return None if self.entry is None else self.store.path_of(self.entry)


def plan_resume(run_dir, overrides=(), checkpoint=None):
    """Check everything a resume needs that TensorFlow is not needed for.

    Args:
        run_dir: the run folder.
        overrides: `--set` strings, applied to the run's own `config.yaml`.
        checkpoint: `--checkpoint`: a global step or a path (default: the newest).

    Raises:
        ConfigError: not a run folder; a missing, corrupt or truncated checkpoint; a change
            that is not safe on resume.
    """
    run_dir = Path(run_dir)
    old = run_config(run_dir, "--resume")
    new = parse_config(apply_overrides(old.raw, overrides))
    _, entry, _ = pick_checkpoint(run_dir, checkpoint, "--resume", listed=True, empty_ok=True)
    step = 0 if entry is None else entry["step"]
    until = (entry or {}).get("until", {})
    ends = stage_ends(old.stages, entry)
    for index, length in ends.items():
        if length > old.stages[index].steps:
            raise ConfigError(
                "--resume",
                f"the checkpoint index is damaged: stage {old.stages[index].name!r} ended after "
                f"{length} steps, more than its {old.stages[index].steps}",
            )
    changes = check_changes(old, new, step, ends)
    check_best_restorable(run_dir, new, step, ends)
    if step > Schedule(new.stages, ends).total_steps:
        raise ConfigError("--resume", f"checkpoint step {step} is past the end of the run")
    inputs = run_dir / "samples" / INPUTS
    if new.samples is not None and inputs.exists():
        read_inputs(inputs)
    key = "--resume" if checkpoint is None else "--checkpoint"
    return ResumePlan(run_dir, new, entry, step, changes, key, len(old.stages), ends, until)


def check_best_restorable(run_dir, config, step, ends):
    """Refuse a resume whose stages still to run roll back to the `best` checkpoint
    (`until: {restore: best}`) when that checkpoint's files are not whole: found now, not
    at the stage's end after the run has gone on."""
    schedule = Schedule(config.stages, ends)
    ahead = [
        (i, stage)
        for i, stage in enumerate(config.stages)
        if stage.until is not None and stage.until.restore and step < schedule.stage_end(i)
    ]
    damaged = RunFolder(run_dir).checkpoints().damaged_best() if ahead else None
    if damaged is not None:
        entry, problem = damaged
        index, stage = ahead[0]
        raise ConfigError(
            "--resume",
            f"stage {stage.name!r} rolls back to the best checkpoint (stages[{index}].until."
            f"restore), but {entry['prefix']} is damaged: {problem}",
        )


def check_changes(old, new, step, ends=None):
    """The `(old, new)` values of every key that differs between two configs of one run,
    refused unless safe to change at global step `step` (see `SAFE_TEXT`). `ends`: the
    stages that ended on their `until` (`{index: steps run}`)."""
    schedule = Schedule(old.stages, ends)
    kept = len(old.stages)
    if len(new.stages) < kept:
        raise ConfigError("stages", f"cannot remove stages on resume (the run has {kept})")
    if [u.optimizer for s in old.stages for u in s.updates] != [
        u.optimizer for s in new.stages[:kept] for u in s.updates
    ]:
        raise ConfigError(
            "optimizers", "cannot change on resume which optimizer an existing update uses"
        )
    known = set(old.raw.get("optimizers") or {})
    changes = {}
    prefix = {**new.raw, "stages": new.raw["stages"][:kept]}
    for parts, before, after in _differences(old.raw, prefix):
        key = format_key_path(parts)
        rule = stage_resume_rule(parts[2]) if parts[0] == "stages" and len(parts) > 2 else None
        if rule == WHILE_RUNNING:
            _check_stage_steps(schedule, parts[1], after, step, key)
        elif rule == BEFORE_START:
            index = parts[1]
            if step > schedule.starts[index]:
                raise ConfigError(
                    key,
                    f"cannot change on resume: stage {old.stages[index].name!r} has already "
                    f"begun (the run is at step {step}); only stages not yet reached can change",
                )
        elif parts[0] == "optimizers" and len(parts) > 1 and parts[1] not in known:
            pass  # a new named optimizer: only appended stages can use it (checked above)
        elif not any(pattern.fullmatch(key) for pattern in SAFE):
            raise ConfigError(key, f"cannot change on resume (safe to change: {SAFE_TEXT})")
        elif key.split(".")[-1] == "learning_rate" and isinstance(before, dict) != isinstance(
            after, dict
        ):
            raise ConfigError(
                key,
                "cannot change on resume between a number and a schedule (change the "
                "number, or the schedule's keys)",
            )
        changes[key] = (before, after)
    for index, stage in enumerate(new.raw["stages"][kept:], start=kept):
        changes[f"stages[{index}]"] = (None, stage)
    _check_stream_unit(old, new)
    return changes


# The sources whose checkpointed iterator holds batches: `Source.iterated` of the registry,
# which imports TensorFlow, as this module must not (`tests/test_stage_batch.py` checks that
# the two agree).
STREAMED = ("folder", "tfrecord")


def _check_stream_unit(old, new):
    """A streamed source serves batches of the stages' greatest common divisor
    (`ImageSource.unit`), and its checkpointed iterator holds some of them prefetched: a
    change of the stages' batches (`stages[i].batch_size`, a stage added) that moves that
    divisor cannot go on from it."""
    source, before, after = old.data.get("source"), old.batch_unit, new.batch_unit
    if source not in STREAMED or before == after:
        return
    moved = [
        index
        for index, stage in enumerate(new.stages)
        if index >= len(old.stages) or new.batch_of(stage) != old.batch_of(old.stages[index])
    ]
    raise ConfigError(
        f"stages[{moved[0]}].batch_size" if moved else "stages",
        f"would make the {source} stream serve batches of {after} images, but this run's "
        f"checkpointed stream holds batches of {before}: on resume the stages' batches must "
        f"keep {before} as their greatest common divisor",
    )


def _check_stage_steps(schedule, index, steps, step, key):
    """A stage's `steps` may change while no later stage has begun, and not below the steps
    it has run (more than that while it is under way, so it still ends with a step)."""
    stage = schedule.stages[index]
    done = schedule.steps_done(index, step)
    if index in schedule.ends:
        raise ConfigError(
            key,
            f"cannot change on resume: stage {stage.name!r} ended on its until condition after "
            f"{schedule.lengths[index]} steps",
        )
    if step > schedule.stage_end(index):
        raise ConfigError(
            key,
            f"cannot change on resume: stage {stage.name!r} is finished and a later stage has "
            f"begun (the run is at step {step})",
        )
    least = done + 1 if 0 < done < stage.steps else max(done, 1)
    if steps < least:
        raise ConfigError(
            key,
            f"cannot be below {least} on resume: stage {stage.name!r} has run {done} of its "
            f"steps (the run is at step {step}). Received: {steps}",
        )


def _differences(old, new, parts=()):
    """`(key parts, old, new)` for every leaf that differs between two raw configs."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                yield (*parts, key), old.get(key), new.get(key)
            else:
                yield from _differences(old[key], new[key], (*parts, key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _differences(a, b, (*parts, index))
    elif old != new or type(old) is not type(new):
        yield parts, old, new


def restore(trainer, plan):
    """Restore the plan's checkpoint into a freshly built trainer and apply the config's
    learning rates (Keras optimizers checkpoint theirs; the config wins, so `--set` can
    change them).

    Raises:
        ConfigError: the checkpoint cannot be read (TensorFlow's checksums catch corrupt
            data), or it does not match the run.
    """
    from stagegan.training.trainer import set_learning_rates

    if plan.entry is not None:
        import tensorflow as tf

        path = plan.prefix
        fresh = appended_objects(trainer, plan.kept_stages)
        objects = {k: v for k, v in trainer.trackables().items() if k not in fresh}
        try:
            # Objects that checkpoints of earlier versions lack start fresh: the staged batch
            # (the first step draws its own, as the run would have) and the augmentation's
            # random stream (drawn from the noise stream before).
            stored = {name.split("/")[0] for name, _ in tf.train.list_variables(path)}
            objects = {k: v for k, v in objects.items() if k in stored or not later_addition(k)}
            status = type(trainer.checkpoint)(**objects).read(path)
            status.assert_existing_objects_matched()
        except Exception as e:  # noqa: BLE001 - DataLossError, OpError, AssertionError, ...
            first = first_line(e)
            if "data_iterator" in objects and "OwnedIterator" in str(e):
                first = (
                    "it holds no data position for this run's streamed source (a folder run "
                    "checkpointed before folders streamed); start it again, or warm-start "
                    "from it with train --init-from"
                )
            raise ConfigError(plan.checkpoint_key, f"cannot restore {path}: {first}") from None
        if trainer.step_count != plan.step:
            raise ConfigError(
                plan.checkpoint_key,
                f"{path} holds global step {trainer.step_count}, not {plan.step}: damaged",
            )
    set_learning_rates(trainer)


def later_addition(name):
    """Whether checkpoint object `name` was added after checkpoints that may lack it."""
    return name.startswith(STAGED_PREFIX) or name == "rng_augment"


def appended_objects(trainer, kept):
    """The checkpoint names of what only stages appended on this resume use (stages from
    index `kept` on): their own optimizers and loss scales, their updates' guard counters,
    the state of their own augmentation and of loss terms no earlier stage used (LeCam's).
    They start fresh, as in a run given the longer config from the start. A named optimizer
    that existing stages use may not take on new variables: its state has no place for them.

    Raises:
        ConfigError: an appended update shares an optimizer that would train new variables.
    """
    stages, plans = trainer.config.stages, trainer.updates.plans
    old_keys = {u.optimizer for stage in stages[:kept] for u in stage.updates}
    old_names = {u.name for stage in stages[:kept] for u in stage.updates}
    trained = {}
    for stage_plans in plans[:kept]:
        for plan in stage_plans:
            trained.setdefault(plan.update.optimizer, set()).update(id(v) for v in plan.variables)
    fresh = set()
    for stage_plans in plans[kept:]:
        for plan in stage_plans:
            update = plan.update
            if update.optimizer in old_keys:
                new = [v.path for v in plan.variables if id(v) not in trained[update.optimizer]]
                if new:
                    raise ConfigError(
                        f"{update.key}.optimizer",
                        f"optimizer {update.optimizer!r} has no state for {new[0]} in the "
                        "checkpoint (an earlier stage's optimizer, on other variables); give "
                        "the appended stage an optimizer of its own",
                    )
                continue
            fresh.add(optimizer_key(update.optimizer))
            if update.optimizer in trainer.loss_scales:
                fresh.update(
                    trainer.loss_scales[update.optimizer].trackables(slug(update.optimizer))
                )
            if update.name not in old_names:
                fresh.add(f"guard_in_a_row_{slug(update.name)}")
    old_augment = {s.augment.key for s in stages[:kept] if s.augment is not None}
    for stage in stages[kept:]:
        if stage.augment is not None and stage.augment.key not in old_augment:
            fresh.update(trainer.augmenters[stage.augment.key].trackables())
    old_state = trainer.term_state(trainer.config.used_terms(stages[:kept]))
    fresh.update(set(trainer.term_state(trainer.config.used_terms())) - set(old_state))
    return fresh


def commit(plan, log):
    """Make the run folder ready to go on from the plan's step, and record the resume.

    Removes what interrupted saves left; moves checkpoints after the step (a resume from an
    earlier checkpoint) into `checkpoints/superseded/`; drops records after the step from the
    step-keyed logs (they are written again) and the sample pictures they list; tells
    TensorBoard to drop its later events; rewrites `config.yaml` with the accepted changes and
    appends one record to `resume.jsonl`.
    """
    run_dir, step = plan.run_dir, plan.step
    store = plan.store
    removed = store.clean_up()
    superseded = store.supersede(step)
    extended = store.untag("final") if step < plan.total_steps else []  # no longer the end
    dropped = {}
    for name in STEP_LOGS:
        later = drop_records_after(run_dir / name, step)
        if later:
            dropped[name] = len(later)
        if name == "samples/manifest.jsonl":
            for record in later:
                (run_dir / "samples" / record.get("file", "")).unlink(missing_ok=True)
    if (run_dir / "tensorboard").is_dir():  # TensorBoard then drops the later events
        tensorboard_session_start(run_dir / "tensorboard", step + 1)
    if plan.changes:
        RunFolder(run_dir).write(RunFolder.CONFIG, plan.config.to_yaml())
    record = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": None if plan.entry is None else plan.entry["prefix"],
        "step": step,
        "changes": {k: {"from": a, "to": b} for k, (a, b) in plan.changes.items()},
        "removed": removed,
        "superseded": superseded,
        "no_longer_final": extended,
        "dropped_records": dropped,
    }
    append_jsonl(run_dir / RESUME_LOG, record)
    where = plan.entry["prefix"] if plan.entry else "the start (no checkpoint yet)"
    log.info("resuming %s from %s, global step %d", run_dir, where, step)
    for key, (before, after) in plan.changes.items():
        log.info("  changed on resume: %s: %r -> %r", key, before, after)
    if removed:
        log.info("  removed leftovers of interrupted saves: %s", ", ".join(removed))
    if superseded:
        log.info("  moved later checkpoints to checkpoints/superseded/: %s", ", ".join(superseded))
    if extended:
        log.info("  the run goes on past its old end: %s is no longer final", ", ".join(extended))


def drop_records_after(path, step):
    """Rewrite a JSON-lines log without its records after global step `step` (and without a
    torn last line); returns the records dropped."""
    if not path.exists():
        return []
    kept, dropped = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            (dropped if record.get("step", 0) > step else kept).append(line.rstrip("\n"))
    atomic_write(path, "".join(line + "\n" for line in kept))
    return [json.loads(line) for line in dropped]
