"""Image data sources. Each yields float32 images in [-1, 1], shape [H, W, C].

`ImageSource` serves one global batch at a time (the trainer splits it evenly across towers).
In-memory sources draw random indices from the run's data stream; `tfrecord` streams through a
shuffled, seeded tf.data pipeline whose iterator is checkpointed.

    type       options
    shapes     size (32), channels (3), count (8000): procedurally drawn, seeded images of
               coloured circles, squares and triangles on varied backgrounds
    folder     path, size, channels: PNG or JPEG files under `path`, centre-cropped and resized
    npz        path, key ("images"), size: an array file; uint8 [0, 255] or float in [0, 1]
    tfrecord   path (file or glob), image_feature ("image"): encoded PNG or JPEG bytes
    mnist, fashion_mnist, cifar10: keras.datasets (downloaded once; offline, a clear error)
"""

import glob
import logging
import os

import numpy as np
import tensorflow as tf

from stagegan.errors import ConfigError

log = logging.getLogger("stagegan")

SOURCES = ("shapes", "folder", "npz", "tfrecord", "mnist", "fashion_mnist", "cifar10")
DEFAULTS = {
    "source": "shapes",
    "path": None,
    "size": 32,
    "channels": 3,
    "count": 8000,
    "key": "images",
    "image_feature": "image",
    "shuffle_buffer": 10000,
}


# Shapes ---------------------------------------------------------------------------------------


def draw_shapes(count, size, seed, channels=3, labels=False):
    """`count` images of coloured shapes, uint8 [count, size, size, channels], from `seed`.

    Each image has a background (a random colour with a linear gradient) and 1-3 shapes:
    circles, squares or triangles of random colour, size and position. The same seed gives
    the same images, byte for byte.

    With `labels`, returns `(images, labels)`, where `labels` holds int arrays [count]:
    `kind` (of the topmost shape that shows at least `VISIBLE` of the image: 0 circle,
    1 square, 2 triangle, 3 none), `colour` (its colour, one bit per channel above 0.5: 0-7,
    or 8 for none), `background` (the background's base colour, 0-7) and `shapes` (how many
    shapes show, 0-3). These are what `stagegan.shapes_net` learns; drawing them changes no
    image.
    """
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.0, 1.0, (count, 1, 1, 3))
    slope = rng.uniform(-0.3, 0.3, (count, 1, 1, 2))
    layers = []
    for _ in range(3):
        present = rng.uniform(size=count) < 0.7
        kind = rng.integers(0, 3, count)
        cx, cy = rng.uniform(0.2, 0.8, count), rng.uniform(0.2, 0.8, count)
        radius = rng.uniform(0.12, 0.3, count)
        colour = rng.uniform(0.0, 1.0, (count, 3))
        layers.append((present, kind, cx, cy, radius, colour))
    images = np.empty((count, size, size, channels), np.uint8)
    owner = np.empty((count, size, size), np.int8)  # which layer shows at each pixel
    for start in range(0, count, SHAPES_CHUNK):  # bounded memory for large counts
        part = slice(start, start + SHAPES_CHUNK)
        images[part], owner[part] = _render_shapes(
            size, channels, base[part], slope[part], [[a[part] for a in la] for la in layers]
        )
    if not labels:
        return images
    kinds = np.stack([layer[1] for layer in layers], 1)
    colours = np.stack([layer[5] for layer in layers], 1)
    return images, _shape_labels(owner, kinds, colours, base)


SHAPES_CHUNK = 1000


def _render_shapes(size, channels, base, slope, layers):
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = base + slope[..., :1] * xs[None, ..., None] + slope[..., 1:] * ys[None, ..., None]
    images = images.astype(np.float32)
    owner = np.full(images.shape[:3], -1, np.int8)
    for index, (present, kind, cx, cy, radius, colour) in enumerate(layers):
        dx = xs[None] - cx[:, None, None]
        dy = ys[None] - cy[:, None, None]
        r = radius[:, None, None]
        circle = dx**2 + dy**2 <= r**2
        square = (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
        # An upward triangle: below the apex, inside two slanted edges, above the base.
        triangle = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
        inside = np.where(
            kind[:, None, None] == 0, circle, np.where(kind[:, None, None] == 1, square, triangle)
        )
        inside &= present[:, None, None]
        images = np.where(inside[..., None], colour[:, None, None, :], images)
        owner[inside] = index
    images = np.clip(images, 0.0, 1.0)
    if channels == 1:
        images = images.mean(axis=-1, keepdims=True)
    return np.round(images * 255).astype(np.uint8), owner


VISIBLE = 0.03  # the share of an image a shape must show to count as present
COLOUR_BITS = np.array([4, 2, 1])


def _shape_labels(owner, kinds, colours, base):
    """The labels of `draw_shapes(labels=True)` from each pixel's top layer (-1: background),
    the layers' kinds [N, 3] and colours [N, 3, 3], and the background colours [N, 1, 1, 3]."""
    count, pixels = len(owner), owner[0].size
    areas = np.stack([(owner == layer).sum(axis=(1, 2)) for layer in range(3)], 1) / pixels
    visible = areas >= VISIBLE  # [N, 3 layers]
    top = np.where(visible, np.arange(3)[None], -1).max(axis=1)  # the last drawn visible
    rows, layer = np.arange(count), np.maximum(top, 0)
    colour = ((colours[rows, layer] > 0.5) * COLOUR_BITS).sum(axis=1)
    return {
        "kind": np.where(top >= 0, kinds[rows, layer], 3),
        "colour": np.where(top >= 0, colour, 8),
        "background": ((base.reshape(count, 3) > 0.5) * COLOUR_BITS).sum(axis=1),
        "shapes": visible.sum(axis=1),
    }


# Loading ---------------------------------------------------------------------------------------


def load_images(options, seed, held_out=False):
    """All images of a source as uint8 numpy [N, H, W, C] (the in-memory sources) or None.

    `held_out` asks for the evaluation split: 10,000 images from a different seed for
    `shapes`, the test split for keras datasets, and the same files otherwise.
    """
    source = options["source"]
    size, channels = options["size"], options["channels"]
    if source == "shapes":
        count = SHAPES_HELD_OUT if held_out else options["count"]
        return draw_shapes(count, size, seed + (7919 if held_out else 0), channels)
    if source == "npz":
        return _load_npz(options)
    if source == "folder":
        return _load_folder(options)
    if source in ("mnist", "fashion_mnist", "cifar10"):
        return _load_keras(source, held_out, options)
    return None


SHAPES_HELD_OUT = 10000  # the held-out split of `shapes`: as large as FID's usual sample count
HELD_OUT_SOURCES = ("shapes", "mnist", "fashion_mnist", "cifar10")


def has_held_out(source):
    """Whether `load_images(..., held_out=True)` gives images that training never sees."""
    return source in HELD_OUT_SOURCES


def take_stream_images(options, count):
    """The first `count` images of a streamed source (uint8), from a pipeline of its own."""
    batches = _tfrecord_images(options).take(count).batch(count)
    return next(iter(batches)).numpy()


def tfrecord_dataset(options, seed, batch_size):
    """The streaming pipeline of `tfrecord`: a `tf.data.Dataset` of global batches."""
    ds = _tfrecord_images(options)
    ds = ds.shuffle(options["shuffle_buffer"], seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat().map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=True).map(lambda x: {"x": x})
    deterministic = tf.data.Options()
    deterministic.deterministic = True
    return ds.with_options(deterministic).prefetch(tf.data.AUTOTUNE)


def _to_float(image):
    return tf.cast(image, tf.float32) / 127.5 - 1.0


def _fit(images, size, channels, key):
    """Centre-crop to square, resize to `size`, and match `channels` (uint8 out)."""
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ConfigError(
            key, f"images must be [N, H, W] or [N, H, W, C]; got shape {images.shape}"
        )
    if images.shape[0] == 0:
        raise ConfigError(key, "holds no images")
    if images.dtype != np.uint8:
        if not np.issubdtype(images.dtype, np.floating):
            raise ConfigError(key, f"images must be uint8 or float in [0, 1]; got {images.dtype}")
        finite = np.isfinite(images)
        if not finite.all():
            first = int(np.argmin(finite.reshape(len(images), -1).all(axis=1)))
            raise ConfigError(
                key,
                f"float images hold {int((~finite).sum())} NaN or Inf values (the first in "
                f"image {first}); pixels must be finite, in [0, 1]",
            )
        if images.min() < 0 or images.max() > 1:
            low, high = float(images.min()), float(images.max())
            raise ConfigError(key, f"float images must lie in [0, 1]; found {low:g} to {high:g}")
        images = np.round(images * 255).astype(np.uint8)
    if images.shape[-1] not in (1, 3, 4):
        raise ConfigError(key, f"images must have 1, 3 or 4 channels; got {images.shape[-1]}")
    images = images[..., :3]
    h, w = images.shape[1:3]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    images = images[:, top : top + side, left : left + side]
    if side != size:
        images = tf.image.resize(images, [size, size], antialias=True).numpy()
        images = np.clip(np.round(images), 0, 255).astype(np.uint8)
    if channels == 1 and images.shape[-1] == 3:
        images = np.round(images.mean(-1, keepdims=True)).astype(np.uint8)
    elif channels == 3 and images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    return images


def _require_path(options):
    path = options["path"]
    if not path:
        raise ConfigError("data.path", f"required for source {options['source']!r}")
    return os.path.expanduser(str(path))


def _load_npz(options):
    path = _require_path(options)
    try:
        with np.load(path) as archive:
            if options["key"] not in archive:
                raise ConfigError(
                    "data.key",
                    f"{path} has no array {options['key']!r} (has: {', '.join(archive.files)})",
                )
            images = archive[options["key"]]
    except FileNotFoundError:
        raise ConfigError("data.path", f"file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise ConfigError("data.path", f"cannot read {path} as .npz: {e}") from None
    return _fit(images, options["size"], options["channels"], f"data.key ({path})")


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def _load_folder(options):
    path = _require_path(options)
    if not os.path.isdir(path):
        raise ConfigError("data.path", f"no such folder: {path}")
    files = sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(path)
        for name in names
        if name.lower().endswith(IMAGE_SUFFIXES)
    )
    if not files:
        raise ConfigError("data.path", f"no PNG or JPEG files under {path}")
    images = []
    size = options["size"]
    for file in files:
        try:
            raw = tf.io.read_file(file)
            image = tf.io.decode_image(raw, channels=3, expand_animations=False).numpy()
        except tf.errors.OpError:
            raise ConfigError("data.path", f"unreadable image: {file}") from None
        images.append(_fit(image[None], size, options["channels"], f"data.path ({file})")[0])
    return np.stack(images)


def _load_keras(name, held_out, options):
    import keras

    loader = getattr(keras.datasets, name)
    try:
        (train_x, _), (test_x, _) = loader.load_data()
    except Exception:  # noqa: BLE001 - any download failure means the same thing to the user
        raise ConfigError(
            "data.source",
            f"the {name} dataset could not be downloaded (no network?); "
            "use data.source: folder or npz with a local copy",
        ) from None
    return _fit(
        test_x if held_out else train_x, options["size"], options["channels"], "data.source"
    )


def _tfrecord_images(options):
    path = _require_path(options)
    files = sorted(glob.glob(path))
    if not files:
        raise ConfigError("data.path", f"no TFRecord files match {path}")
    feature = options["image_feature"]
    size, channels = options["size"], options["channels"]

    def parse(record):
        parsed = tf.io.parse_single_example(record, {feature: tf.io.FixedLenFeature([], tf.string)})
        image = tf.io.decode_image(parsed[feature], channels=3, expand_animations=False)
        image = tf.image.resize_with_crop_or_pad(
            image, tf.reduce_min(tf.shape(image)[:2]), tf.reduce_min(tf.shape(image)[:2])
        )
        image = tf.image.resize(image, [size, size], antialias=True)
        image = tf.clip_by_value(tf.round(image), 0, 255)
        if channels == 1:
            image = tf.image.rgb_to_grayscale(image)
        return tf.cast(image, tf.uint8)

    try:
        first = next(iter(tf.data.TFRecordDataset(files[:1]).take(1)))
        example = tf.train.Example.FromString(first.numpy())
    except Exception:  # noqa: BLE001 - missing, truncated or not TFRecord: one message
        raise ConfigError("data.path", f"cannot read TFRecords from {files[0]}") from None
    if feature not in example.features.feature:
        known = ", ".join(example.features.feature.keys())
        raise ConfigError(
            "data.image_feature", f"no feature {feature!r} in {files[0]} (has: {known})"
        )
    return tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def check_options(options):
    """Check the generic data options (types are checked by the task's defaults)."""
    if options["source"] not in SOURCES:
        raise ConfigError(
            "data.source", f"unknown source {options['source']!r} (known: {', '.join(SOURCES)})"
        )
    if options["size"] < 4:
        raise ConfigError("data.size", f"must be at least 4. Received: {options['size']}")
    if options["channels"] not in (1, 3):
        raise ConfigError("data.channels", f"must be 1 or 3. Received: {options['channels']}")
    if options["count"] < 1:
        raise ConfigError("data.count", f"must be positive. Received: {options['count']}")


# Below this many images a GAN reproduces its training set rather than learning the data.
FEW_IMAGES = 500


def check_count(count, batch_size, path):
    """Refuse a dataset smaller than one batch; warn about one a GAN will memorise."""
    if count < batch_size:
        raise ConfigError(
            "data.path",
            f"{path} has {count} image{'s' if count != 1 else ''}, fewer than one batch "
            f"(batch_size {batch_size})",
        )
    if count < FEW_IMAGES:
        log.warning(
            "data.path: %s has only %d images; a GAN trained on fewer than a few hundred "
            "images memorises them",
            path,
            count,
        )


class ImageSource:
    """The images of a run, served one global batch at a time inside the step function.

    In-memory sources (everything but `tfrecord`) draw each batch as random indices from the
    run's data stream (sampling with replacement), so the data position is just that stream's
    checkpointed state: no shuffle buffer to save, and exact on resume. `tfrecord` streams
    through a shuffled tf.data pipeline whose iterator is checkpointed (with its buffer).
    """

    def __init__(self, options, seed, batch_size):
        check_options(options)
        self.options = options
        if options["source"] == "tfrecord":
            self.images = None
            self.iterator = iter(tfrecord_dataset(options, seed, batch_size))
        else:
            images = load_images(options, seed)
            if options["source"] in ("folder", "npz"):
                check_count(len(images), batch_size, options["path"])
            self.images = tf.constant(images)
            self.iterator = None

    def batch(self, batch_size, rng):
        """One global batch, float32 in [-1, 1]."""
        if self.iterator is not None:
            return next(self.iterator)["x"]
        index = rng.uniform([batch_size], 0, self.images.shape[0], dtype=tf.int32)
        return _to_float(tf.gather(self.images, index))

    def trackables(self):
        return {"data_iterator": self.iterator} if self.iterator is not None else {}
