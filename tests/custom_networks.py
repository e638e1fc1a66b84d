"""Network builders named by tests as `model.generator: custom_networks:...` (mog2d task)."""

import keras


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
