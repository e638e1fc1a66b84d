"""`stagegan prepare`: an image folder to sharded TFRecords, for `data.source: tfrecord`.

    result = prepare("photos/", "photos-64/", size=64, labels=True)
    print(describe(result))  # a summary and the `data:` block for a run config

Each record holds one image fitted to `size` exactly as the `folder` source fits it (centre
crop, antialiased resize, channels; `data.decode_files`), stored as PNG in the feature
`image`, so a run reads the same pixels from the shards as from the folder; the file's name
below the folder in the feature `name` (so `data.holdout` splits the records as it splits the
folder); with labels, the class index in the int64 feature `label` (classes: the sorted
subfolder names). Records go
into the shards in a fixed random order (seed 0), not class by class: the `tfrecord` source
reads its shards in order through a shuffle buffer, which cannot mix classes that lie further
apart than the buffer holds.

Everything is written into `OUTPUT.partial-<pid>` and renamed to OUTPUT only when complete,
so an interrupted prepare never leaves shards that a run would read (Ctrl-C and SIGTERM remove
the partial folder). Imports TensorFlow only in `prepare`, so the CLI refuses bad arguments
(`check_arguments`) before that slow import.
"""

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import yaml

from stagegan.config.memory import check_image_memory
from stagegan.config.yamlfile import ConfigDumper
from stagegan.data.records import IMAGE_FEATURE, LABEL_FEATURE, NAME_FEATURE
from stagegan.errors import ConfigError, Interrupted, WriteError, shown
from stagegan.runfolder.dirs import check_new_folder
from stagegan.runfolder.logs import BAR_INTERVAL, format_duration

log = logging.getLogger("stagegan")

SHARD_SIZE = 2000  # images per shard: 2,000 64 px PNGs are about 20 MB
ORDER_SEED = 0
DECODE_BYTES = 64 << 20  # decoded pixels held at a time: memory does not grow with the folder


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What `prepare` wrote.

    Attributes:
        output: the absolute path of the folder of shards.
        data: the `data:` options that read them: source, path (a glob), size, channels, and
            for labelled data labels (the feature name) and classes (the names, in index order).
        images: how many records were written.
        shards: how many shard files hold them.
        skipped: how many unreadable files were left out (each was warned of), those that
            are not regular files included.
        class_counts: images per class, in class order, or None without labels.
    """

    output: str
    data: dict
    images: int
    shards: int
    skipped: int
    class_counts: tuple | None = None


def check_arguments(folder, output, size, channels=3, shard_size=SHARD_SIZE):
    """Refuse bad arguments of `prepare` before anything is read or written.

    Raises:
        ConfigError: naming the argument (`FOLDER`, `--output`, `--size`, `--channels`,
            `--shard-size`): no such folder, an output that exists and is not empty, or one
            that cannot be created, size < 4, channels not 1 or 3, shard size < 1, a size
            whose images, decoded `_chunk_size` at a time, would not fit in memory.
    """
    if size < 4:
        raise ConfigError("--size", f"must be at least 4. Received: {size}")
    if channels not in (1, 3):
        raise ConfigError("--channels", f"must be 1 or 3. Received: {channels}")
    chunk = _chunk_size(size, channels)
    decoded = (
        "--size",
        chunk * size * size * channels,
        f"{chunk} images of {shown(size)} px decoded at a time",
    )
    check_image_memory([decoded], size, "--size", {"--size": size})
    if shard_size < 1:
        raise ConfigError("--shard-size", f"must be at least 1. Received: {shard_size}")
    if not os.path.isdir(folder):
        raise ConfigError("FOLDER", f"no such folder: {folder}")
    check_new_folder(output, "--output", "prepare never overwrites (pick another folder)")


def prepare(folder, output, size, channels=3, labels=False, shard_size=SHARD_SIZE, progress=None):
    """Convert the PNG and JPEG files below `folder` into TFRecord shards in `output`.

    Files are decoded in parallel, `DECODE_BYTES` of pixels at a time; unreadable ones are
    warned of, left out and counted. Shards are named `data-00000-of-00004.tfrecord` and hold
    `shard_size` records each (the last one the rest). The shards are written into the sibling
    folder `OUTPUT.partial-<pid>`, renamed to `output` when all are complete; an exception,
    Ctrl-C or SIGTERM removes it (a killed process leaves it, and never `output`).

    Args:
        folder: the image folder; with `labels`, one subfolder per class.
        output: the folder to write: must not exist, or be empty.
        size: the side of the square images written, in pixels.
        channels: 1 (grey) or 3 (RGB).
        labels: take classes from the subfolders (`data.labels: subfolders`).
        shard_size: records per shard file.
        progress: None, or `progress(done, total)`, called with the files done so far (e.g. a
            `ConsoleProgress`).

    Returns:
        A `Prepared` record (`describe` prints it).

    Raises:
        ConfigError: bad arguments (`check_arguments`), a folder without images or, with
            `labels`, with images outside the class subfolders; no readable image, or a class
            without one.
        WriteError: a shard could not be written (a full disk, permissions).
        Interrupted: SIGTERM (status 143), after the partial folder was removed.
    """
    check_arguments(folder, output, size, channels, shard_size)
    import tensorflow as tf

    from stagegan.data import sources as data

    options = {**data.DEFAULTS, "source": "folder", "path": folder, "size": size}
    options.update(channels=channels, labels="subfolders" if labels else None)
    try:
        listing = data.list_folder(options, key="FOLDER")
    except ConfigError as e:  # name this command's arguments, not config keys
        raise ConfigError(ARGUMENTS.get(e.key, e.key), e.message) from None
    output = os.path.abspath(output)
    partial = f"{output}.partial-{os.getpid()}"
    made = _make_parents(output)
    try:
        with _terminate_raises():
            os.mkdir(partial)
            written = _write_shards(listing, partial, size, channels, shard_size, progress)
            _check_terminated()
            os.replace(partial, output)  # onto a missing or empty folder: all shards or none
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        for parent in made:
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        if isinstance(e, (OSError, tf.errors.OpError)):
            reason = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
            raise WriteError("--output", f"cannot write {output}: {reason}") from None
        raise
    path = os.path.join(output, "*.tfrecord")
    data_block = {"source": "tfrecord", "path": path, "size": size, "channels": channels}
    if listing.classes is not None:
        data_block.update(labels=LABEL_FEATURE, classes=list(listing.classes))
    return Prepared(output, data_block, *written)


ARGUMENTS = {"data.path": "FOLDER", "data.labels": "--labels"}


_TERMINATED = []  # SIGTERM received while `_terminate_raises` is active


def _check_terminated():
    """Raise `Interrupted` if SIGTERM came (checked between chunks too: a handler's exception
    raised inside TensorFlow's own Python code may not get out of it)."""
    if _TERMINATED:
        raise Interrupted("prepare stopped by SIGTERM; its partial output was removed", 143)


@contextlib.contextmanager
def _terminate_raises():
    """While active (in the main thread), SIGTERM raises `Interrupted` (status 143), as
    Ctrl-C raises KeyboardInterrupt, so `prepare` removes its partial folder either way. The
    handler before it is back for a second signal, and on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, previous)
        _TERMINATED.append(signum)  # in case TensorFlow code swallows the exception
        _check_terminated()

    previous = signal.getsignal(signal.SIGTERM)
    previous = signal.SIG_DFL if previous is None else previous
    _TERMINATED.clear()
    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _make_parents(path):
    """Create the missing folders above `path`; returns them, deepest first."""
    missing, parent = [], os.path.dirname(path)
    while not os.path.exists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for folder in reversed(missing):
        os.mkdir(folder)
    return missing


def _write_shards(listing, folder, size, channels, shard_size, progress):
    """Decode, fit, encode and write every file of `listing` into shards in `folder`; returns
    the `Prepared` fields images, shards, skipped and class_counts."""
    from stagegan.data.sources import decode_files, relative_name

    files = np.array(listing.files)
    order = np.random.default_rng(ORDER_SEED).permutation(len(files))
    chunk = _chunk_size(size, channels)
    counts = None if listing.labels is None else np.zeros(len(listing.classes), np.int64)
    skipped = len(listing.skipped)  # not regular files, left out of the listing
    with _Shards(folder, shard_size) as shards:
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            images, ok = decode_files(files[part], size, channels, key="FOLDER")
            skipped += int((~ok).sum())
            found = part[ok]
            classes = [None] * len(found) if counts is None else listing.labels[found]
            names = [relative_name(f, listing.path) for f in files[found]]
            for png, label, name in zip(_encode_png(images[ok]), classes, names, strict=True):
                shards.write(_example(png, label, name))
            if counts is not None:
                counts += np.bincount(classes, minlength=len(counts))
            if progress is not None:
                progress(start + len(part), len(files))
            _check_terminated()
        if shards.count == 0:
            raise ConfigError("FOLDER", f"none of the {len(files):,} image files could be read")
        if counts is not None and not counts.all():
            name = listing.classes[int(np.argmin(counts))]
            raise ConfigError("FOLDER", f"class '{name}' has no readable image")
        shards.finish()
    class_counts = None if counts is None else tuple(int(c) for c in counts)
    return shards.count, len(shards.paths), skipped, class_counts


def _chunk_size(size, channels):
    """Files decoded at a time: `DECODE_BYTES` of pixels, at least 16 (`decode_files` reads
    16 files in parallel), at most 1024."""
    return int(np.clip(DECODE_BYTES // (size * size * channels), 16, 1024))


def _encode_png(images):
    """The PNG bytes of each uint8 image [N, H, W, C], encoded in parallel."""
    import tensorflow as tf

    if len(images) == 0:
        return []
    encoded = tf.data.Dataset.from_tensor_slices(images).map(
        tf.io.encode_png, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return list(next(iter(encoded.batch(len(images)))).numpy())


def _example(png, label, name):
    """One serialized `tf.train.Example`: the PNG bytes, the file's name below the folder
    (`data.holdout` splits by it) and, when given, the class index."""
    import tensorflow as tf

    as_bytes = lambda value: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    feature = {IMAGE_FEATURE: as_bytes(png), NAME_FEATURE: as_bytes(name)}
    if label is not None:
        feature[LABEL_FEATURE] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def shard_name(index, count):
    """`data-00002-of-00010.tfrecord`: sorted by name, the shards are in order."""
    return f"data-{index:05d}-of-{count:05d}.tfrecord"


class _Shards:
    """TFRecord files of `shard_size` records each, in `folder`. They are written as
    `data-00000.tfrecord`, ..., synced, and given their `shard_name` (which holds the count,
    known only at the end: unreadable files make it smaller than planned) by `finish`."""

    def __init__(self, folder, shard_size):
        self.folder, self.shard_size = folder, shard_size
        self.paths, self.writer, self.count = [], None, 0

    def write(self, record):
        import tensorflow as tf

        if self.count % self.shard_size == 0:
            self._close()
            self.paths.append(os.path.join(self.folder, f"data-{len(self.paths):05d}.tfrecord"))
            self.writer = tf.io.TFRecordWriter(self.paths[-1])
        self.writer.write(record)
        self.count += 1

    def _close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            with open(self.paths[-1], "rb") as f:  # on disk before the folder is renamed
                os.fsync(f.fileno())

    def finish(self):
        self._close()
        for index, path in enumerate(self.paths):
            os.rename(path, os.path.join(self.folder, shard_name(index, len(self.paths))))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.writer is not None:
            self.writer.close()


def describe(result):
    """What `stagegan prepare` prints: a summary as YAML comments, then the `data:` block for
    a run config. The whole text parses as YAML; class names are quoted where YAML needs it.

        # 1,998 images in 1 shard in /data/pets-32; 2 unreadable files skipped
        # per class: cat 1,000, dog 998
        data:
          source: tfrecord
          path: /data/pets-32/*.tfrecord
          size: 32
          channels: 1
          labels: label
          classes: [cat, dog]
    """
    written = f"{_count(result.images, 'image')} in {_count(result.shards, 'shard')}"
    summary = f"# {written} in {result.output}"
    if result.skipped:
        summary += f"; {_count(result.skipped, 'unreadable file')} skipped"
    lines = [" ".join(summary.splitlines())]
    counts = result.class_counts
    if counts is not None and len(counts) > LISTED_CLASSES:
        lines.append(f"# per class: {min(counts):,} to {_count(max(counts), 'image')}")
    elif counts is not None:
        names = (" ".join(str(name).splitlines()) for name in result.data["classes"])
        per_class = ", ".join(
            f"{name} {count:,}" for name, count in zip(names, counts, strict=True)
        )
        lines.append(f"# per class: {per_class}")
    block = yaml.dump({"data": result.data}, Dumper=_FlowLists, sort_keys=False)
    return "\n".join(lines) + "\n" + block.rstrip("\n")


class _FlowLists(ConfigDumper):
    """Mappings as blocks, lists on one line: `classes: [cat, dog]`; strings that would read
    back as numbers quoted (a class folder named `1e5`), as in a run's `config.yaml`."""


_FlowLists.add_representer(
    list,
    lambda dumper, items: dumper.represent_sequence(
        yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, items, flow_style=True
    ),
)


LISTED_CLASSES = 20  # beyond this, the summary gives the range of the counts


def _count(number, noun):
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


class ConsoleProgress:
    """`prepare`'s `progress`: on a terminal, one line redrawn in place (at most every
    `BAR_INTERVAL` seconds), ended at the last file:

        prepare  12,000/20,000 images  60%  ETA 0:00:12

    elsewhere (a log file) the same as a plain line at every tenth done. Use it as a context
    manager: on leaving, an open line is ended, and warnings in between start on a new line.

    Args:
        stream: where it writes (stderr: stdout holds `describe`'s block).
    """

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.redraw = self.stream.isatty()
        self.started = time.perf_counter()
        self.drawn, self.tenths = 0.0, 0
        self.open = False  # a redrawn line without its newline is on screen

    def __call__(self, done, total):
        elapsed = time.perf_counter() - self.started
        finished = done >= total
        if finished:
            when = format_duration(elapsed)
        else:
            pace = elapsed / done if done else float("nan")
            when = "ETA " + format_duration(pace * (total - done))
        text = f"prepare  {done:,}/{total:,} images  {100 * done // total}%  {when}"
        if self.redraw:
            if finished or elapsed - self.drawn >= BAR_INTERVAL:
                self.drawn = elapsed
                self.stream.write("\r" + text + ("\n" if finished else ""))
                self.open = not finished
        elif 10 * done // total > self.tenths:
            self.tenths = 10 * done // total
            self.stream.write(text + "\n")
        self.stream.flush()

    def _end_line(self, record):
        if self.open:
            self.stream.write("\n")
            self.open = False
        return True

    def __enter__(self):
        log.addFilter(self._end_line)
        return self

    def __exit__(self, *exc):
        self._end_line(None)
        log.removeFilter(self._end_line)
