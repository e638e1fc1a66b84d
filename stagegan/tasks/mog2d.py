"""mog2d: a mixture of 2-D Gaussians, the classic mode-collapse test bed.

Layouts: `ring`, 8 modes on the unit circle (std 0.01); `grid`, 25 modes at {-4,-2,0,2,4}^2
(std 0.05). Points are generated in-graph from the run's data stream, so the data position is
part of the checkpointed random state. The generator and discriminator are MLPs.

Loss terms:
    d_loss, g_loss      the adversarial pair named by `loss.adversarial`
    gradient_penalty    WGAN-GP on real/fake interpolates (weight it, e.g. 10)
    r1                  R1 on real points (weight it gamma / 2)
    r2                  R2 on generated points (weight it gamma / 2)
    lecam               LeCam (Tseng et al. 2021; see `stagegan.core.regularisers`)
`model.pack: m` shows the discriminator m points at once (PacGAN); `model.spectral_norm`
normalises its layers (see `stagegan.core.layers`).
"""

import math

import keras
import numpy as np
import tensorflow as tf

from stagegan.core import losses, regularisers
from stagegan.core.layers import dense
from stagegan.errors import ConfigError
from stagegan.runfolder import pictures
from stagegan.tasks.base import (
    Sizes,
    Task,
    adversarial_losses,
    build_network,
    builds_own,
    choice,
    float32,
    positive,
)

LAYOUT_STD = {"ring": 0.01, "grid": 0.05}


def mode_centres(layout):
    """The (modes, 2) array of mixture centres of a layout."""
    if layout == "ring":
        angles = 2 * math.pi * np.arange(8) / 8
        return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    values = np.array([-4.0, -2.0, 0.0, 2.0, 4.0], np.float32)
    return np.array([(x, y) for x in values for y in values], np.float32)


def mlp(name, inputs, hidden, layers, outputs, spectral_norm=False):
    x = keras.Input((inputs,))
    h = x
    for i in range(layers):
        h = dense(hidden, f"hidden{i}", spectral_norm, activation="relu")(h)
    y = dense(outputs, "out", spectral_norm)(h)
    return keras.Model(x, y, name=name)


# The built-in networks: `model.generator` / `model.discriminator` may name replacements with
# the same signature (`builder(task) -> keras.Model`).


def generator(task):
    """MLP: z [latent_dim] -> a point [2]."""
    m = task.model
    return mlp("generator", m["latent_dim"], m["hidden"], m["layers"], 2)


def discriminator(task):
    """MLP: `model.pack` points, concatenated [2 * pack] -> one logit."""
    m = task.model
    return mlp("discriminator", 2 * m["pack"], m["hidden"], m["layers"], 1, m["spectral_norm"])


class Mog2D(Task):
    name = "mog2d"
    # "mixture": `centres` and `std`, the Gaussian mixture the `mixture` metrics compare with
    capabilities = frozenset({"latents", "mixture"})
    loss_terms = ("d_loss", "g_loss", "gradient_penalty", "r1", "r2", "lecam")
    generator_adversarial_terms = ("g_loss",)  # what benchmarks/ablation.py removes
    monitor_terms = {  # logged with them
        "d_loss": losses.ACCURACY_TERMS,
        "lecam": regularisers.LECAM_MONITORS,
    }
    metrics = ("mixture",)  # stagegan.evaluation.builtin
    defaults = {
        "data": {"layout": "ring", "std": None},
        "model": {
            "latent_dim": 16,
            "hidden": 128,
            "layers": 3,
            "pack": 1,
            "spectral_norm": False,
            "generator": None,
            "discriminator": None,
        },
        "loss": {"adversarial": "non_saturating", **regularisers.LECAM_DEFAULTS},
    }

    def __init__(self, options, rngs):
        super().__init__(options, rngs)
        layout = choice(self.data, "data", "layout", tuple(LAYOUT_STD))
        std = self.data["std"] if self.data["std"] is not None else LAYOUT_STD[layout]
        # An int beyond any float (10**400) would overflow `float(std)` below.
        if isinstance(std, bool) or not isinstance(std, (int, float)) or not 0 < std < 1e308:
            raise ConfigError("data.std", f"must be a positive number. Received: {std!r}")
        for key in ("latent_dim", "hidden", "layers", "pack"):
            positive(self.model, "model", key)
        self.pack = self.model["pack"]
        self.centres = tf.constant(mode_centres(layout))
        self.std = float(std)
        self.d_loss, self.g_loss = losses.adversarial(self.loss["adversarial"])
        self.d_accuracy = losses.AccuracyMonitor(self.loss["adversarial"])

    def build(self):
        latent = (self.model["latent_dim"],)
        self.generator = build_network(self, "generator", generator, latent, (2,))
        packed = (2 * self.pack,)
        self.discriminator = build_network(self, "discriminator", discriminator, packed, (1,))
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        return self.networks

    def sizes(self):
        m = self.model
        latent, hidden, layers, pack = m["latent_dim"], m["hidden"], m["layers"], m["pack"]
        # Each Dense layer also costs Python and TensorFlow objects: about a thousand
        # parameters' worth, counted with the hidden layers.
        inner = (layers - 1) * hidden * hidden + layers * (hidden + 1000)
        deep = ("model.hidden", "model.layers")
        parameters, activations = [], []
        if builds_own(self, "generator"):
            parameters += [(("model.latent_dim", "model.hidden"), latent * hidden)]
            parameters += [(deep, inner + 2 * hidden)]
            activations += [(("model.latent_dim",), latent), (deep, layers * hidden)]
        if builds_own(self, "discriminator"):
            parameters += [(("model.pack", "model.hidden"), 2 * pack * hidden)]
            parameters += [(deep, inner + hidden)]
            activations += [(("model.pack",), 2 * pack), (deep, layers * hidden)]
        sample = 2 + latent  # a point, and its latent
        return Sizes(parameters, activations, sample, ("model.latent_dim",))

    def real_batch(self, batch_size):
        rng = self.rngs.data
        modes = rng.uniform([batch_size], 0, len(self.centres), dtype=tf.int32)
        noise = rng.normal([batch_size, 2], stddev=self.std)
        return {"x": tf.gather(self.centres, modes) + noise}

    def random_inputs(self, batch_size):
        noise = self.rngs.noise
        return {
            "z": noise.normal([batch_size, self.model["latent_dim"]]),
            "epsilon": noise.uniform([batch_size]),
        }

    def losses(self, batch, terms):
        return adversarial_losses(self, batch, terms)

    def sample(self, inputs):
        return float32(self.generator(inputs["z"], training=False))

    sample_count = 1000  # points in a scatter

    def picture(self, inputs, outputs, info):
        """Generated points over the true mode centres."""
        centres = self.centres.numpy()
        limit = float(np.abs(centres).max()) * 1.5 + 0.2
        return pictures.scatter(outputs["samples"], centres, limit)
