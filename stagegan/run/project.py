"""`stagegan project`: the latents whose samples come closest to your images (GAN inversion).

    found = project_images(trainer, images, steps=300, restarts=4, seed=0)
    found.z, found.y, found.l1, found.samples

For each image, gradient descent (Adam) on the latent `z` minimises the mean squared pixel
error between the generator's sample and the image, plus, where the discriminator takes single
unconditioned images, the squared distance between their discriminator features (its hidden
LeakyReLU activations, each layer's mean squared difference over its mean squared activation:
what it has learned to tell apart, as the StyleGAN projectors add a perceptual loss).
Several random starts run side by side and each image keeps its best; a class-conditional
generator is projected once per class, and each image keeps the class that fits it best.
The distance reported is the mean absolute pixel error in [0, 1] units (`l1`).
"""

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from stagegan.errors import ConfigError, WriteError

FEATURE_WEIGHT = 0.1
RESTARTS = 4  # random starts per image, unless told (`project --restarts`)
LEARNING_RATE = 0.05


@dataclass(frozen=True)
class Projection:
    """What `project_images` found: `z` [N, D], `y` [N] (classes; None unconditioned),
    `samples` [N, S, S, C] in [-1, 1], and `l1` [N] (mean absolute error in [0, 1] units)."""

    z: np.ndarray
    y: object
    samples: np.ndarray
    l1: np.ndarray


def check_projectable(task, key="--run"):
    if not {"latents", "images"} <= task.capabilities:
        raise ConfigError(key, f"task {task.name!r} has no latent image generator to project into")


def project_images(trainer, images, steps=300, restarts=4, seed=0, ema=True):
    """Project `images` [N, S, S, C] in [-1, 1] into the generator's latent space (see the
    module docstring). Returns a `Projection`."""
    task = trainer.task
    check_projectable(task)
    use_ema = ema and trainer.ema is not None
    with trainer.ema.swapped() if use_ema else contextlib.nullcontext():
        return _project(trainer, images, steps, restarts, seed)


def _project(trainer, images, steps, restarts, seed):
    task, generator = trainer.task, trainer.networks["generator"]
    classes = range(task.num_classes) if task.conditional else [None]
    best = None
    for label in classes:
        found = _descend(trainer, generator, images, label, steps, restarts, seed)
        if best is None:
            best = found
            continue
        better = found.l1 < best.l1
        best = Projection(
            np.where(better[:, None], found.z, best.z),
            np.where(better, found.y, best.y),
            np.where(better[:, None, None, None], found.samples, best.samples),
            np.minimum(found.l1, best.l1),
        )
    return best


def _descend(trainer, generator, images, label, steps, restarts, seed):
    """Adam on `restarts` random starts of every image's latent, for class `label`."""
    count, latent = len(images), trainer.task.model["latent_dim"]
    rng = np.random.default_rng([seed, 0 if label is None else label + 1])
    targets = tf.constant(np.repeat(images, restarts, axis=0), tf.float32)
    value = tf.Variable(rng.standard_normal((count * restarts, latent)).astype(np.float32))
    y = None if label is None else tf.fill([count * restarts], label)
    features = _feature_network(trainer)
    target_features = None if features is None else features(targets)
    optimizer = keras.optimizers.Adam(LEARNING_RATE)
    optimizer.build([value])

    def draw(z):
        out = generator(z if y is None else [z, y], training=False)
        return tf.cast(out, tf.float32)

    def per_image_loss(z):
        samples = draw(z)
        loss = tf.reduce_mean(tf.square(samples - targets), axis=[1, 2, 3])
        if features is not None:
            for real, fake in zip(target_features, features(samples), strict=True):
                scale = tf.reduce_mean(tf.square(real)) + 1e-8
                axes = list(range(1, len(real.shape)))
                loss += FEATURE_WEIGHT * tf.reduce_mean(tf.square(fake - real), axis=axes) / scale
        return loss

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(per_image_loss(value))  # images are independent: summed
        optimizer.apply_gradients([(tape.gradient(loss, value), value)])

    for _ in range(steps):
        step()
    samples = draw(value).numpy()
    l1 = np.abs(samples - targets.numpy()).mean(axis=(1, 2, 3)) / 2  # [-1, 1] -> [0, 1] units
    pick = l1.reshape(count, restarts).argmin(axis=1) + np.arange(count) * restarts
    y_out = None if label is None else np.full(count, label, np.int32)
    return Projection(value.numpy()[pick], y_out, samples[pick], l1[pick])


def _feature_network(trainer):
    """The discriminator's hidden activations for single, unconditioned images, or None (a
    packed or class-conditional discriminator takes more than an image)."""
    from stagegan.tasks.completion import feature_extractor

    task = trainer.task
    if task.conditional or task.pack != 1 or "discriminator" not in trainer.networks:
        return None
    extractor = feature_extractor(trainer.networks["discriminator"])
    if extractor is None:
        return None
    return lambda images: [tf.cast(f, tf.float32) for f in extractor(images, training=False)]


def write_projection(trainer, input_dir, output, steps, restarts, seed, ema=True, num=None):
    """`stagegan project`: project the images of `input_dir` (up to `num`) and write the new
    folder `output`: `latents.npz` (`z`, `y` where conditional, `l1`, `files`) and
    `projection.png` (each image beside its projection). Returns a one-line summary.

    Raises:
        ConfigError: a task without latent images, a folder without readable images.
    """
    from stagegan.run.reading import check_no_ema, readable_images, user_files
    from stagegan.runfolder import pictures

    task = trainer.task
    check_projectable(task)
    check_no_ema(trainer, ema)
    files, options = user_files(task, input_dir)
    files = files[:num]
    # before any image is decoded: the images and their restarts' samples, held at once
    counts = [("--input", len(files), None)]
    factors = {"--restarts": (restarts, RESTARTS)}
    task.check_memory(trainer.config.batch_size, counts, factors=factors)
    decoded, ok = readable_images(files, options, input_dir)
    images = decoded.astype(np.float32) / 127.5 - 1.0
    found = project_images(trainer, images, steps, restarts, seed, ema)
    output = Path(output)
    partial = output.with_name(f"{output.name}.partial-{os.getpid()}")
    try:
        partial.mkdir(parents=True)
        arrays = {"z": found.z, "l1": found.l1, "files": np.array([str(f) for f, k in
                  zip(files, ok, strict=True) if k])}  # fmt: skip
        if found.y is not None:
            arrays["y"] = found.y
        np.savez(partial / "latents.npz", **arrays)
        pairs = np.stack([images, found.samples], axis=1).reshape(-1, *images.shape[1:])
        pictures.write_png(pictures.image_grid(pairs, columns=2), partial / "projection.png")
        summary = {"count": len(images), "l1": float(found.l1.mean()), "steps": steps}
        (partial / "projection.json").write_text(json.dumps(summary) + "\n")
        os.replace(partial, output)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise WriteError("--output", f"cannot write {output}: {e.strerror or e}") from None
    return (
        f"projected {len(images)} images into {output} (mean l1 {found.l1.mean():.4f} in [0, 1] "
        f"units; worst {found.l1.max():.4f})"
    )
