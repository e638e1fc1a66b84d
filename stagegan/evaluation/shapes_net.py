"""A small classifier of the built-in `shapes` images, whose features give a realism metric.

FID's InceptionV3 needs ImageNet weights (a download, so nothing offline) and knows nothing of
32-pixel shapes. This network is trained on what the shapes source itself knows about each
image (`stagegan.data.sources.draw_shapes(labels=True)`): the kind and colour of its topmost shape,
the colour of its background and how many shapes show. The Fréchet distance between the
penultimate-layer features of two image sets (`fid` in `eval`, with `features: shapes_net`)
then measures how shape-like one set looks next to the other, the way FID does with Inception
features and FID on MNIST does with a LeNet.

The weights ship with the package (`shapes_net.npz`, about 0.4 MB). `python -m
stagegan.evaluation.shapes_net` trains them again from seed 0 in about 6 minutes on 2 CPU
cores and prints the held-out accuracy of each head.

Inputs are images in [-1, 1] of any square size and 1 or 3 channels: they are resized to
32x32 (area averaging) and grey is repeated to RGB. A quarter of the training images are
turned grey, so grey runs get sensible features too.
"""

import pathlib
import sys

import numpy as np

SIDE = 32
FEATURES = 128
WEIGHTS = pathlib.Path(__file__).with_name("shapes_net.npz")
HEADS = {"kind": 4, "colour": 9, "background": 8, "shapes": 4}
TRAIN_SEED, TRAIN_COUNT, HELD_OUT_SEED, BATCH = 0, 16000, 424242, 64


def build():
    """The classifier: images [32, 32, 3] in [-1, 1] -> {head: logits}, and its feature model
    (the same layers up to the 128-d penultimate layer)."""
    import keras

    layers = keras.layers
    x = keras.Input((SIDE, SIDE, 3))
    h = x
    for i, filters in enumerate((16, 32, 64)):
        for part, stride in (("a", 1), ("b", 2)):
            h = layers.Conv2D(filters, 3, stride, padding="same", name=f"conv{i}{part}")(h)
            h = layers.ReLU()(layers.BatchNormalization(name=f"bn{i}{part}")(h))
    h = layers.Flatten()(layers.AveragePooling2D(2)(h))  # 4x4 -> 2x2, keeps where things are
    features = layers.Dense(FEATURES, activation="relu", name="features")(h)
    heads = {name: layers.Dense(n, name=name)(features) for name, n in HEADS.items()}
    return keras.Model(x, heads, name="shapes_net"), keras.Model(x, features, name="features")


def prepare(images):
    """uint8 [N, S, S, C] or float [-1, 1] -> float32 [N, 32, 32, 3] in [-1, 1]."""
    import tensorflow as tf

    images = np.asarray(images)
    if images.dtype == np.uint8:
        images = images.astype(np.float32) / 127.5 - 1.0
    images = tf.constant(images, tf.float32)
    if images.shape[-1] == 1:
        images = tf.repeat(images, 3, axis=-1)
    if images.shape[1] != SIDE or images.shape[2] != SIDE:
        images = tf.image.resize(images, [SIDE, SIDE], method="area")
    return images


def labelled_shapes(count, seed):
    """(images uint8 [N, 32, 32, 3], labels) of the shapes source."""
    from stagegan.data.sources import draw_shapes

    return draw_shapes(count, SIDE, seed, labels=True)


def train(seed=TRAIN_SEED, count=TRAIN_COUNT, epochs=16, path=WEIGHTS, out=sys.stdout):
    """Train the classifier on `count` labelled shapes and save its weights to `path`."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    images, labels = labelled_shapes(count, seed)
    grey = np.random.default_rng(seed).uniform(size=count) < 0.25
    images = images.copy()
    images[grey] = images[grey].mean(axis=-1, keepdims=True).round().astype(np.uint8)
    model, _ = build()
    steps = epochs * -(-count // BATCH)
    model.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, steps)),
        loss={name: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for name in HEADS},
    )
    x = prepare(images)
    y = {name: tf.constant(labels[name]) for name in HEADS}
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=True)
    np.savez(path, *model.get_weights())
    for name, value in accuracy(model).items():
        print(f"{name:<10} {value:.3f}", file=out)
    return model


def accuracy(model, count=2000, seed=HELD_OUT_SEED):
    """Each head's accuracy on `count` fresh labelled shapes (colour images)."""
    images, labels = labelled_shapes(count, seed)
    logits = model(prepare(images), training=False)
    return {
        name: float(np.mean(np.argmax(np.asarray(logits[name]), axis=-1) == labels[name]))
        for name in HEADS
    }


def load(path=WEIGHTS):
    """The trained classifier and its feature model, from the shipped weights."""
    model, features = build()
    with np.load(path) as stored:
        model.set_weights([stored[f"arr_{i}"] for i in range(len(stored.files))])
    return model, features


_LOADED = {}


def extractor():
    """A callable images [N, S, S, C] in [-1, 1] -> features [N, 128] (loaded once)."""
    if "features" not in _LOADED:
        _LOADED["features"] = load()[1]
    features = _LOADED["features"]
    return lambda images: features(prepare(images), training=False)


if __name__ == "__main__":
    train()
