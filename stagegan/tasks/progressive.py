"""Progressive growing (`model.arch: progressive`): Karras et al. 2018, "Progressive Growing of
GANs for Improved Quality, Stability, and Variation", as stages of the stage scheduler.

The networks follow the reference code (tkarras/progressive_growing_of_gans, `networks.py`):

- generator: z (pixel-normalised) -> a dense layer to 4x4, a 3x3 conv; then one block per
  doubling up to `data.size`: nearest 2x upsampling and two 3x3 convs. Leaky ReLU (0.2) and
  pixel norm after every layer; a 1x1 `to_rgb` conv per resolution, linear;
- discriminator: a 1x1 `from_rgb` conv per resolution; one block per halving: two 3x3 convs
  and 2x2 average pooling; at 4x4 the minibatch standard deviation as one more feature map, a
  3x3 conv, a dense layer and the logit. Leaky ReLU (0.2), no normalisation;
- equalised learning rate (`model.equalised_lr`, on by default): weights drawn from N(0, 1)
  and scaled at run time by He's constant, so that Adam's step is the same for every layer.

Channels: `model.width` at `data.size`, doubling per halving of the side up to 4 x width (the
reference's fmap_base / fmap_max, scaled down for CPUs).

Every block exists from step 0 (so checkpoints, `plan`, extension and warm starts see one set
of variables); a stage picks the resolution it trains at (`stages[i].resolution`), and with
`fade_in: true` it is a transition stage: the new block's output is blended with the
upsampled (generator) or downsampled (discriminator) path of the resolution below, by alpha,
which goes linearly from 1/steps on the stage's first step to 1 on its last. Real images are
area-downsampled to the stage's resolution on each replica's device, and blended between the
two resolutions by the same alpha, as the reference's `process_reals` does. A stage's losses
never touch the blocks above its resolution, so their gradients are None and the stage step
leaves them (and their optimizer slots) unchanged: the scheduler's own machinery.

Alpha and the resolution the generator currently draws at are variables (checkpointed), set
at the start of every stage step from the stage and its step, so a run killed mid-transition
resumes exactly. Outside the stage steps (sample dumps, evaluation, `sample`, the EMA average)
the generator draws at that resolution, with that alpha, and is upsampled (nearest) to
`data.size`: samples at a stage's end show what it trained.

Departures from the reference, and why:

- the minibatch standard deviation groups *consecutive* images (groups of
  `model.mbstd_group`), not every (batch / group)-th: so a run's groups are the same whether
  its batch is split over 1 or several towers (each shard a multiple of the group);
- alpha's fade is a stage of its own, scheduled like any other, instead of a kimg schedule;
- the optimizer state is not reset when the resolution changes (the reference resets Adam's
  moments at every change): a block that keeps training keeps its moments, as the issue asks;
  a new block's first steps use Adam's bias correction of the optimizer's global count;
- the generator ends in a linear `to_rgb` as in the reference; its images are clipped to
  [-1, 1] only outside training (samples, evaluation).
"""

import math

import keras
import tensorflow as tf

from stagegan.core.layers import minibatch_stddev
from stagegan.errors import ConfigError

SLOPE = 0.2  # leaky ReLU
HE_GAIN = math.sqrt(2)  # for leaky ReLU layers, as the reference uses
MIN_SIDE = 4


def resolutions(size):
    """The sides the networks grow through: 4, 8, ..., size."""
    return [MIN_SIDE * 2**i for i in range(int(math.log2(size // MIN_SIDE)) + 1)]


def check_options(model, size):
    if size not in (8, 16, 32, 64, 128, 256):
        raise ConfigError(
            "data.size",
            f"must be a power of 2 from 8 to 256 with model.arch: progressive. Received: {size}",
        )
    if model["pack"] != 1:  # resnet's options are refused by the task (ARCH_KEYS)
        raise ConfigError(
            "model.pack", f"does not apply to model.arch: progressive. Received: {model['pack']!r}"
        )
    if model["spectral_norm"]:
        raise ConfigError(
            "model.spectral_norm",
            "does not apply to model.arch: progressive (its discriminator has equalised "
            "learning rate and no normalisation, as in the reference)",
        )
    group = model.get("mbstd_group", 4)
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ConfigError("model.mbstd_group", f"must be an int >= 1. Received: {group!r}")
    if not isinstance(model.get("equalised_lr", True), bool):
        raise ConfigError(
            "model.equalised_lr", f"must be true or false. Received: {model['equalised_lr']!r}"
        )


def channels(task, side):
    """Feature maps at side `side`: width at data.size, doubling per halving, at most 4 x."""
    width = task.model["width"]
    return min(width * (task.size // side), 4 * width)


class Growth:
    """A run's progress through the resolutions.

    `index` (int32) and `alpha` (float32) are variables on the variable device: the
    resolution the networks draw at outside the stage steps, and its blend. The task's
    `stage` is the stage whose step is being traced (set by the trainer), which fixes the
    resolution of the traced networks; None outside them.
    """

    def __init__(self, task, device):
        self.task = task
        self.sides = resolutions(task.size)
        with tf.device(device):
            top = len(self.sides) - 1
            self.index = tf.Variable(top, dtype=tf.int32, trainable=False, name="growth_index")
            self.alpha = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="growth_alpha")

    def side_of(self, stage):
        return self.sides[-1] if stage.resolution is None else stage.resolution

    def level(self):
        """`(index, fading)` of the traced stage, or None outside the stage steps."""
        stage = self.task.context.stage
        if stage is None:
            return None
        return self.sides.index(self.side_of(stage)), bool(stage.fade_in)

    def begin_step(self, stage, stage_step):
        """Set the variables for stage step `stage_step` (traced, on the variable device)."""
        self.index.assign(self.sides.index(self.side_of(stage)))
        if stage.fade_in:
            done = tf.cast(stage_step + 1, tf.float32) / float(stage.steps)
            self.alpha.assign(tf.minimum(done, 1.0))
        else:
            self.alpha.assign(1.0)

    def reals(self, images):
        """Real images (one replica's shard, at data.size) at the traced stage's resolution,
        blended as the reference blends them during a transition."""
        index, fading = self.level()
        side = self.sides[index]
        factor = self.sides[-1] // side
        if factor > 1:  # area downsampling: the mean of each factor x factor block
            images = tf.nn.avg_pool2d(images, factor, factor, "VALID")
        if not fading:
            return images
        low = upsample(tf.nn.avg_pool2d(images, 2, 2, "VALID"))
        return lerp(low, images, self.alpha)

    def trackables(self):
        return {"growth_index": self.index, "growth_alpha": self.alpha}

    def describe(self, stage):
        side = self.side_of(stage)
        if not stage.fade_in:
            return f"  resolution: {side} px, alpha 1"
        return (
            f"  resolution: {side} px fading in over {side // 2} px: alpha from "
            f"{1 / stage.steps:.3g} to 1 (linear over {stage.steps} steps)"
        )


def check_stages(stages, size):
    """Refuse a stage resolution the networks do not have, and a fade into 4 px."""
    sides = resolutions(size)
    for stage in stages:
        if stage.resolution is not None and stage.resolution not in sides:
            raise ConfigError(
                f"{stage.key}.resolution",
                f"must be one of {', '.join(map(str, sides))} (powers of 2 from 4 to "
                f"data.size {size}). Received: {stage.resolution}",
            )
        if stage.fade_in and stage.resolution == MIN_SIDE:
            raise ConfigError(
                f"{stage.key}.fade_in",
                f"needs a resolution above {MIN_SIDE} (it fades a new block in over the "
                "resolution below)",
            )


def check_group(group, shard, batch_key="batch_size", pack=1):
    """The minibatch standard deviation's groups must tile each replica's shard (of the
    global batch `batch_key`), counted in discriminator inputs (packs of `pack`)."""
    inputs = shard // pack
    if inputs % min(group, inputs):
        packs = f", {inputs} packs of {pack}" if pack > 1 else ""
        raise ConfigError(
            "model.mbstd_group",
            f"must divide each replica's share of the batch ({batch_key}: {shard} a "
            f"replica{packs}), so that no group spans two devices. Received: {group}",
        )


def lerp(a, b, t):
    return a + (b - a) * t


def upsample(images, factor=2):
    return tf.repeat(tf.repeat(images, factor, axis=1), factor, axis=2)


def pixel_norm(x):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + 1e-8)


class Scaled(keras.layers.Layer):
    """A conv (`kernel` > 0) or dense (`kernel` 0) layer with He's constant applied at run time
    (equalised learning rate) or at initialisation (`equalised` False)."""

    def __init__(self, units, kernel, fan_in, gain=HE_GAIN, equalised=True, **kwargs):
        super().__init__(**kwargs)
        self.units, self.kernel_size, self.equalised = units, kernel, equalised
        std = gain / math.sqrt(fan_in)
        self.scale = std if equalised else 1.0
        shape = (kernel, kernel, fan_in // kernel**2, units) if kernel else (fan_in, units)
        init = keras.initializers.RandomNormal(stddev=1.0 if equalised else std)
        self.kernel = self.add_weight(shape=shape, initializer=init, name="kernel")
        self.bias = self.add_weight(shape=(units,), initializer="zeros", name="bias")
        self.built = True

    def call(self, x):
        kernel = tf.cast(self.kernel, x.dtype) * self.scale
        if self.kernel_size:
            y = tf.nn.conv2d(x, kernel, 1, "SAME")
        else:
            y = tf.matmul(x, kernel)
        return y + tf.cast(self.bias, x.dtype)


def conv(task, units, kernel, fan_channels, name, gain=HE_GAIN):
    return Scaled(
        units, kernel, kernel * kernel * fan_channels, gain, task.model["equalised_lr"], name=name
    )


def act(x):
    return tf.nn.leaky_relu(x, SLOPE)


class Generator(keras.Model):
    """z [latent_dim] (and a class index when conditional) -> [S, S, C]."""

    def __init__(self, task, latent, **kwargs):
        super().__init__(**kwargs)
        self.growth, self.size = task.growth, task.size
        self.sides = resolutions(task.size)
        self.conditional = task.conditional
        if self.conditional:
            self.embed = keras.layers.Embedding(task.num_classes, latent, name="embed")
            self.embed.build((None,))
            latent *= 2
        first = channels(task, MIN_SIDE)
        self.first = first
        self.dense = Scaled(
            16 * first,
            0,
            latent,
            math.sqrt(2) / 4,
            task.model["equalised_lr"],
            name="b4_dense",
        )
        self.conv4 = conv(task, first, 3, first, "b4_conv")
        self.blocks, self.to_rgb = [], []
        colours = task.data["channels"]
        previous = first
        for side in self.sides:
            width = channels(task, side)
            if side > MIN_SIDE:
                self.blocks.append(
                    [
                        conv(task, width, 3, previous, f"b{side}_conv0"),
                        conv(task, width, 3, width, f"b{side}_conv1"),
                    ]
                )
            self.to_rgb.append(conv(task, colours, 1, width, f"to_rgb{side}", gain=1.0))
            previous = width

    def features(self, z, index):
        """The feature map at resolution `sides[index]` (Python int)."""
        h = pixel_norm(z)
        h = act(self.dense(h))
        h = pixel_norm(tf.reshape(h, [-1, MIN_SIDE, MIN_SIDE, self.first]))
        h = pixel_norm(act(self.conv4(h)))
        for block in self.blocks[:index]:
            h = upsample(h)
            for layer in block:
                h = pixel_norm(act(layer(h)))
        return h

    def at(self, z, index, fading, alpha):
        if not fading:
            return self.to_rgb[index](self.features(z, index))
        h = self.features(z, index - 1)
        old = upsample(self.to_rgb[index - 1](h))
        h = upsample(h)
        for layer in self.blocks[index - 1]:
            h = pixel_norm(act(layer(h)))
        return lerp(old, self.to_rgb[index](h), tf.cast(alpha, h.dtype))

    def call(self, inputs, training=False):
        del training  # no layer behaves differently in training
        if self.conditional:
            z, y = inputs
            z = tf.concat([z, self.embed(y)], axis=-1)
        else:
            z = inputs
        level = self.growth.level()
        if level is not None:  # inside a stage step: its resolution, fixed when traced
            return self.at(z, *level, self.growth.alpha)

        def branch(index):
            def draw():
                image = self.at(z, index, index > 0, self.growth.alpha)
                image = upsample(image, self.size // self.sides[index])
                return tf.clip_by_value(image, -1.0, 1.0)

            return draw

        branches = [branch(i) for i in range(len(self.sides))]
        return tf.switch_case(self.growth.index.read_value(), branches)


class Discriminator(keras.Model):
    """[S, S, C] (and the classes, [1], when conditional: a projection head) -> one logit.
    Inside a stage step it takes the stage's resolution; outside, data.size, downsampled."""

    def __init__(self, task, **kwargs):
        super().__init__(**kwargs)
        self.growth, self.size = task.growth, task.size
        self.sides = resolutions(task.size)
        self.group = task.model["mbstd_group"]
        self.conditional = task.conditional
        colours = task.data["channels"]
        self.from_rgb, self.blocks = [], []
        for side in self.sides:
            width = channels(task, side)
            self.from_rgb.append(conv(task, width, 1, colours, f"from_rgb{side}"))
            if side > MIN_SIDE:
                lower = channels(task, side // 2)
                self.blocks.append(
                    [
                        conv(task, width, 3, width, f"b{side}_conv0"),
                        conv(task, lower, 3, width, f"b{side}_conv1"),
                    ]
                )
        first = channels(task, MIN_SIDE)
        self.conv4 = conv(task, first, 3, first + 1, "b4_conv")
        self.dense = Scaled(
            first, 0, 16 * first, math.sqrt(2), task.model["equalised_lr"], name="b4_dense"
        )
        self.out = Scaled(1, 0, first, 1.0, task.model["equalised_lr"], name="out")
        if self.conditional:
            self.embed = keras.layers.Embedding(task.num_classes, first, name="embed")
            self.embed.build((None,))

    def down(self, h, index):
        for layer in self.blocks[index - 1]:
            h = act(layer(h))
        return tf.nn.avg_pool2d(h, 2, 2, "VALID")

    def at(self, x, index, fading, alpha):
        h = act(self.from_rgb[index](x))
        if fading:
            old = act(self.from_rgb[index - 1](tf.nn.avg_pool2d(x, 2, 2, "VALID")))
            h = lerp(old, self.down(h, index), tf.cast(alpha, h.dtype))
            index -= 1
        for i in range(index, 0, -1):
            h = self.down(h, i)
        h = act(self.conv4(minibatch_stddev(h, self.group)))
        return act(self.dense(tf.reshape(h, [-1, 16 * h.shape[-1]])))

    def call(self, inputs, training=False):
        del training
        x, y = inputs if self.conditional else (inputs, None)
        level = self.growth.level()
        if level is not None:
            features = self.at(x, *level, self.growth.alpha)
        else:

            def branch(index):
                factor = self.size // self.sides[index]
                return lambda: self.at(
                    tf.nn.avg_pool2d(x, factor, factor, "VALID") if factor > 1 else x,
                    index,
                    index > 0,
                    self.growth.alpha,
                )

            branches = [branch(i) for i in range(len(self.sides))]
            features = tf.switch_case(self.growth.index.read_value(), branches)
        logit = self.out(features)
        if not self.conditional:
            return logit
        embedded = self.embed(y[:, 0])
        return logit + tf.reduce_sum(embedded * features, axis=-1, keepdims=True)


def generator(task):
    return Generator(task, task.model["latent_dim"], name="generator")


def discriminator(task):
    return Discriminator(task, name="discriminator")


def parameter_count(task, scope):
    """The parameters of network `scope`, counted from its layer plan (before building)."""
    colours, latent = task.data["channels"], task.model["latent_dim"]
    classes = getattr(task, "num_classes", 0) if task.conditional else 0
    sides = resolutions(task.size)
    first = channels(task, MIN_SIDE)
    count = 0
    if scope == "generator":
        if task.conditional:
            count += classes * latent
            latent *= 2
        count += latent * 16 * first + 16 * first + 9 * first * first + first
        previous = first
        for side in sides:
            width = channels(task, side)
            if side > MIN_SIDE:
                count += 9 * previous * width + width + 9 * width * width + width
            count += width * colours + colours
            previous = width
        return count
    for side in sides:
        width = channels(task, side)
        count += colours * width + width
        if side > MIN_SIDE:
            lower = channels(task, side // 2)
            count += 9 * width * width + width + 9 * width * lower + lower
    count += 9 * (first + 1) * first + first + 16 * first * first + first + first + 1
    return count + classes * first


def activation_floats(task, scope):
    """Floats of one image's activations through network `scope` at full resolution."""
    sides = resolutions(task.size)
    total = sum(side * side * channels(task, side) * 3 for side in sides)
    return total + task.size * task.size * task.data["channels"]


def describe(task, scope):
    sides = resolutions(task.size)
    widths = "/".join(str(channels(task, s)) for s in sides)
    eq = ", equalised lr" if task.model["equalised_lr"] else ""
    if scope == "generator":
        return (
            f"progressive: blocks {'->'.join(map(str, sides))} px (channels {widths}), "
            f"to_rgb per resolution, pixel norm{eq}"
        )
    return (
        f"progressive: from_rgb per resolution, blocks {'->'.join(map(str, sides[::-1]))} px, "
        f"minibatch stddev (groups of {task.model['mbstd_group']}){eq}"
    )
