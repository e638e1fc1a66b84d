"""A light-weight GAN after FastGAN (Liu et al. 2021, "Towards Faster and Stabilized GAN
Training for High-fidelity Few-shot Image Synthesis"; odegeasslbc/FastGAN-pytorch
`models.py`), at 32 and 64 px, written against stagegan's extension points to measure
whether it earns a place among the built-in networks (`benchmarks/fastgan_clusters.yaml`
uses it; `benchmarks/colour.py --arm 'fastgan=benchmarks/fastgan_clusters.yaml'`).
Not part of stagegan.

    task: fastgan:FastGAN
    model: {generator: fastgan:generator, discriminator: fastgan:discriminator}

What it keeps of the reference:
  * generator: a 4x4 start from z by a transposed convolution, nearest-upsampling blocks
    (conv 3x3, batch norm, GLU; every other block two such convs), skip-layer excitation
    (a low-resolution feature map, pooled to 4x4 and squeezed by a 4x4 and a 1x1 conv
    with swish and sigmoid, gates the channels of a map two doublings up), conv 3x3 + tanh;
  * discriminator: down blocks averaging a strided path (conv 4x4 s2, BN, leaky ReLU, conv
    3x3, BN, leaky ReLU) with a pooled one (average pool, conv 1x1, BN, leaky ReLU),
    skip-layer excitation from high to low resolution, spectral norm on its convs;
  * the self-supervised reconstruction: on real images, two decoders rebuild the image from
    the 8x8 features and one quadrant of the image from the matching quadrant of the 16x16
    features; the loss term `recon` (the discriminator's updates weigh it) is their L1.
Departures (CPU-sized, or not yet tried): channel widths from `model.width` as DCGAN's (w/2
at the top side, doubling per halving, at most 8w); excitation over two doublings (generator
4->16, 8->32, 16->64; discriminator 32->8, 16->4; the reference spans four in the generator,
4->64, and three in the discriminator); spectral norm on the discriminator's convs only (not
the generator's, nor its decoders', which the reference also normalises); Glorot
initialisation; biases where the reference has none (excitation, from_rgb, to_rgb); no
noise injection; no second, small-image discriminator branch; L1 instead of LPIPS (no
pretrained network offline); stagegan's hinge (the reference's draws a random margin in
[0.8, 1]); one logit (flattened 4x4 features, with stagegan's projection head when
conditional) instead of a 5x5 patch map. The reconstruction reads the features of the
discriminator's own pass over the real images (one pass, as the reference's `train_d`).
"""

import keras
import tensorflow as tf

from stagegan.core.layers import conv2d, dense
from stagegan.errors import ConfigError
from stagegan.tasks.unconditional import Unconditional


def _widths(task):
    """{side: channels}: w/2 at the image side, doubling per halving, at most 8w."""
    size, w = task.size, task.model["width"]
    sides = [4 * 2**i for i in range(size.bit_length() - 2)]  # 4 .. size
    return {s: min(8 * w, max(1, w * (size // s) // 2)) for s in sides}


class GLU(keras.layers.Layer):
    """Gated linear unit over the channels: a * sigmoid(b), [a, b] the two halves."""

    def call(self, h):
        a, b = tf.split(h, 2, axis=-1)
        return a * tf.sigmoid(b)

    def compute_output_shape(self, shape):
        return (*shape[:-1], shape[-1] // 2)


def _up(h, channels, name, twice):
    h = keras.layers.UpSampling2D(2, name=f"{name}_up")(h)
    for i in range(2 if twice else 1):
        h = keras.layers.Conv2D(2 * channels, 3, padding="same", use_bias=False,
                                name=f"{name}_conv{i}")(h)  # fmt: skip
        h = keras.layers.BatchNormalization(name=f"{name}_bn{i}")(h)
        h = GLU()(h)
    return h


def _excite(small, big, name, spectral_norm=False):
    """Skip-layer excitation: `small` pooled to 4x4 gates the channels of `big`."""
    pool = small.shape[1] // 4
    s = keras.layers.AveragePooling2D(pool, name=f"{name}_pool")(small) if pool > 1 else small
    if spectral_norm:  # valid 4x4 on a 4x4 map: a dense layer on the flattened map
        s = dense(big.shape[-1], f"{name}_squeeze", True)(keras.layers.Flatten()(s))
    else:
        s = keras.layers.Flatten()(
            keras.layers.Conv2D(big.shape[-1], 4, padding="valid", name=f"{name}_squeeze")(s)
        )
    s = keras.layers.Activation("swish")(s)
    s = dense(big.shape[-1], f"{name}_excite", spectral_norm, activation="sigmoid")(s)
    return big * keras.layers.Reshape((1, 1, big.shape[-1]))(s)


def generator(task):
    """z [latent_dim] (and a class index when conditional) -> [S, S, C] in [-1, 1]."""
    widths, size = _widths(task), task.size
    z = keras.Input((task.model["latent_dim"],))
    inputs, h = z, z
    if task.conditional:
        y = keras.Input((), dtype="int32")
        embedded = keras.layers.Embedding(task.num_classes, task.model["latent_dim"],
                                          name="embed")(y)  # fmt: skip
        inputs, h = [z, y], keras.layers.Concatenate()([z, embedded])
    h = keras.layers.Reshape((1, 1, h.shape[-1]))(h)
    h = keras.layers.Conv2DTranspose(2 * widths[4], 4, padding="valid", use_bias=False,
                                     name="init")(h)  # fmt: skip
    feats = {4: GLU()(keras.layers.BatchNormalization(name="init_bn")(h))}
    side = 4
    while side < size:
        side *= 2
        h = _up(feats[side // 2], widths[side], f"up{side}", twice=side in (8, 32))
        if side // 4 in feats:
            h = _excite(feats[side // 4], h, f"sle{side // 4}_{side}")
        feats[side] = h
    out = keras.layers.Conv2D(task.data["channels"], 3, padding="same", name="to_rgb")(h)
    return keras.Model(inputs, keras.layers.Activation("tanh")(out), name="generator")


def _down(h, channels, name):
    main = conv2d(channels, 4, 2, f"{name}_conv0", True, use_bias=False)(h)
    main = keras.layers.LeakyReLU(0.2)(keras.layers.BatchNormalization(name=f"{name}_bn0")(main))
    main = conv2d(channels, 3, 1, f"{name}_conv1", True, use_bias=False)(main)
    main = keras.layers.LeakyReLU(0.2)(keras.layers.BatchNormalization(name=f"{name}_bn1")(main))
    direct = keras.layers.AveragePooling2D(2, name=f"{name}_pool")(h)
    direct = conv2d(channels, 1, 1, f"{name}_direct", True, use_bias=False)(direct)
    direct = keras.layers.BatchNormalization(name=f"{name}_bn2")(direct)
    return (main + keras.layers.LeakyReLU(0.2)(direct)) / 2


class Discriminator(keras.Model):
    """The FastGAN discriminator: `call` gives the logit (what stagegan's losses read);
    `reconstruct` runs the body and both decoders (it builds them at construction; the `recon`
    term reuses the body's features from the pass over the reals instead, `FastGAN.losses`)."""

    def __init__(self, body, whole, part, **kwargs):
        super().__init__(**kwargs)
        self.body, self.whole, self.part = body, whole, part

    def call(self, inputs, training=False):
        return self.body(inputs, training=training)[0]

    def reconstruct(self, inputs, quadrant, training=True):
        """`(whole, part)`: the image rebuilt from the 8x8 features, and the quadrant
        `quadrant` [B] (0..3: top left, top right, bottom left, bottom right) rebuilt from the
        same quadrant of the 16x16 features."""
        _, f8, f16 = self.body(inputs, training=training)
        part = self.part(quadrants(f16, quadrant), training=training)
        return self.whole(f8, training=training), part


def quadrants(images, quadrant):
    """The quadrant `quadrant` [B] of each of `images` [B, S, S, C]."""
    half = images.shape[1] // 2
    corners = [images[:, :half, :half], images[:, :half, half:],
               images[:, half:, :half], images[:, half:, half:]]  # fmt: skip
    return tf.gather(tf.stack(corners, axis=1), quadrant, axis=1, batch_dims=1)


def discriminator(task):
    """[S, S, C] (and a class index per image when conditional) -> one logit."""
    if task.pack != 1:
        raise ValueError("the FastGAN prototype sees one image at a time (model.pack: 1)")
    widths, size, channels = _widths(task), task.size, task.data["channels"]
    x = keras.Input((size, size, channels))
    h = keras.layers.LeakyReLU(0.2)(conv2d(widths[size], 3, 1, "from_rgb", True)(x))
    feats, side = {size: h}, size
    while side > 4:
        side //= 2
        h = _down(h, widths[side], f"down{side}")
        if side * 4 in feats:
            h = _excite(feats[side * 4], h, f"sle{side * 4}_{side}", spectral_norm=True)
        feats[side] = h
    features = keras.layers.Flatten()(h)
    logit = dense(1, "out", True)(features)
    inputs = x
    if task.conditional:
        y = keras.Input((1,), dtype="int32")
        embedded = keras.layers.Embedding(task.num_classes, features.shape[-1], name="embed")(y)
        logit = logit + keras.ops.sum(embedded[:, 0] * features, axis=1, keepdims=True)
        inputs = [x, y]
    body = keras.Model(inputs, [logit, feats[8], feats[16]], name="body")
    decoders = {}
    for name, source, out_side in (("whole", feats[8], size), ("part", feats[16], size // 2)):
        f = keras.Input((8, 8, source.shape[-1]))
        h = f
        for i in range((out_side // 8).bit_length() - 1):
            h = _up(h, max(widths[8 * 2 ** (i + 1)], 8), f"{name}_dec{i}", twice=False)
        rgb = keras.layers.Conv2D(channels, 3, padding="same", name=f"{name}_rgb")(h)
        decoders[name] = keras.Model(f, keras.layers.Activation("tanh")(rgb), name=name)
    network = Discriminator(body, decoders["whole"], decoders["part"], name="discriminator")
    zeros = [tf.zeros((1, size, size, channels))] + ([tf.zeros((1, 1), tf.int32)]
                                                     if task.conditional else [])  # fmt: skip
    network.reconstruct(zeros if task.conditional else zeros[0], tf.zeros([1], tf.int32), False)
    return network


class FastGAN(Unconditional):
    """The unconditional / class-conditional / self-conditioned image task with the FastGAN
    networks and its reconstruction term `recon` (L1 of the two decoders on real images)."""

    name = "fastgan"
    loss_terms = (*Unconditional.loss_terms, "recon")

    def __init__(self, options, rngs):
        super().__init__(options, rngs)
        if self.size not in (32, 64):
            raise ConfigError(
                "data.size", f"the FastGAN prototype draws 32 or 64 px. Received: {self.size}"
            )

    def losses(self, batch, terms):
        # The discriminator's passes are recorded: the first, when d_loss is asked, is the one
        # over the (augmented) real images (`adversarial_losses` scores the reals first), and
        # its 8x8 and 16x16 features feed the decoders without a second pass. This leans on
        # `stagegan.tasks.base.adversarial_losses` scoring the packed reals (pack 1: the
        # augmented reals themselves) before anything else; a change there breaks it.
        network, calls = self.discriminator, []

        def recording(inputs, training=False):
            logit, f8, f16 = network.body(inputs, training=training)
            calls.append((inputs, f8, f16))
            return logit

        self.discriminator = recording
        try:
            out = super().losses(batch, [t for t in terms if t != "recon"])
        finally:
            self.discriminator = network
        if "recon" in terms:
            if "d_loss" in terms:
                inputs, f8, f16 = calls[0]
            else:
                inputs = self.context.augment(batch["x"], batch, "real", 1)
                if self.conditional:
                    inputs = [inputs, tf.reshape(batch["y"], [-1, 1])]
                _, f8, f16 = network.body(inputs, training=True)
            seen = inputs[0] if self.conditional else inputs
            quadrant = tf.minimum(tf.cast(batch["epsilon"] * 4, tf.int32), 3)
            whole = network.whole(f8, training=True)
            part = network.part(quadrants(f16, quadrant), training=True)
            out["recon"] = tf.reduce_mean(tf.abs(tf.cast(whole, tf.float32) - seen)) + (
                tf.reduce_mean(tf.abs(tf.cast(part, tf.float32) - quadrants(seen, quadrant)))
            )
        return out
