"""A worked custom network: a small U-Net completion network for the built-in `completion`
task, used by naming it in the config (see completion_unet.yaml):

    model: {generator: unet_generator:generator}

A network builder is called as `builder(task)` inside the network's name scope and returns a
`keras.Model`. It reads what it needs from the task (`task.size`, `task.data`, `task.model`).
stagegan checks the shapes once at build time: for `completion` the generator maps
[S, S, C + 1] (image with the hole zeroed, then the mask) to [S, S, C] in [-1, 1].
"""

import keras


def generator(task):
    size, channels, width = task.size, task.data["channels"], task.model["width"]
    layers = keras.layers
    x = keras.Input((size, size, channels + 1))
    e1 = layers.Conv2D(width, 3, padding="same", activation="relu", name="e1")(x)
    e2 = layers.Conv2D(2 * width, 3, strides=2, padding="same", activation="relu", name="e2")(e1)
    m = layers.Conv2D(2 * width, 3, padding="same", dilation_rate=2, activation="relu", name="m1")(
        e2
    )
    m = layers.Conv2D(2 * width, 3, padding="same", dilation_rate=4, activation="relu", name="m2")(
        m
    )
    d1 = layers.Conv2DTranspose(width, 4, strides=2, padding="same", activation="relu", name="d1")(
        m
    )
    d1 = layers.Concatenate()([d1, e1])  # the skip connection
    y = layers.Conv2D(channels, 3, padding="same", activation="tanh", name="out")(d1)
    return keras.Model(x, y, name="generator")
