"""`data.source: tfrecord`: encoded images in TFRecord files (`stagegan prepare` writes them),
through a seeded shuffle buffer; labels are a feature."""

import glob

import numpy as np
import tensorflow as tf

from stagegan.data.images import peek_bytes
from stagegan.data.records import NAME_FEATURE  # each record's file name below the folder
from stagegan.data.sources.base import (
    PEEK_IMAGES,
    Source,
    _batched,
    _require_path,
    check_count,
    check_memory,
    check_split,
    decode_checked,
    held_out_mask,
    in_memory_pool,
    register,
)
from stagegan.errors import ConfigError, first_line


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
        example = {"x": decode_checked(parsed[image_feature], size, channels)}
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


@register
class TfrecordSource(Source):
    """`tfrecord`: a seeded shuffle buffer over TFRecord files; labels are a feature."""

    names = ("tfrecord",)
    streamed = True
    iterated = True
    labels = "a feature name"
    named_classes = True
    splits = True

    def load(self, seed, held_out=False):
        return None

    def pool(self, seed, count):
        held = self.held_out
        return in_memory_pool(*take_stream_images(self.options, count, held), held)

    def training_pool(self, seed, count):
        return in_memory_pool(*take_stream_images(self.options, count), False)

    def open(self, target, seed, batch_size):
        check_memory(self.options, batch_size, *self.held(), target.batch_key)
        if self.options["holdout"]:
            target.split = tfrecord_split(self.options)
            check_count(
                target.split["training_files"], batch_size, self.options["path"], target.batch_key
            )
        target.iterator = iter(tfrecord_dataset(self.options, seed, target.unit))
        if self.options["labels"] is not None:
            target.classes = [str(name) for name in self.options["classes"]]

    def peek(self):
        return peek_records(self.options)


def peek_records(options):
    """The first `PEEK_IMAGES` images of a TFRecord source (`plain_records`: TensorFlow's
    devices are not started)."""
    images = []
    for path in tfrecord_files(options):
        try:
            for record in plain_records(path):
                feature = tf.train.Example.FromString(record).features.feature
                value = feature.get(options["image_feature"])
                if value is not None and value.bytes_list.value:
                    images.append(peek_bytes(value.bytes_list.value[0], options["size"]))
                if len(images) >= PEEK_IMAGES:
                    return images
        except Exception:  # noqa: BLE001 - unreadable or not an Example: the source's own
            continue  # reading says what is wrong
    return images
