"""Working with a finished (or running) run folder: restore it, sample from it, evaluate it.

    trainer, checkpoint = restore_run("runs/00000-completion-shapes")
    write_samples(trainer, "out.png", num=16, seed=0)
    result = evaluate_run(trainer, run_dir, checkpoint)

What the CLI's `sample` and `eval` commands do, importable and testable without a subprocess.
"""

import dataclasses
import datetime
import os
import sys
from pathlib import Path

import numpy as np

from stagegan import pictures
from stagegan.checkpoints import CheckpointStore
from stagegan.config import apply_overrides, parse_config, read_yaml
from stagegan.errors import ConfigError
from stagegan.until import stage_ends

EVAL_LOG = "eval.jsonl"


def run_config(run_dir, key="--run"):
    """The resolved config a run folder holds (`config.yaml`); problems name `key`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(key, f"no such run folder: {run_dir}")
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(key, f"{run_dir} is not a run folder (it has no config.yaml)")
    try:
        return parse_config(read_yaml(path, key))
    except ConfigError as e:
        if e.key == key:
            raise
        raise ConfigError(key, f"{path} is not a valid run config: {e}") from None


def checkpoint_entries(run_dir, key="--run"):
    """`(store, entries)`: a run's `CheckpointStore` (read-only) and its listed checkpoints;
    an unreadable index is a ConfigError naming `key`."""
    store = CheckpointStore(Path(run_dir) / "checkpoints", None, 1)
    try:
        return store, store.entries()
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            key, f"the checkpoint index {store.directory / 'index.json'} is unreadable"
        ) from None


def find_checkpoint(run_dir, checkpoint=None):
    """The checkpoint path prefix to restore: `checkpoint` (a step number, or a path with or
    without `.index`), else the run's newest listed checkpoint."""
    store, entries = checkpoint_entries(run_dir)
    if checkpoint is None:
        if not entries:
            raise ConfigError("--run", f"{run_dir} has no checkpoint yet")
        return store.path_of(entries[-1])
    text = str(checkpoint)
    if text.isdigit():
        found = [e for e in entries if e["step"] == int(text)]
        if not found:
            steps = ", ".join(str(e["step"]) for e in entries) or "none"
            raise ConfigError("--checkpoint", f"no checkpoint at step {text} (steps: {steps})")
        return store.path_of(found[0])
    prefix = text[: -len(".index")] if text.endswith(".index") else text
    if not os.path.exists(prefix + ".index"):
        raise ConfigError("--checkpoint", f"no checkpoint at {prefix} (no {prefix}.index)")
    return prefix


def resolve_init(config):
    """`(config, prefix)`: the source checkpoint of `config.init` (None: no warm start), and
    the config with `init.checkpoint` set to that checkpoint's step.

    Raises:
        ConfigError: the source is not a run folder, has no checkpoint, or none at that step.
    """
    init = config.init
    if init is None:
        return config, None
    run_config(init.run, key="init.run")
    store, entries = checkpoint_entries(init.run, key="init.run")
    if not entries:
        raise ConfigError("init.run", f"{init.run} has no checkpoint yet")
    if init.checkpoint is None:
        entry = entries[-1]
    else:
        found = [e for e in entries if e["step"] == init.checkpoint]
        if not found:
            steps = ", ".join(str(e["step"]) for e in entries)
            raise ConfigError(
                "init.checkpoint",
                f"{init.run} has no checkpoint at step {init.checkpoint} (steps: {steps})",
            )
        entry = found[0]
    problem = store.verify(entry)
    if problem:
        raise ConfigError("init.run", f"{store.path_of(entry)}: {problem}")
    if init.checkpoint is None:
        raw = apply_overrides(config.raw, [f"init.checkpoint={entry['step']}"])
        config = parse_config(raw)
    return config, store.path_of(entry)


def check_run(run_dir, checkpoint=None):
    """Check the run folder, its config and the checkpoint asked for (no TensorFlow needed)."""
    run_config(run_dir)
    return find_checkpoint(run_dir, checkpoint)


def restore_run(run_dir, checkpoint=None):
    """Build the run's trainer and restore a checkpoint; returns `(trainer, path)`.

    Raises:
        ConfigError: no run folder, no or unknown checkpoint, an unreadable checkpoint.
    """
    from stagegan.training import Trainer

    config = run_config(run_dir)
    path = find_checkpoint(run_dir, checkpoint)
    # Sampling and evaluating need one device, whatever devices or cluster trained the run
    # (a checkpoint restores into any backend).
    one = dataclasses.replace(
        config.devices, towers=1, variables="/CPU:0", strategy="towers", jit=False
    )
    config = dataclasses.replace(config, devices=one)
    if os.getcwd() not in sys.path:  # custom tasks and networks, as in `train`
        sys.path.insert(0, os.getcwd())
    store, entries = checkpoint_entries(run_dir, "--checkpoint")
    where = Path(path).resolve()
    entry = next((e for e in entries if Path(store.path_of(e)).resolve() == where), None)
    trainer = Trainer(config, stage_ends(config.stages, entry))
    try:
        trainer.checkpoint.read(path).expect_partial()
    except Exception as e:  # noqa: BLE001 - truncated files raise IndexError, OpError, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError("--checkpoint", f"cannot restore {path}: {first}") from None
    return trainer, path


def user_images(task, folder, num):
    """Up to `num` of the user's images from `folder`, fitted to the run's size, in [-1, 1]."""
    from stagegan.data import decode_files, list_folder

    options = {**task.data, "source": "folder", "path": folder, "labels": None}
    try:
        files = list_folder(options).files
    except ConfigError as e:
        raise ConfigError("--input", e.message) from None
    images, ok = decode_files(files[:num], options["size"], options["channels"])
    return images[ok].astype(np.float32) / 127.5 - 1.0


def write_samples(
    trainer, output, num, seed=0, ema=True, input_dir=None, batch_size=None, class_name=None
):
    """Write `num` samples to `output`: `.npy` (the task's export: images in [0, 1], or
    points) or `.png` (the task's picture). Returns a one-line description.

    Raises:
        ConfigError: an existing or unsupported output file, `--input` for a task that
            cannot use it.
    """

    output = Path(output)
    if output.suffix.lower() not in (".npy", ".png"):
        raise ConfigError("--output", f"must end in .npy or .png. Received: {output}")
    if output.exists():
        raise ConfigError("--output", f"{output} already exists; not overwritten")
    if not output.parent.is_dir():
        raise ConfigError("--output", f"no such folder: {output.parent}")
    task = trainer.task
    inputs, outputs, info, used_ema = sample_arrays(
        trainer, num, seed, ema, input_dir, batch_size, class_name
    )
    if output.suffix.lower() == ".npy":
        tmp = output.with_name(output.name + ".tmp.npy")
        np.save(tmp, np.asarray(task.export(outputs), np.float32))
        tmp.replace(output)
    else:
        pictures.write_png(task.picture(inputs, outputs, info), output)
    count = len(next(iter(inputs.values())))
    return (
        f"wrote {count} samples to {output} (step {trainer.step_count}, "
        f"EMA {'yes' if used_ema else 'no'}, seed {seed})"
    )


def sample_arrays(trainer, num, seed=0, ema=True, input_dir=None, batch_size=None, class_name=None):
    """`(inputs, outputs, info, ema used)` of `num` samples from inputs drawn with `seed`
    (or made from the images in `input_dir`), `batch_size` at a time (None: the run's); a
    class-conditional run's samples are all of class `class_name` (a name or index) if given."""
    from stagegan.evaluation import Evaluation

    task = trainer.task
    if input_dir is not None:
        if not hasattr(task, "inputs_for_images"):
            raise ConfigError("--input", f"task {task.name!r} takes no input images")
        images = user_images(task, input_dir, num)
        inputs, info = task.inputs_for_images(images, seed), {"held_out": True}
    else:
        inputs, info = task.sample_inputs(num, seed)
    if class_name is not None:
        if not hasattr(task, "class_index"):
            raise ConfigError("--class", f"task {task.name!r} has no classes")
        inputs["fake_y"] = np.full(num, task.class_index(str(class_name)), np.int32)
        info = {k: v for k, v in info.items() if k != "columns"}  # a plain grid of one class
    evaluation = Evaluation(trainer, None, ema=ema, batch_size=batch_size)
    return inputs, evaluation.sample_outputs(inputs), info, evaluation.ema


def evaluate_run(
    trainer, run_dir, checkpoint, count=None, seed=None, features=None, ema=True, batch_size=None
):
    """Evaluate the restored trainer and append the result to `RUN/eval.jsonl`."""
    from stagegan.evaluation import Evaluation
    from stagegan.logs import append_jsonl

    if features is None and trainer.config.eval is not None:  # the run's own, if it named some
        features = trainer.config.eval.features
    evaluation = Evaluation(
        trainer,
        Path(run_dir),
        count=count,
        seed=trainer.config.seed if seed is None else seed,
        features=features,
        ema=ema,
        batch_size=batch_size,
    )
    result = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": os.path.basename(checkpoint),
        **evaluation.run(),
    }
    append_jsonl(Path(run_dir) / EVAL_LOG, result)
    return result
