"""Holes for image completion: the users' own mask files, and LaMa's mask generators.

Masks are float32 [B, S, S, 1], 1 in the hole.

* `data.masks: DIR`: mask images of any size and format that `data.path` takes (white or any
  bright pixel: the hole), fitted to `data.size` as the images are (centre-cropped to a
  square, resized), then thresholded at half brightness (`load_masks`). Training draws one
  at random for each image; `sample --input DIR --masks DIR` pairs them by file name.
* `data.holes: box`: LaMa's `RandomRectangleMaskGenerator` (Suvorov et al. 2022,
  `saicinpainting/training/data/masks.py`), 1 to 4 boxes with sides from 30 to 150 pixels at
  256 px and a margin of 10, scaled to the image side (`box_masks`);
* `data.holes: wide`: LaMa's training masks (`configs/training/data/abl-04-256-mh-dist.yaml`),
  for each image with probability 1/2 the boxes above, else 1 to 5 thick strokes of 1 to 5
  segments each (`RandomIrregularMaskGenerator`: lengths 10 + U[0, 200), widths 5 + U[0, 100)
  pixels at 256 px, scaled; its angles) (`wide_masks`).

Every generator draws from the random stream it is given, for the whole global batch.
"""

import math
import os

import numpy as np
import tensorflow as tf

from stagegan.errors import ConfigError

LAMA_SIDE = 256  # the image side LaMa's pixel sizes are given at
BOX = {"margin": 10, "min_size": 30, "max_size": 150, "min_times": 1, "max_times": 4}
STROKES = {"max_angle": 4, "max_len": 200, "max_width": 100, "min_times": 1, "max_times": 5}
SEGMENTS = 5  # at most, per stroke (LaMa: 1 + randint(5))


def load_masks(folder, size, key="data.masks"):
    """`(masks [N, S, S, 1] float32, names)`: every mask image in `folder`, fitted to `size`
    as images are, 1 where the fitted pixel is at least half bright; `names`: the files'
    names without their extensions.

    Raises:
        ConfigError (naming `key`): no such folder, no mask image in it, a file that cannot be
            read, a mask with no hole, or one that is all hole.
    """
    from stagegan.data.images import refusal
    from stagegan.data.sources import IMAGE_SUFFIXES, decode_files

    if not isinstance(folder, str) or not folder:
        raise ConfigError(key, f"expected a folder of mask images. Received: {folder!r}")
    if not os.path.isdir(folder):
        raise ConfigError(key, f"no such folder: {folder}")
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(IMAGE_SUFFIXES))
    if not names:
        suffixes = ", ".join(IMAGE_SUFFIXES)
        raise ConfigError(key, f"no mask images ({suffixes}) in {folder}")
    files = [os.path.join(folder, n) for n in names]
    images, ok = decode_files(files, size, 1, key=None)
    if not ok.all():
        first = int(np.flatnonzero(~ok)[0])
        why = refusal(files[first]) or "not an image?"
        raise ConfigError(key, f"cannot read mask {names[first]} in {folder} ({why})")
    masks = (images >= 128).astype(np.float32)
    share = masks.mean(axis=(1, 2, 3))
    for name, value in zip(names, share, strict=True):
        if value == 0.0 or value == 1.0:
            what = "no hole (no pixel at half brightness or more)" if value == 0 else "all hole"
            raise ConfigError(key, f"mask {name} in {folder} has {what} at {size}x{size}")
    return masks, [os.path.splitext(n)[0] for n in names]


def drawn_from(rng, bank, batch_size):
    """`batch_size` masks of `bank` [N, S, S, 1], each picked at random."""
    count = int(bank.shape[0])
    index = tf.minimum(tf.cast(rng.uniform([batch_size]) * count, tf.int32), count - 1)
    return tf.gather(tf.constant(bank), index)


def _scaled(pixels, size):
    return pixels * size / LAMA_SIDE


def _times(rng, batch_size, low, high):
    """A count in [low, high] per image, uniform."""
    return tf.cast(tf.floor(rng.uniform([batch_size]) * (high - low + 1)), tf.int32) + low


def box_masks(rng, batch_size, size):
    """LaMa's boxes: 1 to 4 per image, sides in [30, 150) (at 256 px), a margin of 10."""
    margin = max(0, int(round(_scaled(BOX["margin"], size))))
    low = max(1, int(round(_scaled(BOX["min_size"], size))))
    high = max(low + 1, min(int(round(_scaled(BOX["max_size"], size))), size - 2 * margin))
    count = BOX["max_times"]
    times = _times(rng, batch_size, BOX["min_times"], BOX["max_times"])
    side = tf.cast(tf.floor(rng.uniform([batch_size, count, 2], low, high)), tf.int32)
    room = tf.cast(size - 2 * margin - side + 1, tf.float32)
    corner = margin + tf.cast(tf.floor(rng.uniform([batch_size, count, 2]) * room), tf.int32)
    grid = tf.range(size)
    rows = (grid >= corner[..., :1]) & (grid < corner[..., :1] + side[..., :1])  # [B, K, S]
    cols = (grid >= corner[..., 1:]) & (grid < corner[..., 1:] + side[..., 1:])
    boxes = rows[..., :, None] & cols[..., None, :]  # [B, K, S, S]
    used = tf.range(count)[None] < times[:, None]  # [B, K]
    return tf.cast(tf.reduce_any(boxes & used[..., None, None], axis=1), tf.float32)[..., None]


def stroke_masks(rng, batch_size, size):
    """LaMa's irregular masks: 1 to 5 strokes an image, each 1 to 5 straight segments of a
    brush 5 + U[0, 100) pixels wide (at 256 px), each 10 + U[0, 200) long, at LaMa's angles
    (0.01 + an integer in [0, 4) radians, mirrored for every other stroke)."""
    k, strokes = SEGMENTS, STROKES["max_times"]
    times = _times(rng, batch_size, STROKES["min_times"], strokes)
    start = tf.floor(rng.uniform([batch_size, strokes, 2]) * size)  # (x, y)
    segments = 1 + tf.cast(tf.floor(rng.uniform([batch_size, strokes]) * k), tf.int32)
    angle = 0.01 + tf.floor(rng.uniform([batch_size, strokes, k]) * STROKES["max_angle"])
    even = tf.range(strokes) % 2 == 0
    angle = tf.where(even[None, :, None], 2 * math.pi - angle, angle)
    whole = lambda high: tf.floor(rng.uniform([batch_size, strokes, k]) * high)
    length = _scaled(10 + whole(STROKES["max_len"]), size)
    width = _scaled(5 + whole(STROKES["max_width"]), size)
    ends, point = [], start
    for j in range(k):  # each segment starts where the last ended (clipped to the image)
        step = tf.stack([tf.sin(angle[..., j]), tf.cos(angle[..., j])], -1) * length[..., j, None]
        end = tf.clip_by_value(tf.floor(point + step), 0.0, float(size))
        ends.append((point, end))
        point = end
    a = tf.stack([e[0] for e in ends], 2)  # [B, strokes, k, 2]
    b = tf.stack([e[1] for e in ends], 2)
    used = (tf.range(strokes)[None, :, None] < times[:, None, None]) & (
        tf.range(k)[None, None] < segments[..., None]
    )
    axis = tf.range(size, dtype=tf.float32)
    ys, xs = tf.meshgrid(axis, axis, indexing="ij")
    p = tf.stack([xs, ys], -1)  # pixel centres at integer coordinates, as cv2 draws
    a, b = a[..., None, None, :], b[..., None, None, :]
    ab = b - a
    t = tf.reduce_sum((p - a) * ab, -1) / tf.maximum(tf.reduce_sum(ab * ab, -1), 1e-6)
    nearest = a + tf.clip_by_value(t, 0.0, 1.0)[..., None] * ab
    inside = tf.norm(p - nearest, axis=-1) <= width[..., None, None] / 2
    inside &= used[..., None, None]
    return tf.cast(tf.reduce_any(inside, axis=[1, 2]), tf.float32)[..., None]


def wide_masks(rng, batch_size, size):
    """LaMa's training masks: per image, with probability 1/2 `box_masks`, else
    `stroke_masks`."""
    boxes = box_masks(rng, batch_size, size)
    strokes = stroke_masks(rng, batch_size, size)
    pick = rng.uniform([batch_size]) < 0.5
    return tf.where(pick[:, None, None, None], boxes, strokes)


GENERATORS = {"box": box_masks, "wide": wide_masks}


def crop_offsets(mask, crop):
    """The top-left corners [B, 2] of `crop` x `crop` windows centred on each hole's centre of
    mass (the image's centre for an empty mask), kept inside the image."""
    size = int(mask.shape[1])
    weights = mask[..., 0]
    total = tf.reduce_sum(weights, axis=[1, 2])
    grid = tf.range(size, dtype=tf.float32) + 0.5
    centre_y = tf.reduce_sum(weights * grid[None, :, None], axis=[1, 2])
    centre_x = tf.reduce_sum(weights * grid[None, None, :], axis=[1, 2])
    centre = tf.stack([centre_y, centre_x], -1) / tf.maximum(total, 1e-6)[:, None]
    centre = tf.where(total[:, None] > 0, centre, size / 2)
    corner = tf.cast(tf.round(centre - crop / 2), tf.int32)
    return tf.clip_by_value(corner, 0, size - crop)
