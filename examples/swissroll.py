"""A worked custom task: a GAN on the 2-D Swiss roll, with a lazy R1 penalty.

Run it (from the repository root):

    python -m stagegan train --config examples/swissroll.yaml

The config names this task as `task: swissroll:SwissRoll`; stagegan imports `swissroll` from the
config file's folder (or the current directory, or PYTHONPATH) and calls
`SwissRoll(options, rngs)`. A task does four things:

1. builds its networks under variable scopes (`build`), which is what stage patterns such as
   `generator/*` select;
2. draws one global batch: real examples and random inputs, from the run's random streams so
   that the run is reproducible and resumable;
3. returns named loss terms for one tower's shard of a batch (`losses`): stages weigh and
   combine these names;
4. produces samples (`sample`).
"""

import math

import keras
import tensorflow as tf

from stagegan.core import losses
from stagegan.errors import ConfigError
from stagegan.tasks.base import Task


def mlp(inputs, outputs, hidden, name):
    x = keras.Input((inputs,))
    h = x
    for i in range(2):
        h = keras.layers.Dense(hidden, activation="relu", name=f"hidden{i}")(h)
    return keras.Model(x, keras.layers.Dense(outputs, name="out")(h), name=name)


class SwissRoll(Task):
    name = "swissroll"
    # The names stages may use in `loss:`; anything else is a config error before training.
    loss_terms = ("d_loss", "g_loss", "r1")
    # Every option the task takes, with its default; unknown keys are config errors.
    defaults = {
        "data": {"turns": 1.5, "noise": 0.05},
        "model": {"latent_dim": 8, "hidden": 64},
        "loss": {"adversarial": "hinge"},
    }

    def __init__(self, options, rngs):
        super().__init__(options, rngs)  # merges options over defaults, checks types
        if self.data["turns"] <= 0:
            raise ConfigError("data.turns", f"must be positive. Received: {self.data['turns']}")
        self.d_loss, self.g_loss = losses.adversarial(self.loss["adversarial"])

    def build(self):
        # Each network under its own name scope: its variables become generator/... and
        # discriminator/..., and stages select them by those patterns.
        hidden, latent = self.model["hidden"], self.model["latent_dim"]
        with keras.name_scope("generator"):
            self.generator = mlp(latent, 2, hidden, "generator")
        with keras.name_scope("discriminator"):
            self.discriminator = mlp(2, 1, hidden, "discriminator")
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        return self.networks

    def real_batch(self, batch_size):
        # Draw from self.rngs.data: checkpointed with the run, independent of the tower count.
        t = self.rngs.data.uniform([batch_size]) * self.data["turns"] * 2 * math.pi + 1.0
        points = tf.stack([t * tf.cos(t), t * tf.sin(t)], axis=1) / (
            self.data["turns"] * 2 * math.pi
        )
        return {"x": points + self.rngs.data.normal([batch_size, 2], stddev=self.data["noise"])}

    def random_inputs(self, batch_size):
        return {"z": self.rngs.noise.normal([batch_size, self.model["latent_dim"]])}

    def losses(self, batch, terms):
        # Compute only what is asked for: a discriminator-only stage never runs g_loss.
        out = {}
        fake = self.generator(batch["z"], training=True)
        if "d_loss" in terms:
            real_logits = self.discriminator(batch["x"], training=True)
            fake_logits = self.discriminator(tf.stop_gradient(fake), training=True)
            out["d_loss"] = self.d_loss(real_logits, fake_logits)
        if "g_loss" in terms:
            out["g_loss"] = self.g_loss(self.discriminator(fake, training=True))
        if "r1" in terms:
            out["r1"] = losses.r1_penalty(self.discriminator, batch["x"])
        return out

    def sample(self, inputs):
        return self.generator(inputs["z"], training=False)
