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
* ADA's leak-safe ones (`training/augment.py`), with ADA's default strengths:
  - pixel blitting: `xflip`, `rotate90` (0/90/180/270 degrees), `xint` (integer translation
    by up to 1/8 of the side, reflect padding);
  - geometric: `scale` (isotropic, x 2^N(0, 0.2)), `rotate` (any angle, uniform in
    [-180, 180] degrees), `aniso` (x 2^N(0, 0.2) horizontally and its inverse vertically),
    `xfrac` (fractional translation by N(0, 0.125) of the side on each axis). Consecutive
    geometric ops of the list make one transform, applied as ADA applies it: the image
    reflect-padded (`_reflect`), upsampled 2x with the symlet-6 wavelet filter, sampled
    bilinearly through the transform, filtered and downsampled 2x again (`warp`), so that the
    padding and the resampling leave no trace a generator could learn;
  - colour: `brightness` (+ N(0, 0.2)), `contrast` (x lognormal(0, 0.5 ln 2)), `lumaflip`
    (the luma component mirrored, with probability 1/2), `hue` (a rotation around the grey
    axis by a uniform angle in [-180, 180] degrees), `saturation` (x lognormal(0, ln 2)
    around the grey axis). `lumaflip`, `hue` and `saturation` leave grey images unchanged.

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

    def __call__(self, images, uniforms, spatial_only=False):
        """`images` [N, H, W, C] in [-1, 1] augmented with the numbers `uniforms` [N, K]
        (rows of `draw`'s output), each op gated by p (`spatial_only`: see `apply_ops`)."""
        p = tf.cast(self.p, tf.float32)
        return apply_ops(images, uniforms, self.config.ops, p, spatial_only)

    def metrics(self):
        return {"augment/p": tf.identity(self.p), "augment/rt": tf.identity(self.rt)}

    def observe(self, real_accuracy, applied=None, batch_size=None):
        """After a discriminator update: add its r_t (2 * accuracy - 1) to the sums (`rt`
        then holds their running mean), and every `interval` of them move an adaptive p and
        start the sums afresh. `applied`: a bool tensor (the update ran and was not skipped),
        or None for always. `batch_size`: the global batch of the observing stage (None:
        the run's)."""
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
            step = n * (batch_size or self.batch_size) / self.config.speed
            moved = tf.clip_by_value(self.p + tf.sign(rt - self.config.target) * step, 0.0, 1.0)
            self.p.assign(tf.where(due, moved, self.p))
        self.sign_sum.assign(tf.where(due, 0.0, self.sign_sum))
        self.count.assign(tf.where(due, tf.constant(0, tf.int64), self.count))


# The ops ---------------------------------------------------------------------------------------


def apply_ops(images, uniforms, ops, p, spatial_only=False):
    """Apply `ops` in order; op i reads its gate and numbers from its columns of `uniforms`.

    An image takes op i where its gate column is below `p` (one probability for every op,
    or a sequence of one per op). Every op is a differentiable function of the images
    (gathers, masks, affine maps of the pixel values).

    `spatial_only`: apply only the ops that move pixels (`SPATIAL`), with the same numbers,
    to a map that must stay aligned with images augmented by all of them (a completion's
    hole mask); the others are skipped.

    Each op function is `op(images, u, gate)`, and each geometric one `matrices(u, shape)`,
    with `u` the list of its own numbers, one [N] tensor each.
    """
    images = tf.convert_to_tensor(images, tf.float32)
    ps = tuple(p) if isinstance(p, (list, tuple)) else (p,) * len(ops)
    # One op splits the numbers into their columns ([N] each): a slice per number would
    # trace four ops each (a fifth of an augmented discriminator step's trace).
    columns = tf.unstack(uniforms, num=sum(widths(ops)), axis=1)
    column, transform = 0, None  # the geometric ops' (matrices, gates) so far, unapplied
    for op, width, op_p in zip(ops, widths(ops), ps, strict=True):
        u = columns[column : column + width]
        column += width
        gate = u[0] < op_p
        if spatial_only and op not in SPATIAL:
            continue
        if op in GEOMETRIC:
            matrix = _where_matrix(gate, GEOMETRIC[op](u[1:], images.shape))
            if transform is not None:
                matrix, gate = tf.matmul(transform[0], matrix), transform[1] | gate
            transform = matrix, gate
            continue
        if transform is not None:
            images, transform = _where(transform[1], warp(images, transform[0]), images), None
        images = OP_FUNCTIONS[op](images, u[1:], gate)
    if transform is not None:  # an image that no geometric op took is returned as it was
        images = _where(transform[1], warp(images, transform[0]), images)
    return images


# The ops that move pixels (the others change their values: colour, or cutout's square).
SPATIAL = frozenset(
    {"translation", "xint", "xflip", "rotate90", "scale", "rotate", "aniso", "xfrac"}
)


def _where(gate, changed, images):
    return tf.where(tf.reshape(gate, [-1, 1, 1, 1]), changed, images)


def _per_image(values):
    return tf.reshape(values, [-1, 1, 1, 1])


def color(images, u, gate):
    """DiffAugment's `rand_brightness`, `rand_saturation`, `rand_contrast`, in that order."""
    out = images + _per_image(u[0] - 0.5)
    mean = tf.reduce_mean(out, axis=3, keepdims=True)
    out = (out - mean) * _per_image(u[1] * 2.0) + mean
    mean = tf.reduce_mean(out, axis=[1, 2, 3], keepdims=True)
    out = (out - mean) * _per_image(u[2] + 0.5) + mean
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
    dy = shift_amount(u[0], images.shape[1])
    dx = shift_amount(u[1], images.shape[2])
    return _where(gate, translate(images, dy, dx, reflect=False), images)


def xint(images, u, gate):
    """ADA's integer translation: by round((2u - 1) * 1/8 * side) pixels, reflect padding."""
    h, w = images.shape[1], images.shape[2]
    dy = tf.cast(tf.round((u[0] * 2.0 - 1.0) * TRANSLATION_RATIO * h), tf.int32)
    dx = tf.cast(tf.round((u[1] * 2.0 - 1.0) * TRANSLATION_RATIO * w), tf.int32)
    return _where(gate, translate(images, dy, dx, reflect=True), images)


def cutout(images, u, gate):
    """DiffAugment's `rand_cutout` (ratio 1/2): a square of side int(side/2 + 0.5), centred at
    `randint(0, side + 1 - size % 2)`, set to 0."""
    h, w = images.shape[1], images.shape[2]
    ch, cw = int(h * CUTOUT_RATIO + 0.5), int(w * CUTOUT_RATIO + 0.5)
    oy = tf.cast(tf.floor(u[0] * (h + 1 - ch % 2)), tf.int32)
    ox = tf.cast(tf.floor(u[1] * (w + 1 - cw % 2)), tf.int32)
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
    k = tf.minimum(tf.cast(tf.floor(u[0] * 4.0), tf.int32), 3)
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
    return _where(gate, images + _per_image(_normal(u[0]) * BRIGHTNESS_STD), images)


def contrast(images, u, gate):
    """ADA's contrast: a scale around 0 (mid-grey), lognormal with std 0.5 in log2 units."""
    scale = tf.pow(2.0, _normal(u[0]) * CONTRAST_STD)
    return _where(gate, images * _per_image(scale), images)


def saturation(images, u, gate):
    """ADA's saturation: scale the colour away from the grey axis (1, 1, 1); grey images
    are unchanged."""
    if images.shape[-1] != 3:
        return images
    scale = tf.pow(2.0, _normal(u[0]) * SATURATION_STD)
    axis = tf.constant([1.0, 1.0, 1.0], tf.float32) / math.sqrt(3.0)  # ADA's luma axis
    along = tf.reduce_sum(images * axis, axis=-1, keepdims=True) * axis
    return _where(gate, along + (images - along) * _per_image(scale), images)


def _luma_matrix(images, matrices):
    """Each image's colours through its 3x3 matrix [N, 3, 3] (pixel rows: c' = M c)."""
    return tf.einsum("nij,nhwj->nhwi", matrices, images)


LUMA = (1 / math.sqrt(3.0),) * 3  # the grey axis, a unit vector (a tensor at import would
# start TensorFlow's devices before the trainer sets them up)


def lumaflip(images, u, gate):
    """ADA's luma flip: with probability 1/2, c' = (I - 2 v v^T) c, v the grey axis."""
    if images.shape[-1] != 3:
        return images
    flip = tf.cast(tf.floor(u[0] * 2.0) >= 1.0, tf.float32)
    v = tf.constant(LUMA)
    householder = tf.eye(3) - 2.0 * v[:, None] * v[None, :]
    matrices = tf.where(flip[:, None, None] > 0, householder, tf.eye(3)[None])
    return _where(gate, _luma_matrix(images, matrices), images)


def hue_matrices(theta):
    """Rotations by `theta` [N] around the grey axis (Rodrigues' formula), [N, 3, 3]."""
    a = 1.0 / math.sqrt(3.0)
    cross = tf.constant([[0.0, -a, a], [a, 0.0, -a], [-a, a, 0.0]])  # v x c = cross @ c
    v = tf.constant(LUMA)
    outer = v[:, None] * v[None, :]
    c, s = tf.cos(theta)[:, None, None], tf.sin(theta)[:, None, None]
    return c * tf.eye(3) + s * cross + (1.0 - c) * outer


def hue(images, u, gate):
    """ADA's hue rotation: around the grey axis by a uniform angle in [-pi, pi]."""
    if images.shape[-1] != 3:
        return images
    theta = (u[0] * 2.0 - 1.0) * math.pi
    return _where(gate, _luma_matrix(images, hue_matrices(theta)), images)


# ADA's general geometric ops: each gives 3x3 matrices [N, 3, 3] that map an output pixel's
# position (x, y, 1), relative to the image centre, to where it samples the input.

SCALE_STD = 0.2  # ADA, log2 units
ANISO_STD = 0.2
XFRAC_STD = 0.125  # of the side
# ADA's geometric filter: the symlet-6 wavelet's low-pass (`wavelets['sym6']` in its augment.py)
SYM6 = (0.015404109327027373, 0.0034907120842174702, -0.11799011114819057, -0.048311742585633,
        0.4910559419267466, 0.787641141030194, 0.3379294217276218, -0.07263752278646252,
        -0.021060292512300564, 0.04472490177066578, 0.0017677118642428036,
        -0.007800708325034148)  # fmt: skip
FILTER_PAD = len(SYM6) // 4  # ADA's Hz_pad: input pixels the filter reaches past the image


def _affine(a, b, c, d, tx=None, ty=None):
    """[N, 3, 3] matrices [[a, b, tx], [c, d, ty], [0, 0, 1]] from [N] tensors."""
    zeros = tf.zeros_like(a)
    tx = zeros if tx is None else tx
    ty = zeros if ty is None else ty
    rows = [tf.stack([a, b, tx], -1), tf.stack([c, d, ty], -1)]
    rows.append(tf.stack([zeros, zeros, tf.ones_like(a)], -1))
    return tf.stack(rows, axis=1)


def _where_matrix(gate, matrices):
    return tf.where(gate[:, None, None], matrices, tf.eye(3, batch_shape=[1]))


def scale_matrices(u, shape):
    s = tf.pow(2.0, _normal(u[0]) * SCALE_STD)
    return _affine(1.0 / s, tf.zeros_like(s), tf.zeros_like(s), 1.0 / s)


def rotate_matrices(u, shape):
    theta = (u[0] * 2.0 - 1.0) * math.pi
    c, s = tf.cos(theta), tf.sin(theta)
    return _affine(c, -s, s, c)


def aniso_matrices(u, shape):
    s = tf.pow(2.0, _normal(u[0]) * ANISO_STD)
    return _affine(1.0 / s, tf.zeros_like(s), tf.zeros_like(s), s)


def xfrac_matrices(u, shape):
    """Translation by N(0, 1/8) of the side on each axis (the input moves by +t)."""
    tx = -_normal(u[0]) * XFRAC_STD * shape[2]
    ty = -_normal(u[1]) * XFRAC_STD * shape[1]
    ones, zeros = tf.ones_like(tx), tf.zeros_like(tx)
    return _affine(ones, zeros, zeros, ones, tx, ty)


GEOMETRIC = {
    "scale": scale_matrices,
    "rotate": rotate_matrices,
    "aniso": aniso_matrices,
    "xfrac": xfrac_matrices,
}


def _fir(images, axis, up, down, pad0, pad1, flip):
    """upfirdn along `axis` (1: rows, 2: columns) of NHWC images, as ADA's `upfirdn2d` does it
    on one axis: insert `up - 1` zeros after each sample, pad with `pad0`/`pad1` zeros
    (negative: crop), correlate with the filter (reversed unless `flip`; times `up`), keep
    every `down`-th sample."""
    if axis == 2:
        images = tf.transpose(images, [0, 2, 1, 3])
    n, length, rest, channels = images.shape
    n = tf.shape(images)[0]
    x = tf.reshape(images, [n, length, rest * channels, 1])
    if up > 1:
        x = tf.stack([x] + [tf.zeros_like(x)] * (up - 1), axis=2)
        x = tf.reshape(x, [n, length * up, rest * channels, 1])
    x = tf.pad(x, [[0, 0], [max(pad0, 0), max(pad1, 0)], [0, 0], [0, 0]])
    x = x[:, max(-pad0, 0) : x.shape[1] - max(-pad1, 0)]
    taps = tf.constant(SYM6 if flip else SYM6[::-1], tf.float32) / sum(SYM6) * up
    x = tf.nn.conv2d(x, tf.reshape(taps, [-1, 1, 1, 1]), [1, down, 1, 1], "VALID")
    out = tf.reshape(x, [n, x.shape[1], rest, channels])
    return tf.transpose(out, [0, 2, 1, 3]) if axis == 2 else out


def warp(images, matrices):
    """Images [N, H, W, C] through per-image 3x3 transforms (output position, relative to the
    centre, -> input position), as ADA's geometric pipeline does it: reflect padding (by the
    side: whatever a transform reaches beyond that repeats the edge), 2x upsampling with the
    sym6 filter, bilinear sampling at 2x, filtering and 2x downsampling back to H x W. The
    identity transform returns the images exactly (to float rounding)."""
    h, w = images.shape[1], images.shape[2]
    m = max(h, w)  # the reflect margin
    rows, cols = _reflect(tf.range(-m, h + m), h), _reflect(tf.range(-m, w + m), w)
    padded = tf.gather(tf.gather(images, rows, axis=1), cols, axis=2)
    up = _fir(_fir(padded, 1, 2, 1, 6, 5, False), 2, 2, 1, 6, 5, False)
    uh, uw = up.shape[1], up.shape[2]
    # The output at 2x covers the image and FILTER_PAD input pixels around it; position of
    # 2x pixel j in input pixel units, relative to the centre.
    margin = 2 * FILTER_PAD
    qy = (tf.range(2 * m - margin, 2 * (m + h) + margin, dtype=tf.float32) + 0.5) / 2 - m - h / 2
    qx = (tf.range(2 * m - margin, 2 * (m + w) + margin, dtype=tf.float32) + 0.5) / 2 - m - w / 2
    gy, gx = tf.meshgrid(qy, qx, indexing="ij")
    grid = tf.stack([tf.reshape(gx, [-1]), tf.reshape(gy, [-1]), tf.ones([tf.size(gx)])], 0)
    source = tf.einsum("nij,jk->nik", matrices, grid)  # [N, 3, P]
    sx = 2.0 * (source[:, 0] + w / 2 + m) - 0.5  # in 2x pixel indices
    sy = 2.0 * (source[:, 1] + h / 2 + m) - 0.5
    x0, y0 = tf.floor(sx), tf.floor(sy)
    fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
    flat = tf.reshape(up, [tf.shape(up)[0], uh * uw, up.shape[3]])

    def at(y, x):
        y = tf.clip_by_value(tf.cast(y, tf.int32), 0, uh - 1)
        x = tf.clip_by_value(tf.cast(x, tf.int32), 0, uw - 1)
        return tf.gather(flat, y * uw + x, batch_dims=1)

    top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
    bottom = at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
    sampled = top * (1 - fy) + bottom * fy
    sampled = tf.reshape(sampled, [-1, qy.shape[0], qx.shape[0], images.shape[3]])
    out = _fir(_fir(sampled, 1, 1, 2, -1, -1, True), 2, 1, 2, -1, -1, True)
    return tf.ensure_shape(out, [None, h, w, images.shape[3]])


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
    "hue": hue,
    "lumaflip": lumaflip,
}
