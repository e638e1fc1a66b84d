"""`data.source: folder`: PNG and JPEG files below `data.path`, streamed (or cached), labelled
by their subfolders or by clusters of their pixels (`stagegan.data.clusters`), split by
`data.holdout`."""

import logging
import os

import numpy as np
import tensorflow as tf

from stagegan.data import clusters
from stagegan.data.images import peek_file
from stagegan.data.sources.base import (
    DECODE_AT_ONCE,
    DEFAULTS,
    IMAGE_SUFFIXES,
    Pool,
    Source,
    _batched,
    _path_tensor,
    _read_image,
    _relative,
    _require_path,
    check_count,
    check_memory,
    check_split,
    decode_files,
    held_out_mask,
    register,
    shown,
    spread,
    warn_unreadable,
)
from stagegan.errors import ConfigError

log = logging.getLogger("stagegan")


class Listing:
    """A folder's image files in a fixed order, with class indices and names when
    `data.labels` is `subfolders` or `clusters` (else None), and the names that looked like
    images but are not regular files (`skipped`). With `clusters`, `unreadable` holds the
    files left out because they do not decode."""

    def __init__(self, path, files, labels=None, classes=None, skipped=(), unreadable=()):
        self.path, self.files, self.labels, self.classes = path, files, labels, classes
        self.skipped, self.unreadable = list(skipped), list(unreadable)
        self.split = None  # with `data.holdout`: the record of the split (`split_listing`)


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


def _not_regular(others, key="data.path"):
    """Warn of each file in `others` (skipped at scan time), once per process, naming `key`
    (the config key or flag that named the folder)."""
    for name in others:
        warn_unreadable(name, "not a regular file", key=key)
    return others


def _none_regular(others):
    """What an error adds when the only image names are files that are not regular."""
    if not others:
        return ""
    more = f" and {len(others) - 1:,} more" if len(others) > 1 else ""
    return f" (skipped, not regular files: {shown(others[0])}{more})"


def list_folder(options, recorded=None, key="data.path"):
    """The `Listing` of a folder source: every PNG/JPEG file below `data.path`, sorted; with
    `data.labels: subfolders`, the sorted subfolder names are the classes and each class's
    files are those below its subfolder. Reads names only, never an image, except with
    `data.labels: clusters` (`_clustered`: each file's cluster, the readable files only;
    `recorded`: a run's own clusters, `RecordedClusters`, reused rather than found again).
    `key`: the config key or flag that named the folder (`data.path`, `--input`), which its
    errors and warnings name."""
    path = _require_path(options, key)
    if not os.path.isdir(path):
        raise ConfigError(key, f"no such folder: {shown(path)}")
    if options["labels"] in (None, "clusters"):
        files, others = _image_files(path)
        if not files:
            raise ConfigError(
                key, f"no PNG or JPEG files under {shown(path)}{_none_regular(others)}"
            )
        if options["labels"] == "clusters":
            return _clustered(path, files, options, _not_regular(others), recorded)
        return Listing(path, files, skipped=_not_regular(others, key))
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
        skipped += _not_regular(others, key)
    # The names of classes print anywhere (logs, plan, eval, prepare's YAML block).
    classes = [shown(name) for name in folders]
    return Listing(path, files, np.array(labels, np.int32), classes, skipped)


# A memo of this process's clusterings (k-means over every file is the slow part), by
# (`_recorded_key`, the files with their sizes and times) -> (files, labels, unreadable).
CLUSTERED = {}
CLUSTER_BYTES = 64 << 20  # decoded images held at a time while clustering a folder


def _clustered(path, files, options, skipped, recorded=None):
    """The `Listing` of `data.labels: clusters` (`stagegan.data.clusters`): the readable files
    of `files`, grouped by cluster (largest first; by name within one), each cluster a class.
    A run's own clusters (`recorded`, of these options) are reused; else every file is
    decoded, as the run reads it (`data.size`, `data.channels`), and clustered, once per
    process."""
    count = options["clusters"] or clusters.DEFAULT_CLUSTERS
    size, channels = options["size"], options["channels"]
    if recorded is not None and recorded.key == _recorded_key(options):
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


class RecordedClusters:
    """The clusters a run found (its `clusters_record`), checked: `key` (`_recorded_key` of
    the data they are of), `labels` ({file name below the folder: cluster}), `unreadable`
    (the names left out because they did not decode)."""

    def __init__(self, key, labels, unreadable):
        self.key, self.labels, self.unreadable = key, labels, unreadable


def recorded_clusters(record, data=None):
    """The `RecordedClusters` of a run's `clusters_record`, which a resumed run, `sample` and
    `eval` pass to its source (`list_folder(..., recorded)`) to see the classes it trained
    on, whatever was added to its folder since, and without decoding it. `data`: the run's
    data options, which the record must match.

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
    return RecordedClusters(key, dict(zip(files, labels, strict=True)), set(unreadable))


def _recorded_key(options):
    return (
        os.path.realpath(os.path.expanduser(str(options["path"]))),
        options["size"],
        options["channels"],
        options["clusters"] or clusters.DEFAULT_CLUSTERS,
    )


def clusters_record(options, listing):
    """What `recorded_clusters` reads back, JSON-able: the data options and each file's cluster
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


def _recorded_listing(path, files, recorded, skipped):
    """The listing of a run's recorded clusters over today's `files`: files added since are
    left out, files gone are missing from their clusters (both warned of); a cluster left
    with no file is refused."""
    recorded, unreadable = recorded.labels, recorded.unreadable
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


PROBE = 16  # files decoded at start-up to refuse a folder of unreadable files early


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


@register
class FolderSource(Source):
    """`folder`: PNG and JPEG files, streamed (or cached with `data.cache: memory`), labelled
    by their subfolders or by clusters of their pixels."""

    names = ("folder",)
    iterated = True
    labels = "'subfolders' or 'clusters'"
    clusters = True
    splits = True
    cached = True

    def listings(self, listing=None):
        """`(training, held_out)` listings of the folder (or of its `listing`); held_out is
        None without `data.holdout`."""
        whole = listing or list_folder(self.options, self.recorded)
        return split_listing(whole, self.options["holdout"])

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
        whole = list_folder(o, self.recorded)
        listing, held = self.listings(whole)
        check_count(len(listing.files), batch_size, listing.path, target.batch_key)
        memory = o["cache"] == "memory"
        check_memory(
            o, batch_size, len(listing.files) if memory else 0, "data.cache", target.batch_key
        )
        check_readable(listing, o)
        target.count = len(listing.files)
        target.set_classes(listing.classes, listing.labels)
        target.clusters = clusters_record(o, whole)  # held-out files too: they keep a class
        target.split = None if held is None else held.split
        cached = decode_files(listing.files, o["size"], o["channels"]) if memory else None
        target.iterator = iter(folder_dataset(listing, o, seed, target.unit, cached))

    def peek(self):
        files = list_folder(self.options).files
        return [peek_file(files[i], self.options["size"]) for i in spread(len(files))]
