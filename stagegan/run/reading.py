"""Working with a finished (or running) run folder: restore it, sample from it, evaluate it.

    trainer, checkpoint = restore_run("runs/00000-completion-shapes")
    write_samples(trainer, "out.png", num=16, seed=0)
    result = evaluate_run(trainer, run_dir, checkpoint)

What the CLI's `sample` and `eval` commands do, importable and testable without a subprocess.
"""

import contextlib
import dataclasses
import datetime
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from stagegan.config.files import read_text
from stagegan.config.numbers import as_integer, as_number
from stagegan.config.objects import find_user_modules
from stagegan.config.schema import apply_overrides, parse_config
from stagegan.config.yamlfile import read_yaml
from stagegan.core import latents
from stagegan.core.until import stage_ends
from stagegan.errors import ConfigError, WriteError, first_line, shown
from stagegan.runfolder import pictures
from stagegan.runfolder.dirs import RunFolder
from stagegan.runfolder.samples import chunk_size

EVAL_LOG = RunFolder.EVAL_LOG


def run_config(run_dir, key="--run"):
    """The resolved config a run folder holds (`config.yaml`); problems name `key`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(key, f"no such run folder: {run_dir}")
    path = RunFolder(run_dir).config_file
    if not os.path.lexists(path):
        raise ConfigError(key, f"{run_dir} is not a run folder (it has no config.yaml)")
    RunFolder(run_dir).check_records(key)
    try:
        return parse_config(read_yaml(path, key))
    except ConfigError as e:
        if e.key == key:
            raise
        raise ConfigError(key, f"{path} is not a valid run config: {e}") from None


def checkpoint_entries(run_dir, key="--run"):
    """`(store, entries)`: a run's `CheckpointStore` (read-only) and its listed checkpoints;
    an unreadable or malformed index is a ConfigError naming `key`."""
    store = RunFolder(run_dir).checkpoints()
    index = store.directory / "index.json"
    try:
        entries = store.entries()
    except ConfigError as e:
        raise ConfigError(key, f"the checkpoint index is unreadable: {e.message}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise ConfigError(key, f"the checkpoint index {index} is unreadable") from None
    problem = store.index_problem(entries)
    if problem:
        raise ConfigError(key, f"the checkpoint index {index} is damaged: {problem}")
    return store, entries


def pick_checkpoint(
    run_dir,
    checkpoint=None,
    key="--run",
    checkpoint_key="--checkpoint",
    listed=False,
    empty_ok=False,
):
    """The one way every door (`sample`, `eval`, `--resume`, `--init-from`, the API) picks
    a run's checkpoint and checks its files; returns `(store, entry, prefix)`.

    Args:
        run_dir: the run folder (its index is checked first).
        checkpoint: a global step (int or digits), `best` (the checkpoint tagged best by
            `checkpoint.keep_best`), a path prefix (with or without `.index`), or None for
            the newest listed checkpoint.
        key, checkpoint_key: the keys that problems name: `key` for the run and its newest
            checkpoint, `checkpoint_key` for the one asked for.
        listed: a path must be a checkpoint the index lists (resume and warm start need
            its entry); otherwise any checkpoint path is taken (entry None; TensorFlow's
            checksums check it while it is read).
        empty_ok: a run with no checkpoint yet gives `(store, None, None)` instead of an
            error (a resume then starts from step 0).

    Raises:
        ConfigError: no such step or path; the checkpoint's files are missing or are not the
            sizes they were written with (a damaged newest names the newest whole one).
    """
    store, entries = checkpoint_entries(run_dir, key)
    if checkpoint is None:
        if not entries:
            if empty_ok:
                return store, None, None
            raise ConfigError(key, f"{run_dir} has no checkpoint yet")
        entry = entries[-1]
        problem = store.verify(entry)
        if problem is not None:
            whole = [e for e in entries[:-1] if store.verify(e) is None]
            flag = {"init.checkpoint": "--init-checkpoint"}.get(checkpoint_key, checkpoint_key)
            hint = (
                f"to use the previous good one, pass {flag} {whole[-1]['step']}"
                if whole
                else "no earlier checkpoint is whole"
            )
            raise ConfigError(
                key, f"the latest checkpoint {store.path_of(entry)} is damaged: {problem}; {hint}"
            )
        return store, entry, store.path_of(entry)
    text = str(checkpoint)
    if text == "best" or text.isdigit():
        entry = listed_entry(entries, text, run_dir, checkpoint_key)
    else:
        prefix = text[: -len(".index")] if text.endswith(".index") else text
        if not os.path.isfile(prefix + ".index"):
            raise ConfigError(checkpoint_key, f"no checkpoint at {prefix} (no {prefix}.index)")
        where = Path(prefix).resolve()
        entry = next((e for e in entries if Path(store.path_of(e)).resolve() == where), None)
        if entry is None:
            if listed:
                raise ConfigError(
                    checkpoint_key,
                    f"{checkpoint} is not a listed checkpoint of {run_dir} (give its step)",
                )
            return store, None, prefix
    problem = store.verify(entry)
    if problem is not None:
        raise ConfigError(checkpoint_key, f"{store.path_of(entry)} is damaged: {problem}")
    return store, entry, store.path_of(entry)


def listed_entry(entries, text, run_dir, checkpoint_key):
    """The index entry that `--checkpoint best` or `--checkpoint STEP` names."""
    if text == "best":
        found = [e for e in entries if "best" in e["tags"]]
        if not found:
            raise ConfigError(
                checkpoint_key,
                f"{run_dir} has no checkpoint tagged best (it ranks checkpoints with "
                "checkpoint.keep_best, from its first evaluation on)",
            )
        return found[-1]
    found = [e for e in entries if e["step"] == int(text)]
    if not found:
        steps = ", ".join(str(e["step"]) for e in entries) or "none"
        raise ConfigError(
            checkpoint_key, f"{run_dir} has no checkpoint at step {text} (steps: {steps})"
        )
    return found[0]


def find_checkpoint(run_dir, checkpoint=None):
    """The checkpoint path prefix that `sample` and `eval` restore (see `pick_checkpoint`)."""
    return pick_checkpoint(run_dir, checkpoint)[2]


def read_checkpoint(checkpoint, path, key):
    """`checkpoint.read(path)` (a `tf.train.Checkpoint`), its status returned; anything
    TensorFlow raises on a damaged file (a bad checksum, a truncated file) is one
    ConfigError naming `key`."""
    try:
        return checkpoint.read(path)
    except Exception as e:  # noqa: BLE001 - DataLossError, OpError, IndexError, ...
        raise ConfigError(key, f"cannot restore {path}: {first_line(e)}") from None


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
    _, entry, prefix = pick_checkpoint(
        init.run, init.checkpoint, "init.run", "init.checkpoint", listed=True
    )
    if init.checkpoint is None:
        raw = apply_overrides(config.raw, [f"init.checkpoint={entry['step']}"])
        config = parse_config(raw)
    return config, prefix


def check_run(run_dir, checkpoint=None):
    """Check the run folder, its config and the checkpoint asked for (no TensorFlow needed)."""
    run_config(run_dir)
    return find_checkpoint(run_dir, checkpoint)


def read_clusters(run_dir, data=None, key="--run"):
    """The clusters the run in `run_dir` found (`data.sources.RecordedClusters`, from its
    `clusters.json`, written by runs on `data.labels: clusters`), for its `Trainer`; None when
    it has none. `data`: the run's data options, which the record must match."""
    import json

    from stagegan.data.sources import recorded_clusters

    path = RunFolder(run_dir).path / RunFolder.CLUSTERS
    if not os.path.lexists(path):
        return None
    try:
        return recorded_clusters(json.loads(read_text(path, key, what="clusters record")), data)
    except ConfigError as e:
        raise ConfigError(key, f"cannot read the run's clusters: {e.message}") from None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        message = f"cannot read the run's clusters ({path}): {first_line(e)}"
        raise ConfigError(key, message) from None


def restore_run(run_dir, checkpoint=None):
    """Build the run's trainer and restore a checkpoint; returns `(trainer, path)`. The trainer
    samples and evaluates (sample, eval, export, project): its optimizers hold no slots and
    it does not train (`run.resume.plan_resume` and `restore` resume a run).

    Raises:
        ConfigError: no run folder, no or unknown checkpoint, an unreadable checkpoint.
    """
    from stagegan.training.trainer import Trainer

    config = run_config(run_dir)
    _, entry, path = pick_checkpoint(run_dir, checkpoint)
    # Sampling and evaluating need one device, whatever devices or cluster trained the run
    # (a checkpoint restores into any backend): the first GPU where there is one (`auto`
    # with one tower), else the CPU.
    one = dataclasses.replace(
        config.devices, towers=1, variables="auto", strategy="towers", jit=False
    )
    config = dataclasses.replace(config, devices=one)
    find_user_modules()  # custom tasks and networks, as in `train`
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):  # beside a training run on that GPU
        with contextlib.suppress(RuntimeError, ValueError):  # already initialised
            tf.config.experimental.set_memory_growth(gpu, True)
    recorded = read_clusters(run_dir, config.data)
    with _advice_dropped():  # the run trained already: advice on training it is noise here
        trainer = Trainer(
            config,
            stage_ends(config.stages, entry),
            recorded_clusters=recorded,
            optimizer_state=False,
        )
    key = "--run" if checkpoint is None else "--checkpoint"
    read_checkpoint(trainer.checkpoint, path, key).expect_partial()
    return trainer, path


@contextlib.contextmanager
def _advice_dropped():
    """stagegan's log records marked `before_training` (advice on a run about to train, such
    as a folder too small not to be memorised) are dropped while a finished run is read."""
    logger = logging.getLogger("stagegan")
    advice = lambda record: not getattr(record, "before_training", False)
    logger.addFilter(advice)
    try:
        yield
    finally:
        logger.removeFilter(advice)


def check_no_ema(trainer, ema, key="--no-ema"):
    """Refuse asking for the live weights instead of an EMA that the run does not keep."""
    if not ema and trainer.ema is None:
        raise ConfigError(
            key, "the run keeps no EMA (its config has ema: null): its live weights are all it has"
        )


def user_files(task, folder):
    """`(files, options)`: the image files of the user's `folder` as the folder source lists
    them, and the source options that fit them to the run's images."""
    from stagegan.data.sources import list_folder

    options = {**task.data, "source": "folder", "path": folder, "labels": None}
    return list_folder(options, key="--input").files, options


def user_images(task, folder, num=None):
    """`(images, names)`: up to `num` (None: all) of the user's images from `folder`, fitted
    to the run's size, in [-1, 1], and their file names without extensions."""
    files, options = user_files(task, folder)
    images, ok = readable_images(files[:num], options, folder)
    names = [os.path.splitext(os.path.basename(str(f)))[0] for f in np.asarray(files[:num])[ok]]
    return images.astype(np.float32) / 127.5 - 1.0, names


def user_masks(task, folder, names):
    """The masks in `folder` named as `names` (file names without extensions), fitted as the
    images are: [N, S, S, 1], 1 in the hole (`stagegan.data.masks.load_masks`)."""
    from stagegan.data.masks import load_masks

    bank, mask_names = load_masks(os.path.expanduser(folder), task.data["size"], key="--masks")
    index = {name: i for i, name in enumerate(mask_names)}
    missing = [name for name in names if name not in index]
    if missing:
        raise ConfigError(
            "--masks",
            f"no mask named {missing[0]}.* in {folder} for image {missing[0]} of --input "
            f"({len(missing)} of {len(names)} images have none; masks pair by file name)",
        )
    return bank[[index[name] for name in names]]


def readable_images(files, options, folder, key="--input"):
    """`(uint8 images, ok)` of the readable ones of `files` (fitted as `options` say), each
    unreadable one warned of naming `key`; a ConfigError on `key` when none is readable."""
    from stagegan.data.sources import decode_files, warn_unreadable

    images, ok = decode_files(files, options["size"], options["channels"], key=None)
    if not ok.any():
        raise ConfigError(key, f"no readable image in {folder} ({len(files)} tried)")
    for index in np.flatnonzero(~ok):
        warn_unreadable(str(files[index]), key=key)
    return images[ok], ok


def write_samples(trainer, output, num, seed=0, **options):
    """Write `num` samples (None with `input_dir`: one per image there) to `output`: `.npy`
    (the task's export: images in [0, 1], or points), `.png` (the task's picture) or, for a
    walk (`interpolate`), `.gif` (the images as an animation). Returns a one-line
    description. `options` are `sample_arrays`'s (ema, input_dir, batch_size, class_name,
    truncation, interpolate).

    Raises:
        ConfigError: an existing or unsupported output file, `--input` for a task that
            cannot use it.
    """

    output = check_output(output)
    check_walk(num, options.get("truncation"), options.get("interpolate"), output)
    task = trainer.task
    if output.suffix.lower() == ".gif" and "images" not in task.capabilities:
        raise ConfigError("--output", f"a .gif shows images; task {task.name!r} draws none")
    inputs, outputs, info, used_ema = sample_arrays(trainer, num, seed, **options)
    try:
        if output.suffix.lower() == ".gif":
            pictures.write_gif(outputs["samples"], output)
        elif output.suffix.lower() == ".npy":
            tmp = output.with_name(output.name + ".tmp.npy")
            try:
                np.save(tmp, np.asarray(task.export(outputs), np.float32))
                tmp.replace(output)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            pictures.write_png(task.picture(inputs, outputs, info), output)
    except OSError as e:
        raise WriteError("--output", f"cannot write {output}: {e.strerror or e}") from None
    count = len(next(iter(inputs.values())))
    return (
        f"wrote {count} samples to {output} (step {trainer.step_count}, "
        f"EMA {'yes' if used_ema else 'no'}, seed {seed})"
    )


def check_output(output, key="--output", suffixes=(".npy", ".png", ".gif")):
    """Refuse an output file (`sample --output`, `eval --nearest`) before any work: not one of
    `suffixes`, already there, in no folder, or where no file can be made (tried: a file made
    and removed again). Returns it as a `Path`."""
    output = Path(output)
    if output.suffix.lower() not in suffixes:
        *most, last = suffixes
        named = f"{', '.join(most)} or {last}" if most else last
        raise ConfigError(key, f"must end in {named}. Received: {output}")
    if os.path.lexists(output):
        raise ConfigError(key, f"{output} already exists; not overwritten")
    if not output.parent.is_dir():
        what = "not a folder" if os.path.lexists(output.parent) else "no such folder"
        raise ConfigError(key, f"{what}: {output.parent}")
    try:
        probe = tempfile.NamedTemporaryFile(dir=output.parent, prefix=".stagegan-", delete=True)
        probe.close()
    except OSError as e:
        raise ConfigError(key, f"cannot write in {output.parent}: {e.strerror or e}") from None
    return output


def sample_arrays(
    trainer,
    num,
    seed=0,
    ema=True,
    input_dir=None,
    masks_dir=None,
    batch_size=None,
    class_name=None,
    truncation=None,
    interpolate=None,
):
    """`(inputs, outputs, info, ema used)` of `num` samples from inputs drawn with `seed`
    (or made from up to `num`, None: all, of the images in `input_dir`, with the holes of the
    masks in `masks_dir` paired by file name), `batch_size` at a time (None: the run's); a
    class-conditional run's samples are all of class `class_name` (a name or index) if given.
    `truncation`: latents redrawn within [-T, T] (`stagegan.core.latents.truncate`);
    `interpolate`: the `num` samples walk through K latents drawn with `seed` (`walk`), all
    of one class (`class_name`, else the first keyframe's)."""
    from stagegan.evaluation.evaluate import Evaluation

    task = trainer.task
    chunk = batch_size or chunk_size(trainer.config)
    key = "--batch-size" if batch_size else "eval.batch_size"
    check_sample_options(task, input_dir, masks_dir, class_name, truncation, interpolate)
    check_no_ema(trainer, ema)
    if num is None:  # every image of input_dir
        if input_dir is None:
            raise ConfigError("--num", "how many samples? Give a count (None only with --input)")
        num = len(user_files(task, input_dir)[0])
    task.check_memory(trainer.config.batch_size, [("--num", num)], chunk, key)
    if input_dir is not None:
        images, names = user_images(task, input_dir, num)
        holes = None if masks_dir is None else user_masks(task, masks_dir, names)
        inputs, info = task.inputs_for_images(images, seed, holes), {"held_out": True}
    elif interpolate is not None:
        inputs, info = latent_walk(task, num, seed, interpolate, truncation)
    else:
        inputs, info = task.sample_inputs(num, seed)
        if truncation is not None:
            inputs["z"] = latents.truncate(inputs["z"], truncation, seed)
    if class_name is not None:
        inputs["fake_y"] = np.full(num, task.class_index(str(class_name)), np.int32)
        info = {k: v for k, v in info.items() if k != "columns"}  # a plain grid of one class
    evaluation = Evaluation(trainer, None, ema=ema, batch_size=batch_size)
    return inputs, evaluation.sample_outputs(inputs), info, evaluation.ema


def check_sample_options(
    task, input_dir=None, masks_dir=None, class_name=None, truncation=None, interpolate=None
):
    """Refuse, before any work, an option of `sample` that the run's task cannot apply, or
    that the other options leave nothing to apply to (none is ever silently ignored):
    `--input` for a task that takes no images, `--masks` without `--input`, `--class` for a
    task without classes, `--truncation` and `--interpolate` for a task without latents or
    with `--input` (a completion of your images draws no latent)."""
    if input_dir is not None and "inputs" not in task.capabilities:
        raise ConfigError("--input", f"task {task.name!r} takes no input images")
    if masks_dir is not None and input_dir is None:
        raise ConfigError("--masks", "pairs masks with your images: give --input DIR too")
    if class_name is not None and "classes" not in task.capabilities:
        raise ConfigError("--class", f"task {task.name!r} has no classes")
    if isinstance(class_name, int) and not isinstance(class_name, bool):
        as_integer(class_name, "--class", minimum=0)  # an index (10**5000 prints no name)
    for flag, value in (("--truncation", truncation), ("--interpolate", interpolate)):
        if value is None:
            continue
        if "latents" not in task.capabilities:
            raise ConfigError(
                flag, f"task {task.name!r} has no latents to truncate or walk through"
            )
        if input_dir is not None:
            raise ConfigError(
                flag,
                "applies to drawn latents; --input completes your own images, which draw "
                "none (leave it out, or drop --input)",
            )


def latent_walk(task, num, seed, keyframes, truncation=None):
    """`(inputs, info)` of `num` samples along the walk through `keyframes` latents drawn with
    `seed` (truncated first, if asked); the other inputs (a class) are the first keyframe's."""
    drawn, _ = task.sample_inputs(keyframes, seed)
    z = drawn["z"] if truncation is None else latents.truncate(drawn["z"], truncation, seed)
    inputs = {name: np.repeat(value[:1], num, axis=0) for name, value in drawn.items()}
    inputs["z"] = latents.walk(z, num)
    return inputs, {"keyframes": keyframes}


MAX_TRUNCATION = 1e6  # `sample --truncation`: past this, a float32 latent bound overflows


def check_walk(num, truncation, interpolate, output=None):
    """The latent options of `sample`, checked before anything is loaded."""
    if truncation is not None:
        try:
            positive = as_number(truncation, "--truncation") > 0
        except ConfigError:  # not a number, or one beyond any float
            positive = False
        if not positive:
            received = shown(truncation)
            raise ConfigError("--truncation", f"must be a positive number. Received: {received}")
        if truncation > MAX_TRUNCATION:
            raise ConfigError(
                "--truncation",
                f"must be at most {MAX_TRUNCATION:g} (no latent drawn from N(0, 1) reaches it: "
                f"nothing would be redrawn). Received: {shown(truncation)}",
            )
    if interpolate is not None and not (
        isinstance(interpolate, int) and not isinstance(interpolate, bool) and 2 <= interpolate
    ):
        raise ConfigError(
            "--interpolate", f"must be at least 2 latents. Received: {shown(interpolate)}"
        )
    if interpolate is not None and num is not None and interpolate > num:
        raise ConfigError(
            "--interpolate",
            f"walks through {shown(interpolate)} latents in --num {num} samples: at most one a "
            "sample",
        )
    if output is not None and Path(output).suffix.lower() == ".gif" and interpolate is None:
        raise ConfigError("--output", ".gif (an animation) is for --interpolate walks")


def evaluate_run(
    trainer,
    run_dir,
    checkpoint,
    count=None,
    seed=None,
    features=None,
    ema=True,
    batch_size=None,
    memorise="auto",
    nearest=None,
):
    """Evaluate the restored trainer and append the result to `RUN/eval.jsonl` (`memorise`,
    `nearest`: `stagegan.evaluation.evaluate.Evaluation`'s)."""
    from stagegan.evaluation.evaluate import Evaluation
    from stagegan.runfolder.logs import append_jsonl

    if features is None and trainer.config.eval is not None:  # the run's own, if it named some
        features = trainer.config.eval.features
    check_no_ema(trainer, ema)
    evaluation = Evaluation(
        trainer,
        Path(run_dir),
        count=count,
        seed=trainer.config.seed if seed is None else seed,
        features=features,
        ema=ema,
        batch_size=batch_size,
        memorise=memorise,
        nearest=nearest,
    )
    result = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": os.path.basename(checkpoint),
        **evaluation.run(),
    }
    append_jsonl(Path(run_dir) / EVAL_LOG, result)
    return result
