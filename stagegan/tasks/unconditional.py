"""Unconditional image GANs: a DCGAN-style generator and discriminator.

Resolutions 28 (from 7x7), 32 and 64 (from 4x4); `model.width` sets the channel count of the
largest feature map. Loss terms:
    d_loss, g_loss      the adversarial pair named by `loss.adversarial`
    gradient_penalty    WGAN-GP on real/fake interpolates (weight it, e.g. 10)
    r1                  R1 on real images (weight it gamma / 2; usable lazily with `every`)
The interpolation weights of the gradient penalty are drawn with the global batch's noise, so
the penalty does not depend on the number of towers. `model.pack: m` shows the discriminator m
images at once, stacked along the channels (PacGAN); `model.spectral_norm` normalises its
convolutions and output layer (see `stagegan.layers`).
"""

import keras

from stagegan import losses
from stagegan.data import DEFAULTS as DATA_DEFAULTS
from stagegan.errors import ConfigError
from stagegan.layers import conv2d, dense
from stagegan.tasks.base import ImageTask, adversarial_losses, float32, positive

START = {28: 7, 32: 4, 64: 4}  # the generator's first feature map side
UPSAMPLINGS = {28: 2, 32: 3, 64: 4}


class Unconditional(ImageTask):
    name = "unconditional"
    loss_terms = ("d_loss", "g_loss", "gradient_penalty", "r1")
    generator_adversarial_terms = ("g_loss",)  # what benchmarks/ablation.py removes
    monitor_terms = {"d_loss": losses.ACCURACY_TERMS}  # logged with it
    realism_metric = "fid"  # lower is better
    defaults = {
        "data": dict(DATA_DEFAULTS),
        "model": {
            "latent_dim": 64,
            "width": 64,
            "batchnorm": True,
            "pack": 1,
            "spectral_norm": False,
            "generator": None,
            "discriminator": None,
        },
        "loss": {"adversarial": "non_saturating"},
    }

    def __init__(self, options, rngs):
        super().__init__(options, rngs)
        self.size = self.data["size"]
        if self.size not in START:
            raise ConfigError("data.size", f"must be 28, 32 or 64. Received: {self.size}")
        positive(self.model, "model", "latent_dim")
        positive(self.model, "model", "width")
        self.pack = positive(self.model, "model", "pack")
        self.d_loss, self.g_loss = losses.adversarial(self.loss["adversarial"])
        self.d_accuracy = losses.AccuracyMonitor(self.loss["adversarial"])

    def build(self):
        self.build_source()
        image = (self.size, self.size, self.data["channels"])
        latent = (self.model["latent_dim"],)
        self.generator = self.build_network("generator", generator, latent, image)
        packed = (self.size, self.size, self.data["channels"] * self.pack)
        self.discriminator = self.build_network("discriminator", discriminator, packed, (1,))
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        return self.networks

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

    eval_count = 10000  # FID's usual sample count (fewer when the real split is smaller)
    eval_metrics = ("count", "fid", "kid", "kid_std")

    def uses_features(self, evaluation):
        return True  # FID/KID: Evaluation.check loads the extractor before training

    def check_eval_count(self, count, key):
        if count < 4:
            raise ConfigError(key, f"FID/KID need at least 4 images; {count} are available")
        super().check_eval_count(count, key)

    def evaluate(self, evaluation):
        """FID and KID between generated and real images (held out where the source has a
        split), on the features of `evaluation.features()`."""
        return evaluation.fid_kid(self)


# The built-in networks: `model.generator` / `model.discriminator` may name replacements with
# the same signature (`builder(task) -> keras.Model`).


def generator(task):
    """DCGAN generator: z [latent_dim] -> [S, S, C] in [-1, 1]."""
    layers, size = keras.layers, task.size
    start, ups = START[size], UPSAMPLINGS[size]
    width, channels, norm = task.model["width"], task.data["channels"], task.model["batchnorm"]
    z = keras.Input((task.model["latent_dim"],))
    top = width * 2 ** (ups - 1)
    h = layers.Dense(start * start * top, use_bias=not norm, name="project")(z)
    h = layers.Reshape((start, start, top))(h)
    for i in range(ups):
        if norm:
            h = layers.BatchNormalization(name=f"bn{i}")(h)
        h = layers.ReLU()(h)
        last = i == ups - 1
        filters = channels if last else width * 2 ** (ups - 2 - i)
        h = layers.Conv2DTranspose(
            filters, 4, strides=2, padding="same", use_bias=last or not norm, name=f"up{i}"
        )(h)
    return keras.Model(z, layers.Activation("tanh")(h), name="generator")


def discriminator(task):
    """DCGAN discriminator: `model.pack` images stacked along the channels [S, S, C * pack]
    -> one logit."""
    layers, size, width = keras.layers, task.size, task.model["width"]
    norm = task.model["spectral_norm"]
    x = keras.Input((size, size, task.data["channels"] * task.model["pack"]))
    h = x
    for i in range(UPSAMPLINGS[size]):
        h = conv2d(width * 2**i, 4, 2, f"down{i}", norm)(h)
        h = layers.LeakyReLU(0.2)(h)
    logit = dense(1, "out", norm)(layers.Flatten()(h))
    return keras.Model(x, logit, name="discriminator")
