"""Image data sources. Each yields float32 images in [-1, 1], shape [H, W, C], and, with
`labels`, int32 class indices.

`ImageSource` serves one global batch at a time (the trainer splits it evenly across towers).
In-memory sources draw random indices from the run's data stream; `folder` and `tfrecord`
stream through seeded tf.data pipelines whose iterators are checkpointed (a folder: a fresh
permutation of its files each epoch, decoded in parallel as needed; memory does not grow with
the number of files).

    type       options
    shapes     size (32), channels (3), count (8000): procedurally drawn, seeded images of
               coloured circles, squares and triangles on varied backgrounds
    folder     path, size, channels, cache (none | memory), labels (subfolders | clusters),
               clusters (20): PNG or JPEG files under `path`, centre-cropped and resized;
               unreadable ones skipped (and files that are not regular files: a fifo, a
               socket, a device). `labels: clusters` makes k-means clusters of the images
               their classes (`stagegan.data.clusters`)
    npz        path, key ("images"), labels (an array name), classes: an array file; uint8
               [0, 255] or float in [0, 1]
    tfrecord   path (file or glob), image_feature ("image"), labels (an int64 feature name),
               classes (required with labels): encoded PNG or JPEG bytes
    mnist, fashion_mnist, cifar10: keras.datasets (downloaded once; offline, a clear error)
"""

import contextlib
import glob
import logging
import os
import stat

import numpy as np
import tensorflow as tf

from stagegan.config.memory import check_image_memory, format_count
from stagegan.core.staging import pixels_to_float
from stagegan.data import clusters
from stagegan.data.prepare import NAME_FEATURE  # each record's file name below the folder
from stagegan.errors import ConfigError, first_line

log = logging.getLogger("stagegan")

DEFAULTS = {
    "source": "shapes",
    "path": None,
    "size": 32,
    "channels": 3,
    "count": 8000,
    "key": "images",
    "image_feature": "image",
    "shuffle_buffer": 10000,
    "cache": "none",
    "labels": None,
    "classes": None,
    "clusters": None,
    "holdout": 0.0,
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
    shapes show, 0-3). These are what `stagegan.evaluation.shapes_net` learns; drawing them
    changes no image.
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
    chunk = shapes_chunk(size)
    for start in range(0, count, chunk):  # bounded memory for large counts and sizes
        part = slice(start, start + chunk)
        images[part], owner[part] = _render_shapes(
            size, channels, base[part], slope[part], [[a[part] for a in la] for la in layers]
        )
    if not labels:
        return images
    kinds = np.stack([layer[1] for layer in layers], 1)
    colours = np.stack([layer[5] for layer in layers], 1)
    return images, _shape_labels(owner, kinds, colours, base)


SHAPES_CHUNK = 1000
DRAW_BYTES = 100  # bytes per pixel of the shapes being drawn at once (float64 layers, masks)
DRAW_BUDGET = 256 << 20  # bytes drawn at once at most (but one image at least)


def shapes_chunk(size):
    """How many images `draw_shapes` draws at once: up to `SHAPES_CHUNK`, in `DRAW_BUDGET`
    bytes (each image is drawn on its own: the chunk changes no pixel)."""
    return int(np.clip(DRAW_BUDGET // (size * size * DRAW_BYTES), 1, SHAPES_CHUNK))


def _render_shapes(size, channels, base, slope, layers):
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = base + slope[..., :1] * xs[None, ..., None] + slope[..., 1:] * ys[None, ..., None]
    # float32, then float64 (the colours' type) from the first shape on, as always drawn
    images = images.astype(np.float32).astype(np.float64)
    owner = np.full(images.shape[:3], -1, np.int8)
    for index, (present, kind, cx, cy, radius, colour) in enumerate(layers):
        for shape in range(3):  # each shape's test on the images that draw it only
            rows = np.nonzero(present & (kind == shape))[0]
            if len(rows) == 0:
                continue
            dx = xs[None] - cx[rows, None, None]
            dy = ys[None] - cy[rows, None, None]
            r = radius[rows, None, None]
            if shape == 0:  # a circle
                inside = dx**2 + dy**2 <= r**2
            elif shape == 1:  # a square
                inside = (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
            else:  # an upward triangle: below the apex, inside two slanted edges, above the base
                inside = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
            drawn = images[rows]
            drawn[inside] = np.broadcast_to(colour[rows, None, None, :], drawn.shape)[inside]
            images[rows] = drawn
            mine = owner[rows]
            mine[inside] = index
            owner[rows] = mine
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
    """All images of a source as uint8 numpy [N, H, W, C], or None for `tfrecord` (a stream).

    `held_out` asks for the evaluation split: 10,000 images from a different seed for
    `shapes`, the test split for keras datasets, and the same files otherwise. A folder's
    unreadable files are left out, with a warning naming each.
    """
    return source_of(options).load(seed, held_out)


SHAPES_HELD_OUT = 10000  # the held-out split of `shapes`: as large as FID's usual sample count


def has_held_out(source):
    """Whether `load_images(..., held_out=True)` gives images that training never sees."""
    return SOURCES[source].held_out


class Pool:
    """The real images that samples and metrics choose from, loaded only when chosen.

    Attributes:
        size: how many there are.
        held_out: whether training never sees them.
        load: `load(indices) -> (uint8 images, labels or None)` for an int array of indices.
        readable: `readable() -> int`: how many of them decode (a folder's unreadable files
            are counted in `size`); None: all of them.
    """

    def __init__(self, size, held_out, load, readable=None):
        self.size, self.held_out, self.load = size, held_out, load
        self._readable = readable

    def readable(self):
        """How many of the images decode (decodes a folder's files once)."""
        if callable(self._readable):
            self._readable = int(self._readable())
        return self.size if self._readable is None else self._readable


def reference_pool(options, seed, count):
    """The `Pool` behind `stagegan.data.real.RealImages`: the held-out split where the source
    has one; a folder's files (decoded when chosen, so memory does not grow with the folder);
    a stream's first `count` images."""
    return source_of(options).pool(seed, count)


def take_stream_images(options, count, held_out=False):
    """The first `count` images of a streamed source (uint8) and their labels (or None); of
    its `data.holdout` split with `held_out`, else of its training images."""
    batches = _tfrecord_examples(options, held_out).take(count).batch(count)
    first = next(iter(batches), None)
    if first is None:
        which = "held-out records" if held_out else "records"
        raise ConfigError("data.path", f"no {which} in {options['path']}")
    return first["x"].numpy(), first["y"].numpy() if "y" in first else None


def tfrecord_dataset(options, seed, batch_size):
    """The streaming pipeline of `tfrecord`: a `tf.data.Dataset` of global batches."""
    ds = _tfrecord_examples(options)
    ds = ds.shuffle(options["shuffle_buffer"], seed=seed, reshuffle_each_iteration=True)
    return _batched(ds.repeat(), batch_size)


def _batched(ds, batch_size):
    """Global batches of uint8 examples in a fixed order, prefetched (`batch_size` None: `ds`
    is batched already). They stay uint8 (a quarter of float32's bytes in the prefetch buffer
    and the checkpointed iterator, and on their way to the device); each replica converts its
    own shard (`stagegan.core.staging.to_replica_floats`)."""
    if batch_size is not None:
        ds = ds.batch(batch_size, drop_remainder=True)
    deterministic = tf.data.Options()
    deterministic.deterministic = True
    # The report of an unreadable file (a py_function, run only for such a file) is the one
    # stateful op: it has no state that a resumed run would need.
    deterministic.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE
    )
    return ds.with_options(deterministic).prefetch(tf.data.AUTOTUNE)


def fit_image(image, size, channels):
    """Centre-crop one uint8 image [H, W, 3] to a square, resize it to `size` (antialiased,
    rounded) and give it `channels` (grey: the rounded mean of R, G and B). Graph code: the
    folder stream, `prepare` and the TFRecord reader share it, so they see the same pixels."""
    shape = tf.shape(image)
    side = tf.minimum(shape[0], shape[1])
    image = tf.image.crop_to_bounding_box(
        image, (shape[0] - side) // 2, (shape[1] - side) // 2, side, side
    )

    def resize():
        resized = tf.image.resize(image, [size, size], antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)

    image = tf.cond(tf.equal(side, size), lambda: tf.ensure_shape(image, [size, size, 3]), resize)
    if channels == 1:
        mean = tf.reduce_mean(tf.cast(image, tf.float32), axis=-1, keepdims=True)
        image = tf.cast(tf.round(mean), tf.uint8)
    return tf.ensure_shape(image, [size, size, channels])


def decode_image(raw, size, channels):
    """Encoded PNG/JPEG/GIF/BMP bytes -> uint8 [size, size, channels] (see `fit_image`)."""
    image = tf.io.decode_image(raw, channels=3, expand_animations=False)
    return fit_image(image, size, channels)


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
    """The images of an npz source (uint8) and its labels (None without `data.labels`)."""
    path = _require_path(options)
    names = [options["key"]] + ([options["labels"]] if options["labels"] else [])
    try:
        with np.load(path) as archive:
            for name, key in zip(names, ("data.key", "data.labels"), strict=False):
                if name not in archive:
                    raise ConfigError(
                        key, f"{path} has no array {name!r} (has: {', '.join(archive.files)})"
                    )
            arrays = [archive[name] for name in names]
    except FileNotFoundError:
        raise ConfigError("data.path", f"file not found: {path}") from None
    except (OSError, ValueError) as e:
        raise ConfigError("data.path", f"cannot read {path} as .npz: {e}") from None
    images = _fit(arrays[0], options["size"], options["channels"], f"data.key ({path})")
    if len(arrays) == 1:
        return images, None
    labels = check_labels(arrays[1], len(images), options, f"array {names[1]!r} of {path}")
    return images, labels


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class Listing:
    """A folder's image files in a fixed order, with class indices and names when
    `data.labels` is `subfolders` or `clusters` (else None), and the names that looked like
    images but are not regular files (`skipped`). With `clusters`, `unreadable` holds the
    files left out because they do not decode."""

    def __init__(self, path, files, labels=None, classes=None, skipped=(), unreadable=()):
        self.path, self.files, self.labels, self.classes = path, files, labels, classes
        self.skipped, self.unreadable = list(skipped), list(unreadable)
        self.split = None  # with `data.holdout`: the record of the split (`split_listing`)


def shown(path):
    """A file name as text that prints anywhere: bytes that are not UTF-8 (which Python keeps
    as surrogates in a str) become `\\xNN`. Other names are unchanged."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _image_files(folder):
    """`(files, others)` below `folder`, each sorted: the regular files named like images, and
    the other things so named (a fifo, a socket, a device, a dangling link: reading one could
    block forever). `DirEntry.is_file` is `S_ISREG` after following links, read from the
    folder listing: a folder of plain files costs no `stat` per file. Like `os.walk`, it does
    not enter linked folders, and passes over folders it cannot list."""
    files, others, pending = [], [], [folder]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.name.lower().endswith(IMAGE_SUFFIXES):
                (files if _is_regular(entry) else others).append(entry.path)
    return sorted(files), sorted(others)


def _is_regular(entry):
    try:
        return entry.is_file()
    except OSError:
        return False


def _not_regular(others):
    """Warn of each file in `others` (skipped at scan time), once per process."""
    for name in others:
        warn_unreadable(name, "not a regular file")
    return others


def _none_regular(others):
    """What an error adds when the only image names are files that are not regular."""
    if not others:
        return ""
    more = f" and {len(others) - 1:,} more" if len(others) > 1 else ""
    return f" (skipped, not regular files: {shown(others[0])}{more})"


def list_folder(options):
    """The `Listing` of a folder source: every PNG/JPEG file below `data.path`, sorted; with
    `data.labels: subfolders`, the sorted subfolder names are the classes and each class's
    files are those below its subfolder. Reads names only, never an image, except with
    `data.labels: clusters` (`_clustered`: each file's cluster, the readable files only)."""
    path = _require_path(options)
    if not os.path.isdir(path):
        raise ConfigError("data.path", f"no such folder: {shown(path)}")
    if options["labels"] in (None, "clusters"):
        files, others = _image_files(path)
        if not files:
            raise ConfigError(
                "data.path", f"no PNG or JPEG files under {shown(path)}{_none_regular(others)}"
            )
        if options["labels"] == "clusters":
            return _clustered(path, files, options, _not_regular(others))
        return Listing(path, files, skipped=_not_regular(others))
    if options["labels"] != "subfolders":
        raise ConfigError(
            "data.labels",
            f"a folder's labels must be 'subfolders' (one subfolder per class) or 'clusters' "
            f"(data.clusters groups of alike images). Received: {options['labels']!r}",
        )
    loose = [n for n in sorted(os.listdir(path)) if n.lower().endswith(IMAGE_SUFFIXES)]
    if loose:
        raise ConfigError(
            "data.labels",
            f"{len(loose)} image{'s' if len(loose) > 1 else ''} lie directly in {shown(path)}, "
            f"outside any class subfolder (e.g. {shown(loose[0])})",
        )
    folders = sorted(n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n)))
    if not folders:
        raise ConfigError("data.labels", f"{shown(path)} has no subfolders to take classes from")
    files, labels, skipped = [], [], []
    for index, name in enumerate(folders):
        found, others = _image_files(os.path.join(path, name))
        if not found:
            raise ConfigError(
                "data.labels",
                f"class '{shown(name)}' has no images ({shown(os.path.join(path, name))})"
                + _none_regular(others),
            )
        files += found
        labels += [index] * len(found)
        skipped += _not_regular(others)
    # The names of classes print anywhere (logs, plan, eval, prepare's YAML block).
    classes = [shown(name) for name in folders]
    return Listing(path, files, np.array(labels, np.int32), classes, skipped)


# (`_recorded_key`, the files with their sizes and times) -> (files, labels, unreadable)
CLUSTERED = {}
# `_recorded_key` -> ({file name below the folder: cluster}, {names left out as unreadable})
RECORDED = {}
CLUSTER_BYTES = 64 << 20  # decoded images held at a time while clustering a folder


def _clustered(path, files, options, skipped):
    """The `Listing` of `data.labels: clusters` (`stagegan.data.clusters`): the readable files
    of `files`, grouped by cluster (largest first; by name within one), each cluster a class.
    A run's own clusters (`remember_clusters`) are reused; else every file is decoded, as the
    run reads it (`data.size`, `data.channels`), and clustered, once per process."""
    count = options["clusters"] or clusters.DEFAULT_CLUSTERS
    size, channels = options["size"], options["channels"]
    recorded = RECORDED.get(_recorded_key(options))
    if recorded is not None:
        return _recorded_listing(path, files, recorded, skipped)
    key = (_recorded_key(options), tuple((f, *_stamp(f)) for f in files))
    if key not in CLUSTERED:
        readable, points = _thumbnails(path, files, size, channels)
        if len(readable) < count:
            raise ConfigError(
                "data.clusters",
                f"{count} clusters need as many readable images; {shown(path)} has "
                f"{len(readable):,}",
            )
        labels = clusters.by_size(clusters.kmeans(points, count)[0])
        found = int(labels.max()) + 1
        if found < count:
            log.warning(
                "data.clusters: %d asked, but the images of %s make %d distinct clusters",
                count,
                shown(path),
                found,
            )
        order = np.lexsort((np.arange(len(labels)), labels))  # by cluster, then by name
        chosen = [str(f) for f in readable[order]]
        CLUSTERED[key] = (chosen, labels[order], sorted(set(files) - set(chosen)))
    chosen, labels, unreadable = CLUSTERED[key]
    names = clusters.names(int(labels.max()) + 1)
    return Listing(path, list(chosen), labels, names, skipped, unreadable)


def _stamp(name):
    try:
        info = os.stat(name)
        return info.st_size, info.st_mtime_ns
    except OSError:
        return None, None


def _thumbnails(path, files, size, channels):
    """`(readable files, their thumbnails)` (`clusters.thumbnails`), decoding at most
    `CLUSTER_BYTES` of images at a time. Refuses a folder without a readable image."""
    found, readable, points = np.array(files), [], []
    chunk = max(1, min(4096, CLUSTER_BYTES // (size * size * channels)))
    for i in range(0, len(found), chunk):
        images, ok = decode_files(found[i : i + chunk], size, channels)
        readable.append(found[i : i + chunk][ok])
        points.append(clusters.thumbnails(images[ok]))
    readable = np.concatenate(readable)
    if len(readable) == 0:
        raise ConfigError("data.path", f"no readable image among the files of {shown(path)}")
    return readable, np.concatenate(points)


def remember_clusters(record, data=None):
    """Reuse the clusters a run found (`clusters_record`), rather than clustering again: a
    resumed run, `sample` and `eval` see the classes it trained on, whatever was added to
    its folder since, and without decoding it. `data`: the run's data options, which the
    record must match.

    Raises:
        ValueError: a record that is not one `clusters_record` writes, or of other data.
    """
    options, files, labels = record["data"], record["files"], record["labels"]
    unreadable = record.get("unreadable", [])
    if not (isinstance(files, list) and isinstance(labels, list) and isinstance(unreadable, list)):
        raise ValueError("files, labels and unreadable must be lists")
    if not files or len(files) != len(labels):
        raise ValueError(f"{len(files)} files and {len(labels)} labels; one label a file")
    if not all(isinstance(f, str) for f in files + unreadable) or len(set(files)) < len(files):
        raise ValueError("file names must be distinct strings")
    if not all(isinstance(y, int) and not isinstance(y, bool) and y >= 0 for y in labels):
        raise ValueError("labels must be cluster numbers (integers from 0)")
    if max(labels) >= len(labels):  # before a set of that many numbers is made
        raise ValueError(f"cluster {max(labels)} of {len(labels)} files: a cluster has no file")
    if set(labels) != set(range(max(labels) + 1)):
        raise ValueError("a cluster below the largest number has no file")
    key = _recorded_key(options)
    if max(labels) >= key[3]:
        raise ValueError(f"cluster {max(labels)} of data.clusters {key[3]}")
    if data is not None and _recorded_key({**DEFAULTS, **data}) != key:
        raise ValueError(
            "it records the clusters of other data (data.path, size, channels or clusters) "
            "than the run's config"
        )
    RECORDED[key] = (dict(zip(files, labels, strict=True)), set(unreadable))


def _recorded_key(options):
    return (
        os.path.realpath(os.path.expanduser(str(options["path"]))),
        options["size"],
        options["channels"],
        options["clusters"] or clusters.DEFAULT_CLUSTERS,
    )


def forget_clusters():
    """Cluster afresh: a new run finds its own clusters, whatever runs this process read."""
    RECORDED.clear()


def clusters_record(options, listing):
    """What `remember_clusters` needs, JSON-able: the data options and each file's cluster
    (file names below `data.path`, as text; None unless `data.labels: clusters`)."""
    if options["labels"] != "clusters":
        return None
    keys = ("path", "size", "channels", "clusters")
    return {
        "data": {key: options[key] for key in keys},
        "files": [_relative(f, listing.path) for f in listing.files],
        "labels": [int(y) for y in listing.labels],
        # left out as unreadable: not "added since" when the run's record is reused
        "unreadable": sorted(_relative(f, listing.path) for f in listing.unreadable),
    }


def _relative(name, folder):
    """A file's name below `folder` as text, `/`-separated (bytes that are not UTF-8 kept as
    surrogates, so `os.fsencode` gives them back)."""
    name = os.path.relpath(name, folder).replace(os.sep, "/")
    return os.fsencode(name).decode("utf-8", "surrogateescape")


def _recorded_listing(path, files, recorded, skipped):
    """The listing of a run's recorded clusters over today's `files`: files added since are
    left out, files gone are missing from their clusters (both warned of); a cluster left
    with no file is refused."""
    recorded, unreadable = recorded
    present = {_relative(f, path): f for f in files}
    kept = sorted((label, name) for name, label in recorded.items() if name in present)
    added = len(present.keys() - recorded.keys() - unreadable)
    gone = len(recorded) - len(kept)
    if added or gone:
        log.warning(
            "data.path: %s changed since the run clustered it (%d new files left out, %d "
            "gone); the run keeps its clusters",
            shown(path),
            added,
            gone,
        )
    count = max(recorded.values()) + 1
    labels = np.array([label for label, _ in kept], np.int32)
    sizes = np.bincount(labels, minlength=count)
    if len(kept) == 0 or (sizes == 0).any():
        empty = clusters.names(count)[int(np.argmin(sizes))]
        raise ConfigError(
            "data.path",
            f"every image of the run's {empty} is gone from {shown(path)}; the run's classes "
            "are the clusters it found there",
        )
    files = [present[name] for _, name in kept]
    still = [present[name] for name in sorted(unreadable) if name in present]
    return Listing(path, files, labels, clusters.names(count), skipped, still)


def check_labels(labels, count, options, where):
    """Class indices for `count` images as int32 [count]: integers in [0, K), every class
    present; K is `len(data.classes)` when given, else the largest label + 1."""
    labels = np.asarray(labels)
    if labels.shape != (count,):
        raise ConfigError(
            "data.labels", f"{where} has shape {list(labels.shape)}; {count} images need [{count}]"
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError("data.labels", f"{where} must hold integers; got {labels.dtype}")
    classes = options["classes"]
    top = len(classes) if classes is not None else int(labels.max()) + 1
    if labels.min() < 0 or labels.max() >= top:
        raise ConfigError(
            "data.labels",
            f"{where} holds {int(labels.min())} to {int(labels.max())}; "
            f"class indices must lie in [0, {top})"
            + (f" (data.classes names {top})" if classes is not None else ""),
        )
    counts = np.bincount(labels, minlength=top)
    if (counts == 0).any():
        empty = int(np.argmin(counts))
        name = f" ({classes[empty]!r})" if classes is not None else ""
        raise ConfigError("data.labels", f"class {empty}{name} has no images in {where}")
    return labels.astype(np.int32)


def class_names(options, labels):
    """The names of the classes: `data.classes`, else "0", "1", ..."""
    if options["classes"] is not None:
        return [str(name) for name in options["classes"]]
    return [str(k) for k in range(int(labels.max()) + 1)]


PROBE = 16  # files decoded at start-up to refuse a folder of unreadable files early
DECODE_AT_ONCE = 64  # at most this many decoded at a time at start-up (without a cache)


def check_readable(listing, options):
    """Refuse a folder whose first files (up to `PROBE`, spread over the listing) are all
    unreadable: the stream skips unreadable files, and would wait forever on such a folder.
    Costs a fixed number of decodes, whatever the folder's size. With classes, refuse a class
    none of whose files is readable, as one without files (`check_classes_readable`)."""
    if listing.labels is not None:
        return check_classes_readable(listing, options)
    step = max(1, len(listing.files) // PROBE)
    probe = listing.files[::step][:PROBE]
    if not decode_files(probe, options["size"], options["channels"])[1].any():
        raise ConfigError(
            "data.path",
            f"none of {len(probe)} files probed in {shown(listing.path)} is a readable image",
        )


def check_classes_readable(listing, options):
    """Refuse a class none of whose files is readable: the generator would be taught a class
    it never sees. Decodes each class's files in order until one reads: the first file of
    every class at once, then `PROBE` more of each class still without one, and so on; a
    folder whose first files read costs one decode per class."""
    files, count = np.array(listing.files), len(listing.classes)
    # A listing holds each class's files together, in class order.
    ends = np.cumsum(np.bincount(listing.labels, minlength=count))
    members = np.split(np.arange(len(files)), ends[:-1])
    waiting, start, step = list(range(count)), 0, 1
    while waiting:
        parts = [members[k][start : start + step] for k in waiting]
        ok = _readable(files[np.concatenate(parts)], options)
        found = np.split(ok, np.cumsum([len(part) for part in parts])[:-1])
        for k, part, read in zip(list(waiting), parts, found, strict=True):
            if read.any():
                waiting.remove(k)
            elif start + len(part) >= len(members[k]):
                name, total = listing.classes[k], len(members[k])
                raise ConfigError(
                    "data.path",
                    f"class '{name}' has no readable image among its {total:,} "
                    f"file{'s' if total > 1 else ''} ({os.path.join(shown(listing.path), name)})",
                )
        start, step = start + step, PROBE


def _readable(files, options):
    """`decode_files(files)`'s `ok`, `DECODE_AT_ONCE` files at a time (memory does not grow
    with their number)."""
    size, channels = options["size"], options["channels"]
    chunks = range(0, len(files), DECODE_AT_ONCE)
    return np.concatenate(
        [decode_files(files[i : i + DECODE_AT_ONCE], size, channels)[1] for i in chunks]
    )


def decode_files(files, size, channels, key="data.path"):
    """Decode and fit image files in parallel: `(uint8 [N, size, size, channels], ok)`, with
    black images where `ok` is False (unreadable files; each is warned of, naming `key`;
    `key` None: not warned of, the caller says what it makes of them)."""
    images = np.zeros((len(files), size, size, channels), np.uint8)
    ok = np.zeros(len(files), bool)
    if len(files) == 0:
        return images, ok
    paths = _path_tensor(files)
    load = lambda i: {"x": _read_image(paths, i, size, channels), "position": i}
    decoded = tf.data.Dataset.range(len(files)).map(
        load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    for batch in decoded.ignore_errors().batch(256):  # a failed file leaves its position out
        positions = batch["position"].numpy()
        images[positions], ok[positions] = batch["x"].numpy(), True
    for index in np.flatnonzero(~ok) if key is not None else ():
        warn_unreadable(str(files[index]), key=key)
    return images, ok


def _path_tensor(files):
    """File names as a string tensor of their bytes (a name need not be UTF-8)."""
    return tf.constant([os.fsencode(name) for name in files], tf.string)


def _read_image(paths, index, size, channels):
    """File `index` of the string tensor `paths`, decoded and fitted (raises when it cannot
    be read or decoded: the callers' `ignore_errors` drop it and the positions they carry
    show it)."""
    raw = tf.numpy_function(read_regular_file, [tf.gather(paths, index)], tf.string, stateful=False)
    return decode_image(tf.ensure_shape(raw, []), size, channels)


def read_regular_file(path):
    """The bytes of the file `path` (str or bytes), or b"" when it cannot be read or is not a
    regular file (a fifo, a socket, a device: opening one for reading can block forever). It
    is checked before opening, and opened without blocking and checked again, so a file
    swapped since cannot block either. Read in Python (TensorFlow's reader blocks on a fifo,
    and takes names as UTF-8); b"" fails to decode, as any unreadable file."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return b""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""


SKIPPED = set()  # the unreadable files met by this process


def warn_unreadable(name, reason=None, key="data.path"):
    """Warn of an image file that cannot be read, once per file and process (`key`: the
    config key or flag that named its folder)."""
    if name not in SKIPPED:  # once per file and process, not once per epoch
        SKIPPED.add(name)
        log.warning(
            "%s: skipped unreadable image %s%s (%d skipped so far)",
            key,
            shown(name),
            f", {reason}" if reason else "",
            len(SKIPPED),
        )


def folder_dataset(listing, options, seed, batch_size, cached=None):
    """The streaming pipeline of `folder`: global batches in a fresh permutation of the files
    each epoch, from the run seed and the epoch number (`stateless_shuffle`), so the order
    depends on nothing else and the checkpointed iterator holds only counters and the
    prefetched batches. Files are decoded as they come, in parallel; with `cached`, the
    `decode_files` result of all of them (`data.cache: memory`), they are looked up instead, in
    the same order. Unreadable files are left out, each warned of by name once."""
    count, size, channels = len(listing.files), options["size"], options["channels"]
    labels = None if listing.labels is None else tf.constant(listing.labels)

    def permutation(number):
        return tf.random.experimental.stateless_shuffle(
            tf.range(count, dtype=tf.int64), seed=tf.stack([tf.cast(seed, tf.int64), number])
        )

    indices = tf.data.Dataset.counter().flat_map(
        lambda number: tf.data.Dataset.from_tensor_slices(permutation(number))
    )
    with_labels = lambda i, example: (
        example if labels is None else {**example, "y": tf.gather(labels, i)}
    )
    if cached is not None:
        table, ok = tf.constant(cached[0]), tf.constant(cached[1])
        ds = indices.filter(lambda i: tf.gather(ok, i)).map(
            lambda i: with_labels(i, {"x": tf.gather(table, i)}),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return _batched(ds, batch_size)
    paths = _path_tensor(listing.files)

    def load(position, i):
        return with_labels(i, {"x": _read_image(paths, i, size, channels), "position": position})

    # A file that fails to decode is dropped by `ignore_errors`; the positions carried past it
    # show the gap, and the scan (its state checkpointed) names the files that fell in it.
    ds = tf.data.Dataset.zip(tf.data.Dataset.counter(), indices)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()

    def report(expected, positions):
        # The positions a batch skipped: from the one expected next to its last, less its own.
        missing = sorted(set(range(int(expected), int(positions[-1]))) - set(positions.numpy()))
        for position in missing:
            order = permutation(tf.constant(position // count, tf.int64)).numpy()
            warn_unreadable(listing.files[order[position % count]])
        return True

    def check(expected, batch):
        batch = dict(batch)
        positions = batch.pop("position")
        last = positions[-1]
        gap = last - expected + 1 > tf.cast(tf.shape(positions)[0], tf.int64)
        done = tf.cond(
            gap,
            lambda: tf.py_function(report, [expected, positions], tf.bool),
            lambda: tf.constant(True),
        )
        with tf.control_dependencies([done]):
            return last + 1, {k: tf.identity(v) for k, v in batch.items()}

    ds = ds.batch(batch_size, drop_remainder=True).scan(tf.constant(0, tf.int64), check)
    return _batched(ds, None)


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


def plain_records(path):
    """The records of the TFRecord file `path`, read as a plain file without TensorFlow's
    runtime (each record: a little-endian uint64 length, its 4-byte CRC, the bytes, their
    4-byte CRC; the CRCs are not checked). Raises ValueError on a truncated record."""
    import struct

    with open(path, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                raise ValueError(f"{path}: a truncated record header")
            length = struct.unpack("<Q", header[:8])[0]
            record = f.read(length)
            if len(record) < length or len(f.read(4)) < 4:
                raise ValueError(f"{path}: a truncated record")
            yield record


def tfrecord_files(options):
    """The TFRecord files of `data.path` (a file or a glob), sorted; checks the first record
    for the image feature (and the label feature, with `data.labels`)."""
    path = _require_path(options)
    files = sorted(glob.glob(path))
    if not files:
        raise ConfigError("data.path", f"no TFRecord files match {path}")
    try:
        example = tf.train.Example.FromString(next(plain_records(files[0])))
    except Exception:  # noqa: BLE001 - missing, truncated or not TFRecord: one message
        raise ConfigError("data.path", f"cannot read TFRecords from {files[0]}") from None
    known = ", ".join(example.features.feature.keys())
    for key in ("image_feature", "labels"):
        feature = options[key]
        if feature is not None and feature not in example.features.feature:
            raise ConfigError(f"data.{key}", f"no feature {feature!r} in {files[0]} (has: {known})")
    if options["holdout"] and NAME_FEATURE not in example.features.feature:
        raise ConfigError(
            "data.holdout",
            f"splits records by their file name, but {files[0]} has no {NAME_FEATURE!r} feature "
            f"(has: {known}); write the records again with `stagegan prepare`",
        )
    if options["labels"] is not None and options["classes"] is None:
        raise ConfigError(
            "data.classes",
            "required with data.labels for source tfrecord: the class names, in label order "
            "(`stagegan prepare` prints them)",
        )
    return files


def _tfrecord_examples(options, held_out=False):
    """`{"x": uint8 image}` (and `"y"`: its label) per record, in file order: with
    `data.holdout`, the training records, or the held-out ones with `held_out`."""
    files = tfrecord_files(options)
    image_feature, label_feature = options["image_feature"], options["labels"]
    size, channels = options["size"], options["channels"]
    spec = {image_feature: tf.io.FixedLenFeature([], tf.string)}
    if label_feature is not None:
        spec[label_feature] = tf.io.FixedLenFeature([], tf.int64)
    records = _records(files, options, held_out)

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        example = {"x": decode_image(parsed[image_feature], size, channels)}
        if label_feature is not None:
            example["y"] = tf.cast(parsed[label_feature], tf.int32)
        return example

    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def _records(files, options, held_out=False):
    """The serialized records of `files`: with `data.holdout`, the training ones, or the
    held-out ones with `held_out`."""
    records = tf.data.TFRecordDataset(files)
    fraction = options["holdout"]
    if not fraction:
        return records
    spec = {NAME_FEATURE: tf.io.FixedLenFeature([], tf.string)}

    def keep(record):
        name = tf.io.parse_single_example(record, spec)[NAME_FEATURE]
        return tf.equal(held_out_mask(name[None], fraction)[0], held_out)

    return records.filter(keep)


def tfrecord_label_counts(options):
    """Images per class of a labelled TFRecord source (reads every training record's label)."""
    files = tfrecord_files(options)
    spec = {options["labels"]: tf.io.FixedLenFeature([], tf.int64)}
    labels = _records(files, options).map(
        lambda r: tf.io.parse_single_example(r, spec)[options["labels"]],
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    counts = np.zeros(len(options["classes"]), np.int64)
    for batch in labels.batch(4096):
        values = batch.numpy()
        if values.min() < 0 or values.max() >= len(counts):
            raise ConfigError(
                "data.labels",
                f"labels of {options['path']} hold {values.min()} to {values.max()}; "
                f"data.classes names {len(counts)} classes",
            )
        counts += np.bincount(values, minlength=len(counts))
    return counts


CACHES = ("none", "memory")
KERAS_IMAGES = 60000  # the largest training split of the keras datasets


def check_memory(options, batch_size, held=0, held_key="data.count"):
    """Refuse sizes whose arrays would not fit in this machine's memory, before any is
    allocated (`stagegan.config.memory.check_image_memory`): `held` images kept (`held_key`: a
    source in memory, a folder's cache), those drawn or decoded at once at start-up, and a
    batch as uint8 and float32 (the model's input).

    Raises:
        ConfigError: on `data.size` when the arrays would fit at an ordinary size, else on
            the key of the largest: `held_key`, or `batch_size`.
    """
    size, channels = options["size"], options["channels"]
    image = size * size * channels
    start = ("data.size", *source_of(options).start_up(held))
    parts = [
        (held_key, held * image, f"{format_count(held)} images of {format_count(size)} px held"),
        start,
        (
            "batch_size",
            5 * batch_size * image,
            f"a batch of {format_count(batch_size)} as uint8 and float32",
        ),
    ]
    received = {
        "data.size": size,
        "data.count": options["count"],
        "data.cache": options["cache"],
        "data.source": options["source"],
        "data.path": options["path"],
        "batch_size": batch_size,
    }
    check_image_memory(parts, size, "data.size", received)


def check_options(options):
    """Check the generic data options (types are checked by the task's defaults)."""
    source = options["source"]
    if source not in SOURCES:
        known = ", ".join(SOURCES)
        raise ConfigError("data.source", f"unknown source {source!r} (known: {known})")
    if options["size"] < 4:
        raise ConfigError("data.size", f"must be at least 4. Received: {options['size']}")
    if options["channels"] not in (1, 3):
        raise ConfigError(
            "data.channels", f"must be 1, 3 or auto. Received: {options['channels']!r}"
        )
    if options["count"] < 1:
        raise ConfigError("data.count", f"must be positive. Received: {options['count']}")
    if options["cache"] not in CACHES:
        raise ConfigError(
            "data.cache", f"must be one of {', '.join(CACHES)}. Received: {options['cache']!r}"
        )
    if options["cache"] != "none" and not SOURCES[source].cached:
        raise ConfigError(
            "data.cache", f"applies to source folder only, not {source!r} (set data.cache=none)"
        )
    check_holdout(options)
    _check_label_options(options)


def _check_label_options(options):
    source = options["source"]
    labels, classes = options["labels"], options["classes"]
    if labels is not None:
        if SOURCES[source].labels is None:
            raise ConfigError(
                "data.labels",
                f"source {source!r} has no labels (folder: 'subfolders' or 'clusters'; npz: "
                "an array name; tfrecord: a feature name)",
            )
        if not isinstance(labels, str) or not labels:
            raise ConfigError("data.labels", f"must be a name. Received: {labels!r}")
    count = options["clusters"]
    if count is not None:
        if SOURCES[source].labels != "subfolders" or labels != "clusters":
            raise ConfigError(
                "data.clusters",
                "counts the clusters of data.labels: clusters (source folder only)",
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError("data.clusters", f"must be a positive integer. Received: {count!r}")
    if classes is not None:
        if labels is None or SOURCES[source].labels == "subfolders":
            raise ConfigError(
                "data.classes",
                "names the classes of npz or tfrecord labels (a folder's are its subfolders)",
            )
        if (
            not isinstance(classes, list)
            or not classes
            or len(set(map(str, classes))) < len(classes)
        ):
            raise ConfigError(
                "data.classes", f"must be a list of distinct names. Received: {classes!r}"
            )


# Held-out split ----------------------------------------------------------------------------
#
# `data.holdout: f` holds out the images whose name's fingerprint falls in the lowest f of its
# range: a rule of the name alone (the file's path below `data.path`, which `stagegan prepare`
# keeps in its records' `name` feature), so a run, its resume, `sample`, `eval` and the TFRecords
# of the same folder all see the same split, and images added to the folder later never move
# an image from one side to the other. Each image is held out with probability f: 0.1 of 300
# images holds out about 30 (standard deviation 5).

HOLDOUT_SALT = "stagegan-holdout:"
HOLDOUT_SOURCES = ("folder", "tfrecord")
FINGERPRINT_BITS = 56  # of the 64-bit fingerprint: an int64 holds it without a sign


def held_out_mask(names, fraction):
    """Whether each of `names` (a string tensor [N], or a list of bytes) is held out by
    `data.holdout: fraction` (FarmHash's `tf.fingerprint`, stable across platforms and
    TensorFlow versions)."""
    names = tf.strings.join([HOLDOUT_SALT, tf.convert_to_tensor(names, tf.string)])
    digits = tf.cast(tf.fingerprint(names)[:, : FINGERPRINT_BITS // 8], tf.int64)
    value = tf.reduce_sum(digits * (256 ** tf.range(FINGERPRINT_BITS // 8, dtype=tf.int64)), 1)
    return value < int(fraction * 2**FINGERPRINT_BITS)


def relative_name(name, folder):
    """A file's name below `folder` as bytes, `/`-separated: what the split reads."""
    return os.fsencode(_relative(name, folder))


def split_listing(listing, fraction):
    """`(training, held_out)`: the `Listing`s of a folder split by `data.holdout` (held_out None
    when `fraction` is 0). Refuses a split that holds out no image, every image, or every image
    of a class."""
    if not fraction:
        return listing, None
    files = listing.files
    names = [_relative(f, listing.path) for f in files]
    held = held_out_mask([os.fsencode(name) for name in names], fraction).numpy()
    labels = None if listing.labels is None else listing.labels[~held]
    held_names = [name for name, h in zip(names, held, strict=True) if h]
    where = shown(listing.path)
    record = check_split(fraction, listing.classes, held_names, labels, len(files), where)

    def part(mask):
        labels = None if listing.labels is None else listing.labels[mask]
        chosen = [f for f, m in zip(files, mask, strict=True) if m]
        return Listing(
            listing.path, chosen, labels, listing.classes, listing.skipped, listing.unreadable
        )

    training, held_listing = part(~held), part(held)
    training.split = held_listing.split = record
    return training, held_listing


def check_split(fraction, classes, held_names, training_labels, count, where):
    """Refuse a `data.holdout: fraction` split of `count` images that holds out none, every
    one, or every image of a class (`training_labels`: the training images' classes, or None;
    `classes`: their names), and return the record a run writes of it (`holdout.json`;
    `held_names`: the held-out names, as text)."""
    held = len(held_names)
    if held in (0, count):
        which = "none" if held == 0 else "every one"
        raise ConfigError(
            "data.holdout",
            f"{fraction} holds out {which} of the {count:,} images of {where} (each is held "
            "out with that probability, by its name)",
        )
    if training_labels is not None and classes is not None:
        kept = np.bincount(training_labels, minlength=len(classes))
        if not kept.all():
            name = classes[int(np.argmin(kept))]
            raise ConfigError(
                "data.holdout",
                f"{fraction} holds out every image of class '{name}' of {where}, leaving it "
                "none to train on",
            )
    return {
        "holdout": fraction,
        "rule": f"held out: the fingerprint of the file name below data.path falls in the "
        f"lowest {fraction} of its range (stagegan.data.sources.held_out_mask)",
        # files, unreadable ones included (they are passed over when read)
        "training_files": count - held,
        "held_out_files": held,
        "files": list(held_names),
    }


def tfrecord_split(options):
    """The `check_split` record of TFRecords with `data.holdout` (reads every record's name
    and label, not its image)."""
    files = tfrecord_files(options)
    spec = {NAME_FEATURE: tf.io.FixedLenFeature([], tf.string)}
    if options["labels"] is not None:
        spec[options["labels"]] = tf.io.FixedLenFeature([], tf.int64)
    parsed = tf.data.TFRecordDataset(files).map(
        lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE
    )
    held_names, labels, count = [], [], 0
    try:
        for batch in parsed.batch(4096):
            held = held_out_mask(batch[NAME_FEATURE], options["holdout"]).numpy()
            names = batch[NAME_FEATURE].numpy()
            held_names += [n.decode("utf-8", "surrogateescape") for n in names[held]]
            if options["labels"] is not None:
                labels.append(batch[options["labels"]].numpy()[~held])
            count += len(names)
    except tf.errors.OpError as e:
        raise ConfigError(
            "data.holdout",
            f"cannot read every record's {NAME_FEATURE!r} in {options['path']}: {first_line(e)}",
        ) from None
    training_labels = np.concatenate(labels) if labels else None
    if training_labels is not None and len(training_labels):
        if training_labels.min() < 0 or training_labels.max() >= len(options["classes"]):
            training_labels = None  # out-of-range labels: `tfrecord_label_counts` says so
    fraction, classes = options["holdout"], options["classes"]
    return check_split(fraction, classes, held_names, training_labels, count, options["path"])


def check_holdout(options):
    """`data.holdout`: a number in [0, 1), for the sources that have no split of their own."""
    fraction = options["holdout"]
    if isinstance(fraction, bool) or not (isinstance(fraction, (int, float)) and 0 <= fraction < 1):
        raise ConfigError(
            "data.holdout",
            f"must be a share of the images in [0, 1), e.g. 0.1. Received: {fraction!r}",
        )
    if fraction and options["source"] not in HOLDOUT_SOURCES:
        own = " (it has a held-out split of its own)" if SOURCES[options["source"]].held_out else ""
        raise ConfigError(
            "data.holdout",
            f"applies to sources {' and '.join(HOLDOUT_SOURCES)}, not {options['source']!r}{own}",
        )


# Below this many images a GAN reproduces its training set rather than learning the data.
FEW_IMAGES = 500


def check_count(count, batch_size, path):
    """Refuse a dataset smaller than one batch; warn about one a GAN will memorise."""
    path = shown(path)
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


# Sources -----------------------------------------------------------------------------------------
#
# One class per `data.source`, in the registry `SOURCES` (as big_vision's `datasets/core.py`
# registers its datasets): what it can do (a held-out split, a stream, labels, a cache), its
# checks, how it loads its images, the real images samples and metrics choose from, and how an
# `ImageSource` serves its batches. A new source is one class here and `@register`.

SOURCES = {}  # data.source -> its Source class


def register(cls):
    """Add a `Source` class to the registry under each of its `names`."""
    for name in cls.names:
        SOURCES[name] = cls
    return cls


def source_of(options):
    """The `Source` of a data section (`options["source"]` must be registered)."""
    return SOURCES[options["source"]](options)


class Source:
    """One kind of `data.source`.

    Attributes (of the class):
        names: the `data.source` values it serves.
        held_out: `load(held_out=True)` gives images that training never sees.
        streamed: batches come from a checkpointed tf.data iterator (no random access: the
            reference images are the stream's first ones).
        labels: what `data.labels` names (`"subfolders"`, an array or a feature), or None
            when the source has no labels.
        cached: whether `data.cache` applies.
        features: the features `eval` uses when none are named (`stagegan.evaluation.evaluate`).
    """

    names = ()
    held_out = False
    streamed = False
    labels = None
    cached = False
    features = "inception"

    def __init__(self, options):
        self.options = options
        if options.get("holdout"):  # `data.holdout` gives a source a split it has not
            self.held_out = True

    def held(self):
        """`(images held in memory, known before loading them, the key of that count)`."""
        return 0, "data.path"

    def start_up(self, held):
        """`(bytes, what)` of the images decoded or drawn at once at start-up."""
        image = self.options["size"] ** 2 * self.options["channels"]
        return DECODE_AT_ONCE * image, f"up to {DECODE_AT_ONCE} decoded at a time"

    def load(self, seed, held_out=False):
        """All images, uint8 [N, H, W, C] (None for a stream)."""
        raise NotImplementedError

    def pool(self, seed, count):
        """The `Pool` that samples and metrics choose real images from."""
        images, labels = self.load(seed, held_out=self.held_out), None
        return in_memory_pool(images, labels, self.held_out)

    def training_pool(self, seed, count):
        """A `Pool` of the images training draws from (a stream: its first `count`)."""
        return in_memory_pool(self.load(seed), None, False)

    def open(self, target, seed, batch_size):
        """Prepare `target` (an `ImageSource`) to serve global batches of `batch_size`: an
        in-memory set (`target.hold`) or an iterator (`target.iterator`)."""
        check_memory(self.options, batch_size, *self.held())
        target.hold(self.load(seed), None)


def in_memory_pool(images, labels, held_out):
    take = lambda i: (images[i], None if labels is None else labels[i])
    return Pool(len(images), held_out, take)


@register
class ShapesSource(Source):
    """`shapes`: coloured shapes drawn from the seed (`draw_shapes`); the held-out split is
    drawn from another seed."""

    names = ("shapes",)
    held_out = True
    features = "shapes"

    def held(self):
        return self.options["count"], "data.count"

    def start_up(self, held):
        size = self.options["size"]
        drawn = min(held, shapes_chunk(size))
        return drawn * size * size * DRAW_BYTES, f"{format_count(drawn)} drawn at a time"

    def load(self, seed, held_out=False):
        o = self.options
        count = SHAPES_HELD_OUT if held_out else o["count"]
        return draw_shapes(count, o["size"], seed + (7919 if held_out else 0), o["channels"])


@register
class KerasSource(Source):
    """`mnist`, `fashion_mnist`, `cifar10`: Keras's download; the test split is held out."""

    names = ("mnist", "fashion_mnist", "cifar10")
    held_out = True

    def held(self):
        return KERAS_IMAGES, "data.source"

    def load(self, seed, held_out=False):
        return _load_keras(self.options["source"], held_out, self.options)


@register
class NpzSource(Source):
    """`npz`: one array of images (`data.key`) and optionally one of labels."""

    names = ("npz",)
    labels = "an array name"

    def load(self, seed, held_out=False):
        return _load_npz(self.options)[0]

    def pool(self, seed, count):
        return in_memory_pool(*_load_npz(self.options), False)

    def open(self, target, seed, batch_size):
        check_memory(self.options, batch_size, *self.held())
        images, labels = _load_npz(self.options)
        check_count(len(images), batch_size, self.options["path"])
        classes = None if labels is None else class_names(self.options, labels)
        target.hold(images, labels, classes)


@register
class FolderSource(Source):
    """`folder`: PNG and JPEG files, streamed (or cached with `data.cache: memory`), labelled
    by their subfolders or by clusters of their pixels."""

    names = ("folder",)
    labels = "subfolders"
    cached = True

    def listings(self, listing=None):
        """`(training, held_out)` listings of the folder (or of its `listing`); held_out is
        None without `data.holdout`."""
        return split_listing(listing or list_folder(self.options), self.options["holdout"])

    def load(self, seed, held_out=False):
        o = self.options
        training, held = self.listings()
        listing = held if held_out and held is not None else training
        images, ok = decode_files(listing.files, o["size"], o["channels"])
        if not ok.any():
            raise ConfigError("data.path", f"no readable image among the files of {listing.path}")
        return images[ok]

    def pool(self, seed, count):
        training, held = self.listings()
        return self._pool(training if held is None else held, held is not None)

    def training_pool(self, seed, count):
        return self._pool(self.listings()[0], False)

    def _pool(self, listing, held_out):
        o = self.options
        files, labels = np.array(listing.files), listing.labels

        def load(indices):  # decoded when chosen: memory does not grow with the folder
            images, ok = decode_files(files[indices], o["size"], o["channels"])
            return images[ok], None if labels is None else labels[indices][ok]

        def readable():
            count = 0
            for start in range(0, len(files), DECODE_AT_ONCE):
                count += int(decode_files(files[start : start + DECODE_AT_ONCE], o["size"],
                                          o["channels"])[1].sum())  # fmt: skip
            return count

        return Pool(len(files), held_out, load, readable)

    def open(self, target, seed, batch_size):
        o = self.options
        whole = list_folder(o)
        listing, held = self.listings(whole)
        check_count(len(listing.files), batch_size, listing.path)
        memory = o["cache"] == "memory"
        check_memory(o, batch_size, len(listing.files) if memory else 0, "data.cache")
        check_readable(listing, o)
        target.count = len(listing.files)
        target.set_classes(listing.classes, listing.labels)
        target.clusters = clusters_record(o, whole)  # held-out files too: they keep a class
        target.split = None if held is None else held.split
        cached = decode_files(listing.files, o["size"], o["channels"]) if memory else None
        target.iterator = iter(folder_dataset(listing, o, seed, batch_size, cached))


@register
class TfrecordSource(Source):
    """`tfrecord`: a seeded shuffle buffer over TFRecord files; labels are a feature."""

    names = ("tfrecord",)
    streamed = True
    labels = "a feature name"

    def load(self, seed, held_out=False):
        return None

    def pool(self, seed, count):
        held = self.held_out
        return in_memory_pool(*take_stream_images(self.options, count, held), held)

    def training_pool(self, seed, count):
        return in_memory_pool(*take_stream_images(self.options, count), False)

    def open(self, target, seed, batch_size):
        check_memory(self.options, batch_size, *self.held())
        if self.options["holdout"]:
            target.split = tfrecord_split(self.options)
            check_count(target.split["training_files"], batch_size, self.options["path"])
        target.iterator = iter(tfrecord_dataset(self.options, seed, batch_size))
        if self.options["labels"] is not None:
            target.classes = [str(name) for name in self.options["classes"]]


PEEK_IMAGES = 64  # images `decide_channels` looks at
GREY_TOLERANCE = 2  # grey: |R - G| and |G - B| at most this many levels in every pixel


def decide_channels(options):
    """`(channels, words)` for `data.channels: auto`: 1 when every one of up to
    `PEEK_IMAGES` images, spread evenly over the data (a folder's sorted listing, an npz's
    array, the first records of a TFRecord source), is grey (R = G = B within
    `GREY_TOLERANCE` levels), else 3. `words` say what was seen, for the plan and the log.

    Files are decoded with Pillow (matplotlib's own dependency), not TensorFlow: the task
    decides before the trainer sets up its devices, which a TensorFlow op would fix."""
    peek = {**options, "channels": 3, "holdout": 0.0}
    if peek["source"] == "folder" and peek["labels"] == "clusters":
        peek["labels"] = peek["clusters"] = None  # the decision needs no clusters
    check_options(peek)
    kind = source_of(peek)
    if isinstance(kind, FolderSource):
        files = list_folder(peek).files
        images = [_peek_file(files[i]) for i in _spread(len(files))]
    elif isinstance(kind, TfrecordSource):
        images = _peek_records(peek)
    else:
        images = kind.load(0)
        images = [images[i] for i in _spread(len(images))]
    images = [image for image in images if image is not None]
    if not images:
        return 3, "no readable image to look at: colour"
    coloured = sum(not _is_grey(image) for image in images)
    if coloured:
        return 3, f"{coloured} of the {len(images)} images looked at are in colour"
    return 1, f"all {len(images)} images looked at are grey"


def _spread(count):
    return np.unique(np.linspace(0, count - 1, min(count, PEEK_IMAGES)).astype(int))


def _is_grey(image):
    rgb = np.asarray(image, np.int16)
    if rgb.ndim < 3 or rgb.shape[-1] == 1:
        return True
    gaps = np.maximum(np.abs(rgb[..., 0] - rgb[..., 1]), np.abs(rgb[..., 1] - rgb[..., 2]))
    return int(gaps.max()) <= GREY_TOLERANCE


def _peek_bytes(raw):
    """An image's pixels (uint8, RGB) from its encoded bytes, or None when unreadable."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.draft("RGB", (64, 64))  # JPEG: decode at a reduced size
            return np.asarray(image.convert("RGB"))
    except (OSError, ValueError, SyntaxError):  # Pillow's errors for a broken file
        return None


def _peek_file(name):
    return _peek_bytes(read_regular_file(name) or b"")


def _peek_records(options):
    """The first `PEEK_IMAGES` images of a TFRecord source (`plain_records`: TensorFlow's
    devices are not started)."""
    images = []
    for path in tfrecord_files(options):
        try:
            for record in plain_records(path):
                feature = tf.train.Example.FromString(record).features.feature
                value = feature.get(options["image_feature"])
                if value is not None and value.bytes_list.value:
                    images.append(_peek_bytes(value.bytes_list.value[0]))
                if len(images) >= PEEK_IMAGES:
                    return images
        except Exception:  # noqa: BLE001 - unreadable or not an Example: the source's own
            continue  # reading says what is wrong
    return images


class ImageSource:
    """The images of a run, served one global batch at a time inside the step function:
    `{"x": uint8 images}` (`draw`: converted to float32 in [-1, 1] by each replica on its
    own device) or `{"x": float32 images in [-1, 1]}` (`batch`), with `"y"` (int32 class
    indices) for labelled data.

    `shapes`, `npz` and the keras datasets are held in memory (uint8) and each batch is drawn
    as random indices from the run's data stream (with replacement), so the data position is
    that stream's checkpointed state. `folder` and `tfrecord` stream through tf.data (a folder:
    a fresh seeded permutation of its files each epoch; TFRecords: a seeded shuffle buffer), and
    the iterator is checkpointed: start-up reads the file list only (and, with `data.labels:
    clusters`, a run's first start decodes every file once to cluster them), and memory does
    not grow with the number of images.

    Attributes:
        classes: class names (labelled data) or None.
        class_counts: images per class, or None (unlabelled, or a TFRecord source, whose
            counts `tfrecord_label_counts` reads).
        host: the host CPU device that holds an in-memory set and gathers its batches.
        reader: None, or the device that holds a stream's iterator (made in the caller's
            device scope otherwise): a `parameter_server` run reads on its chief.
    """

    def __init__(self, options, seed, batch_size, host="/CPU:0", reader=None):
        check_options(options)
        self.options, self.host = options, host
        self.images = self.labels = self.iterator = self.classes = self.class_counts = None
        self.count = None  # images, where known without reading a stream
        self.clusters = None  # `clusters_record` of `data.labels: clusters`
        self.split = None  # the `check_split` record of `data.holdout`
        self.kind = source_of(options)
        with contextlib.nullcontext() if reader is None else tf.device(reader):
            self.kind.open(self, seed, batch_size)

    def hold(self, images, labels, classes=None):
        """Keep an in-memory set (uint8 images, int labels or None) in host memory."""
        with tf.device(self.host):  # host memory, whatever device scope builds the task
            self.images, self.count = tf.constant(images), len(images)
            if labels is not None:
                self.set_classes(classes, labels)
                self.labels = tf.constant(labels)

    def set_classes(self, classes, labels):
        """Record the class names of labelled data and the images per class (a `Source`'s
        `open` calls it; nothing when `classes` is None)."""
        if classes is not None:
            self.classes = classes
            self.class_counts = np.bincount(labels, minlength=len(classes))

    def draw(self, batch_size, rng):
        """One global batch as read: `{"x": uint8}` and, with labels, `{"y": int32}`.

        An in-memory set is gathered on the host (`self.host`), where the images are: only
        the batch travels to the device that draws it. (TensorFlow has no GPU gather for
        uint8, and a gather placed there would copy the whole set to the host each step.)
        """
        if self.iterator is not None:
            # Not `next(iterator)`: traced without AutoGraph (as every stage step is), each
            # `next` counts towards tf.data's limit of 32 per iterator ("an unusually high
            # number of get_next() calls"), and a run of 9 stages traces 36 reads (two per
            # stage and variant). The stream repeats, so the optional always holds a batch.
            return self.iterator.get_next_as_optional().get_value()
        index = rng.uniform([batch_size], 0, self.images.shape[0], dtype=tf.int32)
        with tf.device(self.host):
            batch = {"x": tf.gather(self.images, index)}
            if self.labels is not None:
                batch["y"] = tf.gather(self.labels, index)
        return batch

    def batch(self, batch_size, rng):
        """One global batch: `{"x": float32 [-1, 1]}` and, with labels, `{"y": int32}`."""
        batch = self.draw(batch_size, rng)
        return {**batch, "x": pixels_to_float(batch["x"])}

    def trackables(self):
        return {"data_iterator": self.iterator} if self.iterator is not None else {}
