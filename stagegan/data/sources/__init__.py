"""Image data sources, one module each (`base.py` holds what they share, and each module
registers its `Source`). Each yields float32 images in [-1, 1], shape [H, W, C], and, with
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
import importlib
import pkgutil

import numpy as np
import tensorflow as tf

from stagegan.core.staging import pixels_to_float
from stagegan.data.images import read_regular_file
from stagegan.data.sources.base import (
    CACHES,
    DEFAULTS,
    IMAGE_SUFFIXES,
    PEEK_IMAGES,
    SOURCES,
    Pool,
    Source,
    check_holdout,
    check_memory,
    decode_files,
    held_out_mask,
    register,
    relative_name,
    source_of,
    warn_unreadable,
)
from stagegan.data.sources.folder import (
    CLUSTERED,
    RecordedClusters,
    list_folder,
    recorded_clusters,
    split_listing,
)
from stagegan.data.sources.shapes import draw_shapes
from stagegan.data.sources.tfrecord import (
    take_stream_images,
    tfrecord_files,
    tfrecord_label_counts,
)
from stagegan.errors import ConfigError

# What the rest of the package (and its tests) reads from `stagegan.data.sources`.
__all__ = [
    "CLUSTERED",
    "DEFAULTS",
    "IMAGE_SUFFIXES",
    "PEEK_IMAGES",
    "RecordedClusters",
    "SOURCES",
    "ImageSource",
    "Pool",
    "Source",
    "check_memory",
    "check_options",
    "decide_channels",
    "decode_files",
    "draw_shapes",
    "has_held_out",
    "held_out_mask",
    "list_folder",
    "load_images",
    "read_regular_file",
    "reference_pool",
    "register",
    "relative_name",
    "recorded_clusters",
    "source_of",
    "split_listing",
    "take_stream_images",
    "tfrecord_files",
    "tfrecord_label_counts",
    "warn_unreadable",
]

# Every module of this package registers its source (`@register`): a new source is one module.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


# Loading ---------------------------------------------------------------------------------------


def load_images(options, seed, held_out=False):
    """All images of a source as uint8 numpy [N, H, W, C], or None for `tfrecord` (a stream).

    `held_out` asks for the evaluation split: 10,000 images from a different seed for
    `shapes`, the test split for keras datasets, and the same files otherwise. A folder's
    unreadable files are left out, with a warning naming each.
    """
    return source_of(options).load(seed, held_out)


def has_held_out(source):
    """Whether `load_images(..., held_out=True)` gives images that training never sees."""
    return SOURCES[source].held_out


def reference_pool(options, seed, count, recorded=None):
    """The `Pool` behind `stagegan.data.real.RealImages`: the held-out split where the source
    has one; a folder's files (decoded when chosen, so memory does not grow with the folder);
    a stream's first `count` images. `recorded`: the run's own clusters, or None."""
    return source_of(options, recorded).pool(seed, count)


def check_options(options):
    """Check the generic data options (types are checked by the task's defaults)."""
    source = options["source"]
    if source not in SOURCES:
        known = ", ".join(sorted(SOURCES))
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
            having = "; ".join(f"{n}: {k.labels}" for n, k in sorted(SOURCES.items()) if k.labels)
            raise ConfigError(
                "data.labels",
                f"source {source!r} has no labels ({having})",
            )
        if not isinstance(labels, str) or not labels:
            raise ConfigError("data.labels", f"must be a name. Received: {labels!r}")
    count = options["clusters"]
    if count is not None:
        if not SOURCES[source].clusters or labels != "clusters":
            raise ConfigError(
                "data.clusters",
                "counts the clusters of data.labels: clusters (source "
                f"{' and '.join(n for n, k in sorted(SOURCES.items()) if k.clusters)} only)",
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError("data.clusters", f"must be a positive integer. Received: {count!r}")
    if classes is not None:
        named = [n for n, k in sorted(SOURCES.items()) if k.named_classes]
        if labels is None or not SOURCES[source].named_classes:
            raise ConfigError(
                "data.classes",
                f"names the classes of {' or '.join(named)} labels (a folder's are its subfolders)",
            )
        if (
            not isinstance(classes, list)
            or not classes
            or len(set(map(str, classes))) < len(classes)
        ):
            raise ConfigError(
                "data.classes", f"must be a list of distinct names. Received: {classes!r}"
            )


GREY_TOLERANCE = 2  # grey: |R - G| and |G - B| at most this many levels in every pixel


def decide_channels(options):
    """`(channels, words)` for `data.channels: auto`: 1 when every one of up to
    `PEEK_IMAGES` images, spread evenly over the data (a folder's sorted listing, an npz's
    array, the first records of a TFRecord source), is grey (R = G = B within
    `GREY_TOLERANCE` levels), else 3. `words` say what was seen, for the plan and the log.

    Files are decoded with Pillow (matplotlib's own dependency), not TensorFlow: the task
    decides before the trainer sets up its devices, which a TensorFlow op would fix."""
    peek = {**options, "channels": 3, "holdout": 0.0}
    if peek["labels"] == "clusters":
        peek["labels"] = peek["clusters"] = None  # the decision needs no clusters
    check_options(peek)
    images = source_of(peek).peek()
    images = [image for image in images if image is not None]
    if not images:
        return 3, "no readable image to look at: colour"
    coloured = sum(not _is_grey(image) for image in images)
    if coloured:
        return 3, f"{coloured} of the {len(images)} images looked at are in colour"
    return 1, f"all {len(images)} images looked at are grey"


def _is_grey(image):
    rgb = np.asarray(image, np.int16)
    if rgb.ndim < 3 or rgb.shape[-1] == 1:
        return True
    gaps = np.maximum(np.abs(rgb[..., 0] - rgb[..., 1]), np.abs(rgb[..., 1] - rgb[..., 2]))
    return int(gaps.max()) <= GREY_TOLERANCE


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
        recorded: the clusters the run found before (`RecordedClusters`: a resume, `sample`,
            `eval`), or None: a new run finds its own.
    """

    def __init__(
        self,
        options,
        seed,
        batch_size,
        host="/CPU:0",
        reader=None,
        recorded=None,
        unit=None,
        batch_key="batch_size",
    ):
        check_options(options)
        self.options, self.host = options, host
        self.unit = unit or batch_size  # a stream's batches: every step's batch is k of them
        self.batch_key = batch_key  # the key of `batch_size` (the largest a stage draws)
        self.images = self.labels = self.iterator = self.classes = self.class_counts = None
        self.count = None  # images, where known without reading a stream
        self.clusters = None  # `clusters_record` of `data.labels: clusters`
        self.split = None  # the `check_split` record of `data.holdout`
        self.kind = source_of(options, recorded)
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
        """One global batch as read: `{"x": uint8}` and, with labels, `{"y": int32}` (a
        stream: `batch_size` a multiple of `unit`, None for one unit).

        An in-memory set is gathered on the host (`self.host`), where the images are: only
        the batch travels to the device that draws it. (TensorFlow has no GPU gather for
        uint8, and a gather placed there would copy the whole set to the host each step.)
        """
        if self.iterator is not None:
            # Not `next(iterator)`: traced without AutoGraph (as every stage step is), each
            # `next` counts towards tf.data's limit of 32 per iterator ("an unusually high
            # number of get_next() calls"), and a run of 9 stages traces 36 reads (two per
            # stage and variant). The stream repeats, so the optional always holds a batch.
            # A stage whose batch is k units reads k of them, in order: the position in the
            # stream is the same whatever the stages' batches were.
            parts = [
                self.iterator.get_next_as_optional().get_value()
                for _ in range(1 if batch_size is None else batch_size // self.unit)
            ]
            if len(parts) == 1:
                return parts[0]
            return {key: tf.concat([part[key] for part in parts], 0) for key in parts[0]}
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
