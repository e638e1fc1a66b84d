"""Differentiable augmentation of every image a discriminator sees (`augment:`).

On small data the discriminator memorises the real images and the generator learns strokes
and hybrids. The cure of DiffAugment (Zhao et al. 2020) and ADA (Karras et al. 2020) is to
augment every image the discriminator sees, real and generated, in the discriminator's and the
generator's updates alike, with differentiable ops, so the generator is trained through them
and the discriminator never sees an un-augmented image:

    augment:
      ops: [color, translation, cutout]   # applied in this order
      p: 1.0          # probability of each op per image (the start value when adaptive)
      target: null    # a number (ADA: 0.6) makes p adaptive
      speed: 100000   # adaptive: images over which p can move by 1 (ADA: 500,000)
      interval: 4     # adaptive: discriminator updates between adjustments of p

Ops (images in [-1, 1], NHWC), each applied to an image with probability `p`:

* DiffAugment's, with the paper's parameters: `color` (brightness + U(-0.5, 0.5), saturation
  x U(0, 2) around the pixel's channel mean, contrast x U(0.5, 1.5) around the image mean),
  `translation` (by up to 1/8 of the side, integer pixels, zero padding), `cutout` (a square of
  half the side, centred anywhere, set to 0).
* ADA's leak-safe ones (`training/augment.py`): `xflip`, `rotate90` (0/90/180/270 degrees),
  `xint` (integer translation by up to 1/8 of the side, reflect padding), `brightness`
  (+ N(0, 0.2)), `contrast` (x lognormal(0, 0.5 ln 2)), `saturation` (x lognormal(0, ln 2)
  around the grey axis; colour images only).

The random draws come from the run's augmentation stream, for the whole global batch, before it is
split across replicas (`Augmenter.draw`), so 1 tower, 4 towers and a mirrored strategy give the
same augmentations, and a deterministic run stays deterministic.

Adaptive `p` (ADA's heuristic): r_t = E[sign(D(real))] over the discriminator updates since the
last adjustment, computed from the logged `d_real_accuracy` (r_t = 2 accuracy - 1, the share of
reals called real minus the share called fake, at the loss's decision threshold); every
`interval` updates `p` moves by `sign(r_t - target) * batch * interval / speed`, within [0, 1].
`p`, the running sums and r_t (their running mean, logged with a fixed p too) are variables,
updated inside the compiled step and checkpointed, so a resumed run continues exactly.
"""

import math

import tensorflow as tf

from stagegan.config.schema import AUGMENT_OPS
from stagegan.core.variables import slug

TRANSLATION_RATIO = 0.125  # DiffAugment's and ADA's xint_max
CUTOUT_RATIO = 0.5
BRIGHTNESS_STD = 0.2  # ADA
CONTRAST_STD = 0.5  # ADA, in log2 units
SATURATION_STD = 1.0  # ADA, in log2 units


def widths(ops):
    """Uniform numbers per image that `ops` draw: a gate and the op's own, each."""
    return [1 + AUGMENT_OPS[op] for op in ops]


class Augmenter:
    """The ops of one `AugmentConfig` and its `p` state.

    Args:
        config: the `AugmentConfig`.
        batch_size: the global batch (adaptive p moves by batch * interval / speed).
        device: where the state lives (the variable device).
    """

    def __init__(self, config, batch_size, device):
        self.config = config
        self.batch_size = batch_size
        self.name = slug(config.key)  # `stages[2].augment` -> `stages_2_augment`
        with tf.device(device):
            self.p = tf.Variable(float(config.p), trainable=False, name=f"{self.name}_p")
            self.rt = tf.Variable(float("nan"), trainable=False, name=f"{self.name}_rt")
            self.sign_sum = tf.Variable(0.0, trainable=False, name=f"{self.name}_sign_sum")
            self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{self.name}_n")

    def trackables(self):
        prefix = self.name
        return {
            f"{prefix}_p": self.p,
            f"{prefix}_rt": self.rt,
            f"{prefix}_sign_sum": self.sign_sum,
            f"{prefix}_count": self.count,
        }

    def draw(self, noise, count):
        """Random numbers for `count` real and `count` generated images:
        `{"augment_real": [count, K], "augment_fake": [count, K]}`, from `noise` (the run's
        augmentation stream), independent of p."""
        k = sum(widths(self.config.ops))
        return {
            "augment_real": noise.uniform([count, k]),
            "augment_fake": noise.uniform([count, k]),
        }

    def __call__(self, images, uniforms):
        """`images` [N, H, W, C] in [-1, 1] augmented with the numbers `uniforms` [N, K]
        (rows of `draw`'s output), each op gated by p."""
        p = tf.cast(self.p, tf.float32)
        return apply_ops(images, uniforms, self.config.ops, p)

    def metrics(self):
        return {"augment/p": tf.identity(self.p), "augment/rt": tf.identity(self.rt)}

    def observe(self, real_accuracy, applied=None):
        """After a discriminator update: add its r_t (2 * accuracy - 1) to the sums (`rt`
        then holds their running mean), and every `interval` of them move an adaptive p and
        start the sums afresh. `applied`: a bool tensor (the update ran and was not skipped),
        or None for always."""
        accuracy = tf.cast(real_accuracy, tf.float32)
        counted = tf.math.is_finite(accuracy)
        if applied is not None:
            counted = tf.logical_and(counted, applied)
        self.sign_sum.assign_add(tf.where(counted, 2.0 * accuracy - 1.0, 0.0))
        self.count.assign_add(tf.cast(counted, tf.int64))
        n = tf.cast(self.count, tf.float32)
        rt = self.sign_sum / tf.maximum(n, 1.0)
        self.rt.assign(tf.where(self.count > 0, rt, self.rt))
        due = self.count >= self.config.interval
        if self.config.adaptive:
            step = n * self.batch_size / self.config.speed
            moved = tf.clip_by_value(self.p + tf.sign(rt - self.config.target) * step, 0.0, 1.0)
            self.p.assign(tf.where(due, moved, self.p))
        self.sign_sum.assign(tf.where(due, 0.0, self.sign_sum))
        self.count.assign(tf.where(due, tf.constant(0, tf.int64), self.count))


# The ops ---------------------------------------------------------------------------------------


def apply_ops(images, uniforms, ops, p):
    """Apply `ops` in order; op i reads its gate and numbers from its columns of `uniforms`.

    An image takes op i where its gate column is below `p` (one probability for every op,
    or a sequence of one per op). Every op is a differentiable function of the images
    (gathers, masks, affine maps of the pixel values).
    """
    images = tf.convert_to_tensor(images, tf.float32)
    ps = tuple(p) if isinstance(p, (list, tuple)) else (p,) * len(ops)
    column = 0
    for op, width, op_p in zip(ops, widths(ops), ps, strict=True):
        u = uniforms[:, column : column + width]
        column += width
        gate = u[:, 0] < op_p
        images = OP_FUNCTIONS[op](images, u[:, 1:], gate)
    return images


def _where(gate, changed, images):
    return tf.where(tf.reshape(gate, [-1, 1, 1, 1]), changed, images)


def _per_image(values):
    return tf.reshape(values, [-1, 1, 1, 1])


def color(images, u, gate):
    """DiffAugment's `rand_brightness`, `rand_saturation`, `rand_contrast`, in that order."""
    out = images + _per_image(u[:, 0] - 0.5)
    mean = tf.reduce_mean(out, axis=3, keepdims=True)
    out = (out - mean) * _per_image(u[:, 1] * 2.0) + mean
    mean = tf.reduce_mean(out, axis=[1, 2, 3], keepdims=True)
    out = (out - mean) * _per_image(u[:, 2] + 0.5) + mean
    return _where(gate, out, images)


def shift_amount(u, side):
    """An integer shift in [-s, s], s = int(side * 1/8 + 0.5), from a uniform u (DiffAugment's
    `randint(-s, s + 1)`)."""
    s = int(side * TRANSLATION_RATIO + 0.5)
    return tf.minimum(tf.cast(tf.floor(u * (2 * s + 1)), tf.int32), 2 * s) - s


def translate(images, dy, dx, reflect):
    """Shift each image by integer (dy, dx) [N]: output[y, x] = input[y - dy, x - dx]; outside
    the image: zero (DiffAugment) or the mirror image (`reflect`, ADA's pixel blitting)."""
    h, w = images.shape[1], images.shape[2]
    rows = tf.range(h)[None, :] - dy[:, None]  # [N, H]
    cols = tf.range(w)[None, :] - dx[:, None]
    if reflect:
        rows, cols = _reflect(rows, h), _reflect(cols, w)
        inside_rows = inside_cols = None
    else:
        inside_rows = tf.cast((rows >= 0) & (rows < h), images.dtype)
        inside_cols = tf.cast((cols >= 0) & (cols < w), images.dtype)
        rows, cols = tf.clip_by_value(rows, 0, h - 1), tf.clip_by_value(cols, 0, w - 1)
    out = tf.gather(images, rows, axis=1, batch_dims=1)
    out = tf.gather(out, cols, axis=2, batch_dims=1)
    if inside_rows is not None:
        out = out * inside_rows[:, :, None, None] * inside_cols[:, None, :, None]
    return out


def _reflect(index, size):
    """Mirror indices into [0, size) (numpy's 'reflect' padding: -1 -> 1, size -> size - 2)."""
    period = 2 * (size - 1)
    index = tf.math.floormod(index, period)
    return tf.where(index >= size, period - index, index)


def translation(images, u, gate):
    """DiffAugment's `rand_translation` (ratio 1/8, zero padding)."""
    dy = shift_amount(u[:, 0], images.shape[1])
    dx = shift_amount(u[:, 1], images.shape[2])
    return _where(gate, translate(images, dy, dx, reflect=False), images)


def xint(images, u, gate):
    """ADA's integer translation: by round((2u - 1) * 1/8 * side) pixels, reflect padding."""
    h, w = images.shape[1], images.shape[2]
    dy = tf.cast(tf.round((u[:, 0] * 2.0 - 1.0) * TRANSLATION_RATIO * h), tf.int32)
    dx = tf.cast(tf.round((u[:, 1] * 2.0 - 1.0) * TRANSLATION_RATIO * w), tf.int32)
    return _where(gate, translate(images, dy, dx, reflect=True), images)


def cutout(images, u, gate):
    """DiffAugment's `rand_cutout` (ratio 1/2): a square of side int(side/2 + 0.5), centred at
    `randint(0, side + 1 - size % 2)`, set to 0."""
    h, w = images.shape[1], images.shape[2]
    ch, cw = int(h * CUTOUT_RATIO + 0.5), int(w * CUTOUT_RATIO + 0.5)
    oy = tf.cast(tf.floor(u[:, 0] * (h + 1 - ch % 2)), tf.int32)
    ox = tf.cast(tf.floor(u[:, 1] * (w + 1 - cw % 2)), tf.int32)
    rows = tf.range(h)[None, :] - (oy[:, None] - ch // 2)
    cols = tf.range(w)[None, :] - (ox[:, None] - cw // 2)
    in_rows = (rows >= 0) & (rows < ch)
    in_cols = (cols >= 0) & (cols < cw)
    hole = tf.logical_and(in_rows[:, :, None], in_cols[:, None, :])[..., None]
    return _where(gate, tf.where(hole, tf.zeros_like(images), images), images)


def xflip(images, u, gate):
    del u
    return _where(gate, tf.reverse(images, axis=[2]), images)


def rotate90(images, u, gate):
    """Rotation by k * 90 degrees counter-clockwise, k = floor(4u) (square images)."""
    k = tf.minimum(tf.cast(tf.floor(u[:, 0] * 4.0), tf.int32), 3)
    out = images
    for turns in (1, 2, 3):
        out = _where(tf.equal(k, turns), quarter_turns(images, turns), out)
    return _where(gate, out, images)


def quarter_turns(images, turns):
    """`tf.image.rot90(images, turns)` for a Python int `turns` in 1..3, as one transpose and
    reverse (`rot90` builds a four-way `tf.case`: 0.6 s of tracing each time, a third of a
    DCGAN step's trace)."""
    swapped = lambda x: tf.transpose(x, [0, 2, 1, 3])
    if turns == 1:
        return tf.reverse(swapped(images), [1])
    if turns == 2:
        return tf.reverse(images, [1, 2])
    return swapped(tf.reverse(images, [1]))


def _normal(u):
    """A standard normal number from a uniform one (the inverse normal CDF)."""
    return tf.math.ndtri(tf.clip_by_value(u, 1e-6, 1.0 - 1e-6))


def brightness(images, u, gate):
    return _where(gate, images + _per_image(_normal(u[:, 0]) * BRIGHTNESS_STD), images)


def contrast(images, u, gate):
    """ADA's contrast: a scale around 0 (mid-grey), lognormal with std 0.5 in log2 units."""
    scale = tf.pow(2.0, _normal(u[:, 0]) * CONTRAST_STD)
    return _where(gate, images * _per_image(scale), images)


def saturation(images, u, gate):
    """ADA's saturation: scale the colour away from the grey axis (1, 1, 1); grey images
    are unchanged."""
    if images.shape[-1] != 3:
        return images
    scale = tf.pow(2.0, _normal(u[:, 0]) * SATURATION_STD)
    axis = tf.constant([1.0, 1.0, 1.0], tf.float32) / math.sqrt(3.0)  # ADA's luma axis
    along = tf.reduce_sum(images * axis, axis=-1, keepdims=True) * axis
    return _where(gate, along + (images - along) * _per_image(scale), images)


OP_FUNCTIONS = {
    "color": color,
    "translation": translation,
    "cutout": cutout,
    "xflip": xflip,
    "rotate90": rotate90,
    "xint": xint,
    "brightness": brightness,
    "contrast": contrast,
    "saturation": saturation,
}
