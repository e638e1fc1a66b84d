"""What the data sources share: the `Source` interface and its registry (`SOURCES`,
`@register`), image decoding and fitting, labels, the held-out split rule, and the memory and
count checks. A new source is a module of this package with one `@register`ed `Source`."""

import functools
import logging
import os

import numpy as np
import tensorflow as tf

from stagegan.config.memory import check_image_memory, format_count
from stagegan.data.images import checked_bytes, read_image_file, refusal
from stagegan.errors import ConfigError

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
    """Encoded PNG/JPEG/GIF/BMP bytes, passed by `stagegan.data.images.check_header` already,
    -> uint8 [size, size, channels] (see `fit_image`)."""
    image = tf.io.decode_image(raw, channels=3, expand_animations=False)
    return fit_image(image, size, channels)


def decode_checked(raw, size, channels):
    """`decode_image` of encoded bytes not read through `read_image_file` (a TFRecord's):
    their header is checked first, and a refused image fails to decode as a broken one."""
    check = functools.partial(checked_bytes, size=size)
    raw = tf.numpy_function(check, [raw], tf.string, stateful=False)
    return decode_image(tf.ensure_shape(raw, []), size, channels)


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


def _require_path(options, key="data.path"):
    path = options["path"]
    if not path:
        raise ConfigError(key, f"required for source {options['source']!r}")
    return os.path.expanduser(str(path))


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def shown(path):
    """A file name as text that prints anywhere: bytes that are not UTF-8 (which Python keeps
    as surrogates in a str) become `\\xNN`. Other names are unchanged."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _relative(name, folder):
    """A file's name below `folder` as text, `/`-separated (bytes that are not UTF-8 kept as
    surrogates, so `os.fsencode` gives them back)."""
    name = os.path.relpath(name, folder).replace(os.sep, "/")
    return os.fsencode(name).decode("utf-8", "surrogateescape")


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


DECODE_AT_ONCE = 64  # at most this many decoded at a time at start-up (without a cache)


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
    # Without tf.data's graph rewrites: they cost a start-up decode of a few files more than the
    # decoding (0.13 s against 0.05), and gain nothing on 2,000 files (1.0 to 1.4 s either way).
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    decoded = decoded.ignore_errors().batch(256).with_options(options)
    for batch in decoded:  # a failed file leaves its position out
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
    return _file_reader(size, channels)(tf.gather(paths, index))


@functools.cache
def _file_reader(size, channels):
    """A file's name -> its image, decoded and fitted: one function per size and channels,
    traced once per process. Each `tf.data` pipeline that maps it calls the traced function
    instead of tracing the reading, decoding and fitting again (a tenth of a second per
    pipeline: every start-up decodes twice, a sample or an evaluation of a run once more)."""

    read_bytes = functools.partial(read_image_file, size=size)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
    def read(path):
        raw = tf.numpy_function(read_bytes, [path], tf.string, stateful=False)
        return decode_image(tf.ensure_shape(raw, []), size, channels)

    return read


SKIPPED = set()  # the unreadable files met by this process


def warn_unreadable(name, reason=None, key="data.path"):
    """Warn of an image file that cannot be read, once per file and process (`key`: the
    config key or flag that named its folder; `reason`: why, else the reader's refusal, if
    it refused the file)."""
    if name not in SKIPPED:  # once per file and process, not once per epoch
        SKIPPED.add(name)
        reason = reason or refusal(name)
        log.warning(
            "%s: skipped unreadable image %s%s (%d skipped so far)",
            key,
            shown(name),
            f", {reason}" if reason else "",
            len(SKIPPED),
        )


CACHES = ("none", "memory")


def check_memory(options, batch_size, held=0, held_key="data.count", batch_key="batch_size"):
    """Refuse sizes whose arrays would not fit in this machine's memory, before any is
    allocated (`stagegan.config.memory.check_image_memory`): `held` images kept (`held_key`: a
    source in memory, a folder's cache), those drawn or decoded at once at start-up, and a
    batch as uint8 and float32 (the model's input).

    Raises:
        ConfigError: on `data.size` when the arrays would fit at an ordinary size, else on
            the key of the largest: `held_key`, or `batch_key` (the key of the largest batch
            a stage draws: `batch_size` or `stages[i].batch_size`).
    """
    size, channels = options["size"], options["channels"]
    image = size * size * channels
    start = ("data.size", *source_of(options).start_up(held))
    parts = [
        (held_key, held * image, f"{format_count(held)} images of {format_count(size)} px held"),
        start,
        (
            batch_key,
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
        batch_key: batch_size,
    }
    check_image_memory(parts, size, "data.size", received)


# Held-out split ----------------------------------------------------------------------------
#
# `data.holdout: f` holds out the images whose name's fingerprint falls in the lowest f of its
# range: a rule of the name alone (the file's path below `data.path`, which `stagegan prepare`
# keeps in its records' `name` feature), so a run, its resume, `sample`, `eval` and the TFRecords
# of the same folder all see the same split, and images added to the folder later never move
# an image from one side to the other. Each image is held out with probability f: 0.1 of 300
# images holds out about 30 (standard deviation 5).

HOLDOUT_SALT = "stagegan-holdout:"
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


def check_holdout(options):
    """`data.holdout`: a number in [0, 1), for the sources that have no split of their own."""
    fraction = options["holdout"]
    if isinstance(fraction, bool) or not (isinstance(fraction, (int, float)) and 0 <= fraction < 1):
        raise ConfigError(
            "data.holdout",
            f"must be a share of the images in [0, 1), e.g. 0.1. Received: {fraction!r}",
        )
    splitting = [name for name, kind in sorted(SOURCES.items()) if kind.splits]
    if fraction and options["source"] not in splitting:
        own = " (it has a held-out split of its own)" if SOURCES[options["source"]].held_out else ""
        raise ConfigError(
            "data.holdout",
            f"applies to sources {' and '.join(splitting)}, not {options['source']!r}{own}",
        )


# Below this many images a GAN reproduces its training set rather than learning the data.
FEW_IMAGES = 500


def check_count(count, batch_size, path, batch_key="batch_size"):
    """Refuse a dataset smaller than one batch; warn about one a GAN will memorise."""
    path = shown(path)
    if count < batch_size:
        raise ConfigError(
            "data.path",
            f"{path} has {count} image{'s' if count != 1 else ''}, fewer than one batch "
            f"({batch_key} {batch_size})",
        )
    if count < FEW_IMAGES:
        log.warning(
            "data.path: %s has only %d images; a GAN trained on fewer than a few hundred "
            "images memorises them",
            path,
            count,
            extra={"before_training": True},  # advice for a run about to train, not a reader
        )


# Sources -----------------------------------------------------------------------------------------
#
# One class per `data.source`, in the registry `SOURCES` (as big_vision's `datasets/core.py`
# registers its datasets): what it can do (a held-out split, a stream, labels, a cache), its
# checks, how it loads its images, the real images samples and metrics choose from, and how an
# `ImageSource` serves its batches. A new source is a module of this package, with its class
# `@register`ed (the package imports every module).

SOURCES = {}  # data.source -> its Source class


def register(cls):
    """Add a `Source` class to the registry under each of its `names`."""
    for name in cls.names:
        SOURCES[name] = cls
    return cls


def source_of(options, recorded=None):
    """The `Source` of a data section (`options["source"]` must be registered); `recorded`:
    the run's own clusters (`folder.RecordedClusters`), or None."""
    kind = SOURCES[options["source"]](options)
    kind.recorded = recorded  # after construction: a subclass's own __init__ takes options only
    return kind


class Source:
    """One kind of `data.source`.

    Attributes (of the class):
        names: the `data.source` values it serves.
        held_out: `load(held_out=True)` gives images that training never sees.
        streamed: batches come from a checkpointed tf.data iterator (no random access: the
            reference images are the stream's first ones).
        iterated: training's batches come from a checkpointed tf.data iterator (`streamed`
            sources, and a folder, which is listed but read as a stream).
        labels: words on what `data.labels` names (for errors), or None: the source has no
            labels.
        clusters: `data.labels: clusters` (and `data.clusters`) apply.
        named_classes: `data.classes` names the classes of its labels.
        splits: `data.holdout` applies (a split by file name, `held_out_mask`).
        cached: whether `data.cache` applies.
        features: the features `eval` uses when none are named (`stagegan.evaluation.evaluate`).
    """

    names = ()
    held_out = False
    streamed = False
    iterated = False
    labels = None
    clusters = False
    named_classes = False
    splits = False
    cached = False
    features = "inception"

    recorded = None  # a run's own clusters (`folder.RecordedClusters`), set by `source_of`

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
        check_memory(self.options, batch_size, *self.held(), target.batch_key)
        target.hold(self.load(seed), None)

    def peek(self):
        """Up to `PEEK_IMAGES` images spread over the data (uint8 RGB, or None where one does
        not decode), for `decide_channels`: read before TensorFlow's devices are set up."""
        images = self.load(0)
        return [images[i] for i in spread(len(images))]


def in_memory_pool(images, labels, held_out):
    take = lambda i: (images[i], None if labels is None else labels[i])
    return Pool(len(images), held_out, take)


PEEK_IMAGES = 64  # images `decide_channels` looks at


def spread(count):
    """Up to `PEEK_IMAGES` indices spread evenly over `count` items."""
    return np.unique(np.linspace(0, count - 1, min(count, PEEK_IMAGES)).astype(int))
