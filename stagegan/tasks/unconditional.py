"""Unconditional image GANs: a generator and discriminator of `model.arch`.

`dcgan` (the default; this module): resolutions 28 (from 7x7), 32 and 64 (from 4x4);
`model.width` sets the channel count of the largest feature map. `resnet`: SNGAN's /
BigGAN's residual networks at 28 to 128 px (`stagegan.tasks.resnet`). Loss terms:
    d_loss, g_loss      the adversarial pair named by `loss.adversarial`
    gradient_penalty    WGAN-GP on real/fake interpolates (weight it, e.g. 10)
    r1                  R1 on real images (weight it gamma / 2; usable lazily with `every`)
    r2                  R2 on generated images (weight it gamma / 2; R3GAN: rpgan, r1, r2)
    mode_seeking        MSGAN's term for the generator (Mao et al. 2019): generated samples
                        come in pairs of one class, pushed apart (`losses.mode_seeking`)
    mode_seeking_pairs  the same term taken pair by pair, which pushes hardest on the
                        classes that collapsed (`losses.mode_seeking_pairs`)
    lecam               LeCam (Tseng et al. 2021; `loss.lecam_decay`, `loss.lecam_start`)
    bcr, bcr_real,      balanced consistency (Zhao et al. 2021; `loss.bcr_ops`), and its
    bcr_fake            halves (see `stagegan.core.regularisers`)
The interpolation weights of the gradient penalty are drawn with the global batch's noise, so
the penalty does not depend on the number of towers. `model.pack: m` shows the discriminator m
images at once, stacked along the channels (PacGAN); `model.spectral_norm` normalises its
convolutions and output layer (see `stagegan.core.layers`).

`model.conditional: true` makes it a class-conditional GAN on labelled data (`data.labels`):
the generator takes a learned class embedding beside z, and the discriminator is a projection
discriminator (Miyato & Koyama 2018), D(x, y) = w . phi(x) + embed(y) . phi(x). Generated
classes are drawn with the data's class frequencies; sample grids show one class per row, and
`eval` adds FID and KID per class (`fid/<class>`). On an unlabelled folder, `data.labels:
clusters` makes the classes k-means clusters of its images (a self-conditioned GAN): samples
then come in the clusters' proportions, grouped by cluster.
"""

import keras
import numpy as np
import tensorflow as tf

from stagegan.config.overrides import format_key_path
from stagegan.config.schema import batch_key, batch_sizes
from stagegan.core import losses, regularisers
from stagegan.core.layers import MinibatchStddev, conv2d, dense
from stagegan.data.sources import DEFAULTS as DATA_DEFAULTS
from stagegan.errors import ConfigError
from stagegan.runfolder import pictures
from stagegan.tasks import progressive, resnet
from stagegan.tasks.base import (
    MODE_SEEKING,
    Description,
    ImageTask,
    Sizes,
    adversarial_losses,
    build_network,
    builds_own,
    choice,
    float32,
    positive,
)

ARCHS = {"resnet": resnet, "progressive": progressive}
# The options of one arch only, with their defaults.
ARCH_KEYS = {
    "dcgan": {"embed_norm": False},
    "resnet": {"blocks": 1, "attention": None},
    "progressive": {"mbstd_group": 4, "equalised_lr": True},
}
START = {28: 7, 32: 4, 64: 4}  # the generator's first feature map side
UPSAMPLINGS = {28: 2, 32: 3, 64: 4}


class Unconditional(ImageTask):
    name = "unconditional"
    # `class_index` refuses, naming model.conditional, when the run is not conditional
    capabilities = ImageTask.capabilities | {"classes", "latents", "augments"}
    loss_terms = (
        "d_loss",
        "g_loss",
        "gradient_penalty",
        "r1",
        "r2",
        *MODE_SEEKING,
        *regularisers.TERMS,
    )
    generator_adversarial_terms = ("g_loss",)  # what benchmarks/ablation.py removes
    monitor_terms = {  # logged with them
        "d_loss": losses.ACCURACY_TERMS,
        "lecam": regularisers.LECAM_MONITORS,
    }
    metrics = ("realism",)  # stagegan.evaluation.builtin
    defaults = {
        "data": dict(DATA_DEFAULTS),
        "model": {
            "arch": "dcgan",
            "latent_dim": 64,
            "width": 64,
            "blocks": 1,
            "attention": None,
            "batchnorm": True,
            "pack": 1,
            "spectral_norm": False,
            "conditional": False,
            "embed_norm": False,  # dcgan with conditional: true only
            "mbstd": False,  # dcgan and resnet (progressive's always has one)
            "mbstd_group": 4,  # progressive, or with mbstd
            "equalised_lr": True,  # progressive only
            "generator": None,
            "discriminator": None,
        },
        "loss": {
            "adversarial": "non_saturating",
            **regularisers.LECAM_DEFAULTS,
            **regularisers.BCR_DEFAULTS,
        },
    }

    def __init__(self, options, rngs):
        super().__init__(options, rngs)
        self.size = self.data["size"]
        self.arch = choice(self.model, "model", "arch", ("dcgan", "resnet", "progressive"))
        self.mbstd = self.model["mbstd"]
        for arch, keys in ARCH_KEYS.items():  # another arch's options, set: refused
            for key, default in keys.items():
                grouped = key == "mbstd_group" and self.mbstd  # dcgan's or resnet's groups
                if arch != self.arch and self.model[key] != default and not grouped:
                    also = " or with model.mbstd: true" if key == "mbstd_group" else " only"
                    raise ConfigError(
                        f"model.{key}",
                        f"applies to model.arch: {arch}{also} (the run's arch is "
                        f"{self.arch}). Received: {self.model[key]!r}",
                    )
        if self.mbstd and self.arch == "progressive":
            raise ConfigError(
                "model.mbstd",
                "applies to model.arch dcgan and resnet (progressive's discriminator always "
                "has one; model.mbstd_group sets its groups). Received: true",
            )
        if self.mbstd:
            positive(self.model, "model", "mbstd_group")
        if self.arch == "progressive":
            progressive.check_options(self.model, self.size)
        elif self.arch == "resnet":
            resnet.check_options(self.model, self.size)
        elif self.size not in START:
            raise ConfigError(
                "data.size",
                f"must be 28, 32 or 64 (128 with model.arch: resnet). Received: {self.size}",
            )
        positive(self.model, "model", "latent_dim")
        positive(self.model, "model", "width")
        self.pack = positive(self.model, "model", "pack")
        self.d_loss, self.g_loss = losses.adversarial(self.loss["adversarial"])
        self.d_accuracy = losses.AccuracyMonitor(self.loss["adversarial"])
        self.conditional = self.model["conditional"]
        if self.model["embed_norm"] and not self.conditional:
            raise ConfigError(
                "model.embed_norm",
                "scales the generator's class embedding and needs model.conditional: true. "
                "Received: true",
            )
        if self.model["embed_norm"] and not builds_own(self, "generator"):
            raise ConfigError(
                "model.embed_norm",
                "scales the built-in generator's class embedding; model.generator names "
                f"your own ({self.model['generator']}), which builds its own. Received: true",
            )
        self.growth = None

    # Progressive growing (model.arch: progressive, `stagegan.tasks.progressive`) -------------

    def prepare(self, updates, device=None):
        super().prepare(updates, device)
        if self.arch == "progressive":
            self.growth = progressive.Growth(self, device)

    @property
    def _grows(self):
        return self.arch == "progressive"

    def check(self, stages, batch_size, replicas):
        super().check(stages, batch_size, replicas)
        if self._grows:
            progressive.check_stages(stages, self.size)
        if self._grows or self.mbstd:
            for key, size in batch_sizes(stages, batch_size).items():
                group, shard = self.model["mbstd_group"], size // replicas
                progressive.check_group(group, shard, key, self.pack)
        check_pairs(stages, batch_size, replicas)

    def begin_step(self, stage, stage_step):
        if self.growth is not None:
            self.growth.begin_step(stage, stage_step)

    def describe(self, stages):
        growth = self.growth
        lines = {} if growth is None else {s.name: [growth.describe(s)] for s in stages}
        return Description(self.describe_networks(), [], lines)

    def trackables(self):
        own = {} if self.growth is None else self.growth.trackables()
        return {**super().trackables(), **own}

    def build(self):
        self.build_source()
        image = (self.size, self.size, self.data["channels"])
        latent = (self.model["latent_dim"],)
        packed = (self.size, self.size, self.data["channels"] * self.pack)
        if self.conditional:
            if self.classes is None:
                raise ConfigError(
                    "model.conditional",
                    "needs labelled data: set data.labels (folder: subfolders, or clusters "
                    "for an unlabelled one; npz: an array name; tfrecord: a feature name)",
                )
            self.num_classes = len(self.classes)
            counts = self.source.class_counts
            shares = np.ones(self.num_classes) if counts is None else counts / counts.sum()
            self.class_cdf = tf.constant(np.cumsum(shares)[:-1], tf.float32)
            builders = (conditional_generator, projection_discriminator)
            inputs = ([latent, ()], [packed, (self.pack,)])
        else:
            builders, inputs = (generator, discriminator), (latent, packed)
        if self.arch == "resnet":
            builders = (resnet.generator, resnet.discriminator)
        elif self.arch == "progressive":
            builders = (progressive.generator, progressive.discriminator)
        self.generator = build_network(self, "generator", builders[0], inputs[0], image)
        self.discriminator = build_network(self, "discriminator", builders[1], inputs[1], (1,))
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        return self.networks

    def describe_networks(self):
        """`{scope: one line}` on the built-in networks' architecture, for `plan`."""
        lines = {}
        for scope in ("generator", "discriminator"):
            if not builds_own(self, scope):
                continue
            if self.arch in ("resnet", "progressive"):
                lines[scope] = ARCHS[self.arch].describe(self, scope)
            else:
                ups = UPSAMPLINGS[self.size]
                lines[scope] = (
                    f"dcgan: {ups} transposed-conv up-blocks {START[self.size]}->{self.size} px"
                    if scope == "generator"
                    else f"dcgan: {ups} strided convs {self.size}->{self.size // 2**ups} px"
                )
            if scope == "discriminator" and self.mbstd:
                lines[scope] += f", minibatch stddev (groups of {self.model['mbstd_group']})"
            if scope == "generator" and self.model["embed_norm"]:
                lines[scope] += ", class embedding scaled to z's length"
        return lines

    def sizes(self):
        sample = super().sizes().sample + self.model["latent_dim"]
        keys = ("data.size", "model.latent_dim")
        parameters, activations = self.network_sizes()
        return Sizes(parameters, activations, sample, keys)

    def network_sizes(self):
        """`(parameters, activations)` of the built-in networks (`Task.sizes`)."""
        if self.arch in ("resnet", "progressive"):
            keys = ("model.width", "model.blocks" if self.arch == "resnet" else "data.size")
            image = ("model.width", "data.size")
            scopes = [s for s in ("generator", "discriminator") if builds_own(self, s)]
            module = ARCHS[self.arch]
            parameters = [(keys, module.parameter_count(self, s)) for s in scopes]
            return parameters, [(image, module.activation_floats(self, s)) for s in scopes]
        size, channels, latent = self.size, self.data["channels"], self.model["latent_dim"]
        width, start, ups, pack = self.model["width"], START[size], UPSAMPLINGS[size], self.pack
        parameters, activations = [], []
        image = ("model.width", "data.size")
        if builds_own(self, "generator"):
            widths = [width * 2 ** (ups - 1 - i) for i in range(ups)] + [channels]
            top = widths[0]
            latent_in = 2 * latent if self.conditional else latent
            ups_params = sum(16 * a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
            parameters += [
                (("model.latent_dim", "model.width"), latent_in * start * start * top),
                (("model.width",), ups_params),
            ]
            sides = [start * 2**i for i in range(ups + 1)]
            floats = sum(side * side * w for side, w in zip(sides, widths, strict=True))
            activations += [(image, floats)]
        if builds_own(self, "discriminator"):
            widths = [channels * pack] + [width * 2**i for i in range(ups)]
            last = size // 2**ups
            convs = sum(16 * a * b for a, b in zip(widths[1:-1], widths[2:], strict=True))
            convs += 16 * widths[-1] if self.mbstd else 0  # the last conv's one more input
            parameters += [
                (("model.width", "model.pack"), 16 * widths[0] * widths[1]),
                (("model.width",), convs),
                (("model.width",), last * last * widths[-1]),
            ]
            sides = [size // 2**i for i in range(ups + 1)]
            floats = sum(side * side * w for side, w in zip(sides, widths, strict=True))
            activations += [(image, floats)]
        return parameters, activations

    def random_inputs(self, batch_size):
        noise = self.rngs.noise
        inputs = {
            "z": noise.normal([batch_size, self.model["latent_dim"]]),
            "epsilon": noise.uniform([batch_size]),
        }
        if self.conditional:  # generated classes, with the data's class frequencies
            inputs["fake_y"] = tf.searchsorted(
                self.class_cdf, noise.uniform([batch_size]), side="right", out_type=tf.int32
            )
        return inputs

    def losses(self, batch, terms):
        if self.growth is not None:  # the real images at the traced stage's resolution
            batch = {**batch, "x": self.growth.reals(batch["x"])}
        return adversarial_losses(self, batch, terms)

    def sample(self, inputs):
        if self.conditional:
            return float32(self.generator([inputs["z"], inputs["fake_y"]], training=False))
        return float32(self.generator(inputs["z"], training=False))

    # Class-conditional samples: one class per row ----------------------------------------------

    def sample_inputs(self, count, seed, key="--num"):
        inputs, info = super().sample_inputs(count, seed, key)
        clustered = self.data["source"] == "folder" and self.data["labels"] == "clusters"
        if self.conditional and clustered:
            # Clusters stand in for labels the data lacks: samples keep the folder's mix (the
            # cluster sizes), grouped by cluster so that the grid reads in runs of alike images.
            order = np.argsort(inputs["fake_y"], kind="stable")
            inputs = {name: value[order] for name, value in inputs.items()}
        elif self.conditional:
            columns = -(-count // self.num_classes)
            rows = np.minimum(np.arange(count) // columns, self.num_classes - 1)
            inputs["fake_y"] = rows.astype(np.int32)
            info = {**info, "columns": columns}
        return inputs, info

    def class_index(self, name, key="--class"):
        """The index of class `name` (a class name, or its index as a string)."""
        if not self.conditional:
            raise ConfigError(key, "the run's model is not class-conditional (model.conditional)")
        if name in self.classes:
            return self.classes.index(name)
        if str(name).isdigit() and int(name) < self.num_classes:
            return int(name)
        raise ConfigError(
            key,
            f"unknown class {name!r} (classes: {', '.join(self.classes)}; or 0-"
            f"{self.num_classes - 1})",
        )

    def picture(self, inputs, outputs, info):
        columns = info.get("columns")
        if columns is None:
            return super().picture(inputs, outputs, info)
        return pictures.image_grid(outputs["samples"], columns=columns)


def check_pairs(stages, batch_size, replicas):
    """`mode_seeking` (and `mode_seeking_pairs`) pairs consecutive samples of each replica's
    shard: every shard of a stage that trains on it must be even (so no pair spans two
    devices)."""
    for stage in stages:
        size = batch_size if stage.batch_size is None else stage.batch_size
        for update in stage.updates:
            term = next((t for t in MODE_SEEKING if t in dict(update.loss)), None)
            if term and (size // replicas) % 2:
                where = batch_key(stage)
                raise ConfigError(
                    format_key_path((update.key, "loss", term)),
                    "pairs consecutive samples, so each replica's share of the batch must be "
                    f"even ({where} {size} over {replicas} replica"
                    f"{'s' if replicas > 1 else ''} = {size // replicas})",
                )


# The built-in networks: `model.generator` / `model.discriminator` may name replacements with
# the same signature (`builder(task) -> keras.Model`).


def generator(task, latent=None):
    """DCGAN generator: z [latent_dim] (or [`latent`]) -> [S, S, C] in [-1, 1]."""
    layers, size = keras.layers, task.size
    start, ups = START[size], UPSAMPLINGS[size]
    width, channels, norm = task.model["width"], task.data["channels"], task.model["batchnorm"]
    z = keras.Input((latent or task.model["latent_dim"],))
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


def discriminator(task, head=True):
    """DCGAN discriminator: `model.pack` images stacked along the channels [S, S, C * pack]
    -> one logit (without `head`: the flattened features). `model.mbstd` adds the minibatch
    standard deviation (over groups of `model.mbstd_group` inputs) before the last conv."""
    layers, size, width = keras.layers, task.size, task.model["width"]
    norm, ups = task.model["spectral_norm"], UPSAMPLINGS[task.size]
    x = keras.Input((size, size, task.data["channels"] * task.model["pack"]))
    h = x
    for i in range(ups):
        if i == ups - 1 and task.model["mbstd"]:  # before the last conv, as PGGAN's at 4x4
            h = MinibatchStddev(task.model["mbstd_group"], name="mbstd")(h)
        h = conv2d(width * 2**i, 4, 2, f"down{i}", norm)(h)
        h = layers.LeakyReLU(0.2)(h)
    features = layers.Flatten()(h)
    if not head:
        return keras.Model(x, features, name="features")
    return keras.Model(x, dense(1, "out", norm)(features), name="discriminator")


def conditional_generator(task):
    """The DCGAN generator of `generator`, on z [latent_dim] concatenated with a learned
    embedding of the class (an int32 index) of the same size. `model.embed_norm` scales each
    class's embedding to length sqrt(latent_dim), a typical z's (StyleGAN2's mapping
    normalises its embedding the same way), so that no class's embedding outweighs z."""
    latent = task.model["latent_dim"]
    z = keras.Input((latent,))
    y = keras.Input((), dtype="int32")
    embedded = keras.layers.Embedding(task.num_classes, latent, name="embed")(y)
    if task.model["embed_norm"]:  # every class's embedding as long as a typical z, sqrt(latent)
        embedded = keras.layers.UnitNormalization(name="embed_norm")(embedded)
        embedded = keras.layers.Rescaling(latent**0.5, name="embed_scale")(embedded)
    joined = keras.layers.Concatenate()([z, embedded])
    body = generator(task, latent=2 * latent)
    return keras.Model([z, y], body(joined), name="generator")


def projection_discriminator(task):
    """The DCGAN discriminator of `discriminator` with a projection head (Miyato & Koyama
    2018): logit = w . phi(x) + b + embed(y) . phi(x), phi the flattened features. A pack of
    `model.pack` images (`stagegan.core.layers.pack`) projects onto the sum of its classes'
    embeddings."""
    size, m = task.size, task.model["pack"]
    x = keras.Input((size, size, task.data["channels"] * m))
    y = keras.Input((m,), dtype="int32")
    features = discriminator(task, head=False)(x)
    logit = dense(1, "out", task.model["spectral_norm"])(features)
    embedded = keras.layers.Embedding(task.num_classes, features.shape[-1], name="embed")(y)
    projection = keras.ops.sum(keras.ops.sum(embedded, axis=1) * features, axis=1, keepdims=True)
    return keras.Model([x, y], logit + projection, name="discriminator")
