"""Network builders named by tests as `model.generator: custom_networks:...` (mog2d task)."""

import keras
import numpy as np


def wide(task):
    """A valid mog2d generator: z -> Dense(32) -> Dense(32) -> 2."""
    z = keras.Input((task.model["latent_dim"],))
    h = keras.layers.Dense(32, activation="relu", name="a")(z)
    h = keras.layers.Dense(32, activation="relu", name="b")(h)
    return keras.Model(z, keras.layers.Dense(2, name="out")(h))


def three_outputs(task):
    z = keras.Input((task.model["latent_dim"],))
    return keras.Model(z, keras.layers.Dense(3, name="out")(z))


def wrong_input(task):
    z = keras.Input((5,))
    return keras.Model(z, keras.layers.Dense(2, name="out")(z))


def not_a_model(task):
    return keras.layers.Dense(2)


def mean_colour_features():
    """A FID/KID feature extractor for tests (`--features custom_networks:mean_colour_features`):
    each image's mean colour, 3 numbers."""
    return keras.Sequential([keras.layers.GlobalAveragePooling2D()])


def raises(task):
    """A builder with a bug of its own."""
    raise KeyError("width_multiplier")


# Feature extractors that fail (`--features custom_networks:...`), each one way.


def raising_features():
    raise RuntimeError("no weights here")


NOT_A_FUNCTION = 42


def nan_features():
    """Finite for blank images (the check before training passes), NaN for the others."""
    return lambda images: np.where(np.abs(images).max(axis=(1, 2, 3)) > 0, np.nan, 0.0)[:, None]


def one_row_short():
    return lambda images: np.zeros((max(len(images) - 1, 0), 3), np.float32)


def text_features():
    return lambda images: np.array([["a"]] * len(images))


def plain_function_features():
    """A builder returning a plain function of the images (no `training` argument)."""
    return lambda images: np.asarray(images).mean(axis=(1, 2))


# Generators that copy one image of tests/test_memorisation.py's grey folder (image i is grey
# level 4 i): every sample is that image, whatever the noise.


def _constant_generator(task, level):
    z = keras.Input((task.model["latent_dim"],))
    side, channels = task.size, task.data["channels"]
    h = keras.layers.Dense(side * side * channels, name="copy")(z)
    h = keras.layers.Reshape((side, side, channels))(h)
    return keras.Model(z, keras.ops.multiply(h, 0.0) + (level / 127.5 - 1.0))


def copies_training_image(task):
    """Every sample is image 0 (grey 0), a training image of the split."""
    return _constant_generator(task, 0)


def copies_held_out_image(task):
    """Every sample is image 2 (grey 8), a held-out image of the split."""
    return _constant_generator(task, 8)
