"""Residual generators and discriminators for the image tasks (`model.arch: resnet`).

The networks of SNGAN (Miyato et al. 2018) and of BigGAN at its resolutions (Brock et al. 2019),
as PyTorch-StudioGAN writes them (`src/models/resnet.py`), in Keras 3:

- generator: z -> a 4x4 map (7x7 at 28 px) by a dense layer, then one residual up-block per
  doubling: BN, ReLU, nearest 2x upsampling, 3x3 conv, BN, ReLU, 3x3 conv, beside a shortcut of
  upsampling and a 1x1 conv; then BN, ReLU, a 3x3 conv to the image channels and tanh;
- discriminator: an optimised first block (3x3 conv, ReLU, 3x3 conv, 2x2 average pooling,
  beside pooling and a 1x1 conv), then residual blocks (ReLU, 3x3 conv, ReLU, 3x3 conv, pooling
  where the side still halves; a 1x1 conv shortcut where the block pools or changes width),
  then ReLU, a sum over the positions, and a dense layer to one logit.

Channels are multiples of `model.width` (StudioGAN's g_conv_dim and d_conv_dim), by the image
side (`WIDTHS`): at 32 px every generator block has 4 x width channels and every discriminator
block 2 x width (SNGAN's CIFAR networks at width 64: 256 and 128 channels); at 64 and 128 px
they grow toward the low resolutions. `model.blocks: n` follows each block with n - 1 blocks
at the same resolution. The kernels start orthogonal (BigGAN). The discriminator's layers are
spectrally normalised with `model.spectral_norm` (`stagegan.core.layers`); the generator keeps
BatchNorm.

A class-conditional run (`model.conditional`, `data.labels: clusters`) gives every BatchNorm of
the generator a per-class gain and bias (conditional batch norm, de Vries et al. 2017; the
gain starts at 1 and the bias at 0 for every class) and the discriminator a projection head
(Miyato & Koyama 2018). `model.attention: S` adds a self-attention layer (SAGAN, Zhang et al.
2019) after the block whose output is S pixels wide, in both networks. The generator is made of
Keras's own layers only, so that `stagegan export` gives a file that loads without stagegan.
"""

import keras

from stagegan.core.layers import MinibatchStddev, conv2d, dense
from stagegan.errors import ConfigError

START = {28: 7, 32: 4, 64: 4, 128: 4}  # the generator's first feature map side
# Per image side: the generator's block widths (in, out) and the discriminator's (out, pools?),
# in multiples of model.width (StudioGAN's g/d_in_dims_collection and d_down).
G_WIDTHS = {
    28: [(4, 4), (4, 4)],
    32: [(4, 4), (4, 4), (4, 4)],
    64: [(16, 8), (8, 4), (4, 2), (2, 1)],
    128: [(16, 16), (16, 8), (8, 4), (4, 2), (2, 1)],
}
D_WIDTHS = {
    28: [(2, True), (2, True), (2, False), (2, False)],
    32: [(2, True), (2, True), (2, False), (2, False)],
    64: [(1, True), (2, True), (4, True), (8, True), (16, False)],
    128: [(1, True), (2, True), (4, True), (8, True), (16, True), (16, False)],
}
ORTHOGONAL = "orthogonal"


def generator_plan(size, width, blocks=1):
    """The generator's residual blocks: `[(in channels, out channels, upsamples, side out)]`."""
    plan, side = [], START[size]
    for a, b in G_WIDTHS[size]:
        side *= 2
        plan.append((a * width, b * width, True, side))
        plan += [(b * width, b * width, False, side)] * (blocks - 1)
    return plan


def discriminator_plan(size, channels, width, blocks=1, mbstd=False):
    """The discriminator's blocks: `[(in channels, out channels, pools, side out)]`; the first
    is the optimised block. `mbstd`: the last block takes the minibatch standard deviation as
    one more input channel (so its shortcut is a 1x1 conv)."""
    plan, side, previous = [], size, channels
    for multiple, pools in D_WIDTHS[size]:
        side //= 2 if pools else 1
        plan.append((previous, multiple * width, pools, side))
        previous = multiple * width
        plan += [(previous, previous, False, side)] * (blocks - 1)
    if mbstd:
        a, b, pools, side = plan[-1]
        plan[-1] = (a + 1, b, pools, side)
    return plan


def check_options(model, size):
    """Refuse a resnet setting that cannot be built: the side, `model.blocks`, and a
    `model.attention` side that no block has."""
    if size not in START:
        raise ConfigError("data.size", f"must be 28, 32, 64 or 128. Received: {size}")
    blocks = model["blocks"]
    if blocks < 1:  # an int: the task's defaults check the type
        raise ConfigError("model.blocks", f"must be a whole number >= 1. Received: {blocks!r}")
    at = model["attention"]
    sides = sorted({side for *_, side in generator_plan(size, 1)} - {7})  # pooling halves it
    if at is not None and (isinstance(at, bool) or at not in sides):
        raise ConfigError(
            "model.attention",
            f"must be null or the side of a block's output ({', '.join(map(str, sides))} at "
            f"data.size {size}). Received: {at!r}",
        )
    width = model["width"]
    plans = (generator_plan(size, width), discriminator_plan(size, 3, width))
    if at is not None and min(b for plan in plans for _, b, _, s in plan if s == at) < 8:
        raise ConfigError(
            "model.attention",
            f"needs at least 8 channels at {at} px (its queries have channels / 8); raise "
            f"model.width (received: {width})",
        )


def conditional_batchnorm(h, y, classes, name):
    """BatchNorm without its own affine, then a per-class gain and bias, all of Keras's own
    layers (an exported generator loads without stagegan): `bn(h) * gain[y] + bias[y]`, the
    gains starting at 1 and the biases at 0 for every class."""
    layers, c = keras.layers, h.shape[-1]
    h = layers.BatchNormalization(center=False, scale=False, name=name)(h)
    gain = layers.Embedding(classes, c, embeddings_initializer="ones", name=f"{name}_gain")(y)
    bias = layers.Embedding(classes, c, embeddings_initializer="zeros", name=f"{name}_bias")(y)
    gain, bias = layers.Reshape((1, 1, c))(gain), layers.Reshape((1, 1, c))(bias)
    return layers.Add()([layers.Multiply()([h, gain]), bias])


def generator_attention(h, name="attention"):
    """SAGAN's self-attention (`SelfAttention`) of Keras's own layers, for the generator: the
    output conv starts at zero in place of the learned scale sigma starting at zero (either
    way the layer starts as the identity); an exported generator loads without stagegan."""
    layers, side, c = keras.layers, h.shape[1], h.shape[-1]
    conv = lambda filters, part, init=ORTHOGONAL: layers.Conv2D(
        filters, 1, use_bias=False, kernel_initializer=init, name=f"{name}_{part}"
    )
    pooled = lambda t: layers.MaxPooling2D(2)(t)
    query = layers.Reshape((side * side, c // 8))(conv(c // 8, "query")(h))
    key = layers.Reshape((side * side // 4, c // 8))(pooled(conv(c // 8, "key")(h)))
    value = layers.Reshape((side * side // 4, c // 2))(pooled(conv(c // 2, "value")(h)))
    attention = layers.Softmax()(layers.Dot(axes=(2, 2))([query, key]))
    mixed = layers.Reshape((side, side, c // 2))(layers.Dot(axes=(2, 1))([attention, value]))
    return layers.Add()([h, conv(c, "out", "zeros")(mixed)])


class SelfAttention(keras.layers.Layer):
    """SAGAN's self-attention as StudioGAN writes it, the discriminator's: 1x1 convs (no bias)
    to queries (C/8), keys (C/8, 2x2 max-pooled) and values (C/2, pooled), softmax attention
    over the pooled positions, a 1x1 conv back to C, added to the input scaled by a learned
    `sigma` that starts at 0. Spectrally normalised with `spectral_norm`."""

    def __init__(self, spectral_norm=False, **kwargs):
        super().__init__(**kwargs)
        self.spectral_norm = spectral_norm

    def build(self, input_shape):
        c = input_shape[-1]
        sn = self.spectral_norm
        make = lambda filters, name: conv2d(
            filters, 1, 1, name, sn, use_bias=False, initializer=ORTHOGONAL
        )
        self.query, self.key = make(c // 8, "query"), make(c // 8, "key")
        self.value, self.out = make(c // 2, "value"), make(c, "out")
        for layer in (self.query, self.key, self.value):
            layer.build(input_shape)
        self.out.build((*input_shape[:-1], c // 2))
        self.sigma = self.add_weight(name="sigma", shape=(), initializer="zeros")

    def call(self, x):
        shape = keras.ops.shape(x)
        h, w, c = x.shape[1], x.shape[2], x.shape[3]
        pool = lambda t: keras.ops.max_pool(t, 2, 2)
        query = keras.ops.reshape(self.query(x), (shape[0], h * w, c // 8))
        key = keras.ops.reshape(pool(self.key(x)), (shape[0], h * w // 4, c // 8))
        value = keras.ops.reshape(pool(self.value(x)), (shape[0], h * w // 4, c // 2))
        attention = keras.ops.softmax(keras.ops.matmul(query, keras.ops.transpose(key, (0, 2, 1))))
        mixed = keras.ops.reshape(keras.ops.matmul(attention, value), (shape[0], h, w, c // 2))
        return x + keras.ops.cast(self.sigma, x.dtype) * self.out(mixed)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "spectral_norm": self.spectral_norm}


def _conv(filters, kernel, name, spectral_norm=False):
    return conv2d(filters, kernel, 1, name, spectral_norm, initializer=ORTHOGONAL)


def generator(task):
    """The residual generator: z [latent_dim] (with the class, int32, when conditional)
    -> [S, S, C] in [-1, 1]."""
    layers, size, model = keras.layers, task.size, task.model
    norm, classes = model["batchnorm"], task.num_classes if task.conditional else None
    plan = generator_plan(size, model["width"], model["blocks"])
    z = keras.Input((model["latent_dim"],))
    y = keras.Input((), dtype="int32") if classes else None
    start, top = START[size], plan[0][0]
    h = layers.Dense(start * start * top, kernel_initializer=ORTHOGONAL, name="project")(z)
    h = layers.Reshape((start, start, top))(h)

    def batchnorm(t, name):
        if not norm:
            return t
        if classes:
            return conditional_batchnorm(t, y, classes, name)
        return layers.BatchNormalization(name=name)(t)

    for i, (a, b, up, side) in enumerate(plan):
        shortcut = layers.UpSampling2D(2)(h) if up else h
        if up or a != b:
            shortcut = _conv(b, 1, f"block{i}_shortcut")(shortcut)
        r = layers.ReLU()(batchnorm(h, f"block{i}_bn1"))
        r = layers.UpSampling2D(2)(r) if up else r
        r = _conv(b, 3, f"block{i}_conv1")(r)
        r = layers.ReLU()(batchnorm(r, f"block{i}_bn2"))
        h = layers.Add(name=f"block{i}")([_conv(b, 3, f"block{i}_conv2")(r), shortcut])
        if side == model["attention"] and (i + 1 == len(plan) or plan[i + 1][3] != side):
            h = generator_attention(h)
    h = layers.ReLU()(batchnorm(h, "bn_out"))
    h = layers.Activation("tanh")(_conv(task.data["channels"], 3, "to_image")(h))
    return keras.Model([z, y] if classes else z, h, name="generator")


def discriminator(task):
    """The residual discriminator: `model.pack` images stacked along the channels
    [S, S, C * pack] (with their classes [pack], int32, when conditional) -> one logit.
    `model.mbstd` adds the minibatch standard deviation before the last block."""
    layers, size, model = keras.layers, task.size, task.model
    sn, pack = model["spectral_norm"], model["pack"]
    channels = task.data["channels"] * pack
    plan = discriminator_plan(size, channels, model["width"], model["blocks"], model["mbstd"])
    x = keras.Input((size, size, channels))
    h = x
    for i, (a, b, pools, side) in enumerate(plan):
        pool = (lambda t: layers.AveragePooling2D(2)(t)) if pools else (lambda t: t)
        if i == len(plan) - 1 and model["mbstd"]:  # before the last block (PGGAN: at 4x4)
            h = MinibatchStddev(model["mbstd_group"], name="mbstd")(h)
        if i == 0:  # the optimised block: no activation before its first conv
            r = _conv(b, 3, f"block{i}_conv1", sn)(h)
            shortcut = _conv(b, 1, f"block{i}_shortcut", sn)(pool(h))
        else:
            r = _conv(b, 3, f"block{i}_conv1", sn)(layers.ReLU()(h))
            shortcut = (
                h if not (pools or a != b) else pool(_conv(b, 1, f"block{i}_shortcut", sn)(h))
            )
        r = _conv(b, 3, f"block{i}_conv2", sn)(layers.ReLU()(r))
        h = layers.Add(name=f"block{i}")([pool(r), shortcut])
        if side == model["attention"] and (i + 1 == len(plan) or plan[i + 1][3] != side):
            h = SelfAttention(sn, name="attention")(h)
    features = keras.ops.sum(layers.ReLU()(h), axis=(1, 2))
    logit = dense(1, "out", sn, initializer=ORTHOGONAL)(features)
    if not task.conditional:
        return keras.Model(x, logit, name="discriminator")
    y = keras.Input((pack,), dtype="int32")
    embedded = layers.Embedding(task.num_classes, features.shape[-1], name="embed")(y)
    projection = keras.ops.sum(keras.ops.sum(embedded, axis=1) * features, axis=1, keepdims=True)
    return keras.Model([x, y], logit + projection, name="discriminator")


def parameter_count(task, scope):
    """The trainable parameters of the built-in network `scope`, from the layer shapes (the
    memory check's estimate before anything is built)."""
    model, channels = task.model, task.data["channels"]
    classes = getattr(task, "num_classes", 0) if task.conditional else 0
    width, blocks, size = model["width"], model["blocks"], task.size
    conv = lambda k, a, b: k * k * a * b + b
    attention = lambda c: c * c // 8 * 2 + c * c // 2 * 2 + 1
    if scope == "generator":
        plan = generator_plan(size, width, blocks)
        norm = 0 if not model["batchnorm"] else (2 * classes if classes else 2)
        total = model["latent_dim"] * START[size] ** 2 * plan[0][0] + START[size] ** 2 * plan[0][0]
        for a, b, up, _side in plan:
            total += conv(3, a, b) + conv(3, b, b) + norm * (a + b)
            total += conv(1, a, b) if up or a != b else 0
        total += norm * plan[-1][1] + conv(3, plan[-1][1], channels)
        out = plan[-1][1]
    else:
        plan = discriminator_plan(size, channels * model["pack"], width, blocks, model["mbstd"])
        total = 0
        for i, (a, b, pools, _side) in enumerate(plan):
            total += conv(3, a, b) + conv(3, b, b)
            total += conv(1, a, b) if i == 0 or pools or a != b else 0
        out = plan[-1][1]
        total += out + 1 + classes * out
    if model["attention"] is not None:  # the generator's has no sigma (`generator_attention`)
        channels = next(b for a, b, _, side in plan if side == model["attention"])
        total += attention(channels) - (scope == "generator")
    return total


def activation_floats(task, scope):
    """Floats one example's forward pass keeps for the backward pass (an estimate: six maps
    of each block's output size)."""
    model = task.model
    if scope == "generator":
        plan = generator_plan(task.size, model["width"], model["blocks"])
    else:
        plan = discriminator_plan(task.size, task.data["channels"], model["width"], model["blocks"])
    return sum(6 * side * side * b for a, b, _, side in plan)


def describe(task, scope):
    """One line on the built-in network `scope`, for `plan`."""
    model = task.model
    if scope == "generator":
        plan = generator_plan(task.size, model["width"], model["blocks"])
        norm = "conditional batch norm" if task.conditional else "batch norm"
        ups = sum(up for _, _, up, _ in plan)
        words = [
            f"{len(plan)} residual blocks ({ups} upsampling) {START[task.size]}->{task.size} px"
        ]
        words.append(norm if model["batchnorm"] else "no normalisation")
    else:
        plan = discriminator_plan(task.size, task.data["channels"], model["width"], model["blocks"])
        pools = sum(pool for _, _, pool, _ in plan)
        words = [f"{len(plan)} residual blocks ({pools} pooling) {task.size}->{plan[-1][3]} px"]
        if task.conditional:
            words.append("projection head")
    widths = sorted({b for _, b, _, _ in plan}, reverse=scope == "generator")
    words.insert(1, "channels " + "/".join(map(str, widths)))
    if model["attention"] is not None:
        words.append(f"self-attention at {model['attention']} px")
    return "resnet: " + ", ".join(words)
