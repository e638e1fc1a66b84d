"""Data sources on tiny fixtures written by the tests."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan.data import sources as data
from stagegan.errors import ConfigError


def options(**changes):
    return {**data.DEFAULTS, **changes}


def first_batch(opts, batch_size=4, seed=0):
    source = data.ImageSource(opts, seed, batch_size)
    return source.batch(batch_size, tf.random.Generator.from_seed(seed))["x"].numpy()


def test_shapes_are_seeded_and_structured():
    a, b = data.draw_shapes(6, 16, seed=3), data.draw_shapes(6, 16, seed=3)
    assert a.shape == (6, 16, 16, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, data.draw_shapes(6, 16, seed=4))
    # Backgrounds are gradients; shapes are flat colour. Most images hold a flat region of at
    # least 3% of the pixels (the smallest circle covers 4.5% of the image).
    many = data.draw_shapes(40, 32, seed=5).reshape(40, -1, 3)
    largest = [np.unique(img, axis=0, return_counts=True)[1].max() / len(img) for img in many]
    assert sum(share >= 0.03 for share in largest) >= 32
    held = data.load_images(options(count=10, size=16), seed=3, held_out=True)
    assert not np.array_equal(held[:6], a)


def test_the_shapes_held_out_pool_draws_only_the_images_chosen_and_the_same_bytes(monkeypatch):
    """The pool draws the images asked for, in the order asked, as the whole 10,000-image
    split drawn at once has them (drawn here by `load_images`), and draws each image once:
    none it was not asked for, none again."""
    from stagegan.data.sources import shapes

    opts = options(count=10, size=8, channels=1)
    whole = data.load_images(opts, seed=3, held_out=True)
    assert whole.shape == (10000, 8, 8, 1)
    drawn, draw_rows = [], shapes.draw_rows
    monkeypatch.setattr(
        shapes, "draw_rows", lambda p, rows, *a: (drawn.extend(rows), draw_rows(p, rows, *a))[1]
    )
    pool = data.reference_pool(opts, 3, 400)
    assert (pool.size, pool.held_out, pool.readable()) == (10000, True, 10000)
    assert drawn == []
    rows = np.random.default_rng(0).choice(10000, 2500, replace=False)  # chunks of 1,000
    images, labels = pool.load(rows)
    assert labels is None
    np.testing.assert_array_equal(images, whole[rows])
    assert sorted(drawn) == sorted(rows)
    again = np.concatenate([rows[:7], [3, 3, 9999]])  # drawn before, twice, and new
    np.testing.assert_array_equal(pool.load(again)[0], whole[again])
    assert sorted(drawn) == sorted({*rows, 3, 9999})


def test_pipeline_batches_scaled_to_minus_one_one():
    batch = first_batch(options(count=16, size=8))
    assert batch.shape == (4, 8, 8, 3) and batch.dtype == np.float32
    assert batch.min() >= -1.0 and batch.max() <= 1.0
    np.testing.assert_array_equal(batch, first_batch(options(count=16, size=8)))  # seeded


def test_npz_uint8_and_float(tmp_path):
    images = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    np.savez(tmp_path / "a.npz", images=images, other=np.zeros(3))
    loaded = data.load_images(options(source="npz", path=str(tmp_path / "a.npz"), size=4), 0)
    assert loaded.shape == (2, 4, 4, 3)
    np.testing.assert_array_equal(loaded[..., 0], images)  # grey repeated into RGB
    np.savez(tmp_path / "f.npz", pics=images.astype(np.float32) / 255.0)
    opts = options(source="npz", path=str(tmp_path / "f.npz"), key="pics", size=4, channels=1)
    np.testing.assert_array_equal(data.load_images(opts, 0)[..., 0], images)


@pytest.mark.parametrize(
    "array, key, words",
    [
        (np.zeros((2, 4, 4, 3)), "missing", "has no array 'missing' (has: images"),
        (np.zeros((4, 4)), "images", "[N, H, W]"),
        (np.full((2, 4, 4, 3), 2.0), "images", "[0, 1]; found 2 to 2"),
        (np.where(np.arange(96).reshape(2, 4, 4, 3) == 60, np.nan, 0.5), "images", "1 NaN or Inf"),
        (np.where(np.arange(96).reshape(2, 4, 4, 3) == 7, np.inf, 0.5), "images", "image 0"),
        (np.zeros((2, 4, 4, 3), np.int64), "images", "uint8 or float"),
        (np.zeros((0, 4, 4, 3), np.uint8), "images", "no images"),
    ],
)
def test_npz_errors(tmp_path, array, key, words):
    np.savez(tmp_path / "a.npz", images=array)
    with pytest.raises(ConfigError) as info:
        data.load_images(options(source="npz", path=str(tmp_path / "a.npz"), key=key), 0)
    assert words in info.value.message and info.value.key.startswith("data.")


def write_png(path, array):
    path.write_bytes(tf.io.encode_png(array).numpy())


def test_folder_reads_crops_and_resizes(tmp_path):
    wide = np.zeros((8, 16, 3), np.uint8)
    wide[:, 4:12] = 200  # the centre square survives the centre crop
    write_png(tmp_path / "a.png", wide)
    (tmp_path / "sub").mkdir()
    write_png(tmp_path / "sub" / "b.PNG", np.full((4, 4, 3), 50, np.uint8))
    (tmp_path / "notes.txt").write_text("not an image")
    images = data.load_images(options(source="folder", path=str(tmp_path), size=4), 0)
    assert images.shape == (2, 4, 4, 3)
    assert (images[0] == 200).all() and (images[1] == 50).all()


def test_folder_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        data.load_images(options(source="folder", path=str(tmp_path / "nope")), 0)
    with pytest.raises(ConfigError, match="no PNG or JPEG files"):
        data.load_images(options(source="folder", path=str(tmp_path)), 0)
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ConfigError, match="no readable image"):
        data.load_images(options(source="folder", path=str(tmp_path)), 0)
    with pytest.raises(ConfigError, match="none of 1 files probed"):
        data.ImageSource(options(source="folder", path=str(tmp_path)), 0, 1)
    with pytest.raises(ConfigError, match="data.path: required"):
        data.load_images(options(source="folder"), 0)


def test_folder_smaller_than_a_batch_is_an_error_and_a_small_one_a_warning(tmp_path, caplog):
    for i in range(5):
        write_png(tmp_path / f"{i}.png", np.full((6, 6, 1), 40 * i, np.uint8))
    opts = options(source="folder", path=str(tmp_path), size=4, channels=1)
    with pytest.raises(ConfigError) as info:
        data.ImageSource(opts, 0, 8)
    assert info.value.key == "data.path"
    assert "has 5 images, fewer than one batch (batch_size 8)" in info.value.message
    with caplog.at_level("WARNING", logger="stagegan"):
        source = data.ImageSource(opts, 0, 4)
    (record,) = caplog.records
    assert "only 5 images" in record.getMessage() and "memorises" in record.getMessage()
    assert "\n" not in record.getMessage()
    seen = np.concatenate([source.batch(4, None)["x"].numpy() for _ in range(3)])
    firsts = np.round((seen[:, 0, 0, 0] + 1) * 127.5).astype(int).tolist()
    # each epoch is a permutation of the 5 files: every image once, then again
    assert sorted(firsts[:5]) == sorted(firsts[5:10]) == [0, 40, 80, 120, 160]


def test_tfrecord(tmp_path):
    path = tmp_path / "d.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for value in (10, 20, 30, 40):
            png = tf.io.encode_png(np.full((6, 6, 3), value, np.uint8)).numpy()
            feature = {"img": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    opts = options(source="tfrecord", path=str(path), image_feature="img", size=4)
    batch = first_batch(opts)
    values = sorted(np.round((batch[:, 0, 0, 0] + 1) * 127.5).astype(int).tolist())
    assert values == [10, 20, 30, 40]
    with pytest.raises(ConfigError) as info:
        data.ImageSource(options(source="tfrecord", path=str(path)), 0, 2)
    assert info.value.key == "data.image_feature" and "(has: img)" in info.value.message


def test_keras_dataset_offline_is_one_clear_error(monkeypatch):
    def offline():
        raise OSError("URL fetch failure: no network")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", offline)
    with pytest.raises(ConfigError) as info:
        data.load_images(options(source="mnist", size=28, channels=1), 0)
    assert info.value.key == "data.source"
    assert "could not be downloaded" in info.value.message and "folder or npz" in info.value.message


def test_check_options():
    with pytest.raises(ConfigError, match="unknown source 'lsun'"):
        data.check_options(options(source="lsun"))
    with pytest.raises(ConfigError, match="data.channels"):
        data.check_options(options(channels=2))


# Hardening round 3: files that are not regular, names that are not UTF-8, sizes, classes.

SPECIAL_FILES = """
import json, os, sys
import numpy as np
from stagegan.data import sources as data
from stagegan.data import prepare

folder, out = sys.argv[1], sys.argv[2]
opts = {**data.DEFAULTS, "source": "folder", "path": folder, "size": 8}
listing = data.list_folder(opts)
special = [os.path.join(folder, name) for name in ("fifo.png", "null.png")]
source = data.ImageSource(opts, 0, 4)
batches = [source.batch(4, None)["x"].numpy() for _ in range(12)]  # 2 epochs and more
result = prepare.prepare(folder, out, 8)
print(json.dumps({
    "files": len(listing.files),
    "skipped": sorted(listing.skipped),
    "opened": data.decode_files(special, 8, 3)[1].tolist(),  # when opening: never blocks
    "read": [data.read_regular_file(name) for name in special] == [b"", b""],
    "values": sorted({int(v) for b in batches for v in np.round((b[:, 0, 0, 0] + 1) * 127.5)}),
    "prepared": [result.images, result.skipped],
}))
"""


def test_files_that_are_not_regular_are_skipped_never_opened(tmp_path):
    """A fifo named like an image blocked every reader forever: now it is left out when the
    folder is listed (and refused when opened), as an unreadable file is. Run in a process of
    its own with a timeout, so that a reader that blocks fails the test instead of hanging it."""
    import json
    import os
    import sys

    import zygote
    from clihelp import ROOT

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(20):
        write_png(folder / f"{i:02d}.png", np.full((8, 8, 3), 10 * i, np.uint8))
    os.mkfifo(folder / "fifo.png")
    (folder / "null.png").symlink_to(os.devnull)  # a device, behind a link
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = zygote.run(
        [sys.executable, "-c", SPECIAL_FILES, str(folder), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["files"] == 20
    assert report["skipped"] == [str(folder / "fifo.png"), str(folder / "null.png")]
    assert report["opened"] == [False, False] and report["read"]
    assert report["values"] == [10 * i for i in range(20)]
    assert report["prepared"] == [20, 2]
    assert "skipped unreadable image" in result.stderr and "not a regular file" in result.stderr


def test_names_that_are_not_utf8_train_and_print(tmp_path, caplog):
    """File and class folder names are bytes to the OS: a name that is not UTF-8 is read
    like any other, and printed with `\\xNN` escapes."""
    import os

    import yaml

    from stagegan.data import prepare as preparing

    folder = tmp_path / "images"
    root = os.fsencode(folder)
    os.mkdir(root)
    for name, value in ((b"bad\xff", 200), (b"ok", 40)):
        os.mkdir(os.path.join(root, name))
        for i in range(3):
            path = os.path.join(root, name, b"x\xfe%d.png" % i)
            with open(path, "wb") as f:
                f.write(tf.io.encode_png(np.full((8, 8, 3), value, np.uint8)).numpy())
    with open(os.path.join(root, b"ok", b"broken\xff.png"), "wb") as f:
        f.write(b"not a png")
    opts = options(source="folder", path=str(folder), size=4, labels="subfolders")
    with caplog.at_level("WARNING", logger="stagegan"):
        source = data.ImageSource(opts, 0, 2)
        batches = [source.batch(2, None) for _ in range(6)]  # every file, and some twice
    assert source.classes == ["bad\\xff", "ok"]
    assert source.class_counts.tolist() == [3, 4]
    pixels = {
        (int(y), int(round((x[0, 0, 0] + 1) * 127.5)))
        for batch in batches
        for x, y in zip(batch["x"].numpy(), batch["y"].numpy(), strict=True)
    }
    assert pixels == {(0, 200), (1, 40)}  # the bad\xff class, read and labelled
    (warning,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert f"{folder}/ok/broken\\xff.png" in warning
    warning.encode("ascii")  # prints on any terminal
    result = preparing.prepare(folder, tmp_path / "out", 4, labels=True)
    assert (result.images, result.skipped, result.class_counts) == (6, 1, (3, 3))
    text = preparing.describe(result)
    text.encode("ascii")
    assert yaml.safe_load(text)["data"]["classes"] == ["bad\\xff", "ok"]


def test_a_class_without_a_readable_image_is_refused(tmp_path):
    """As a class without files: the generator would be taught a class it never sees. A
    class whose first files are unreadable but a later one is not trains."""
    (tmp_path / "cat").mkdir()
    (tmp_path / "dog").mkdir()
    for i in range(4):
        write_png(tmp_path / "cat" / f"{i}.png", np.full((4, 4, 3), 9, np.uint8))
    for i in range(20):
        (tmp_path / "dog" / f"{i:02d}.png").write_bytes(b"not a png")
    opts = options(source="folder", path=str(tmp_path), size=4, labels="subfolders")
    with pytest.raises(ConfigError) as info:
        data.ImageSource(opts, 0, 2)
    assert info.value.key == "data.path"
    assert info.value.message == (
        f"class 'dog' has no readable image among its 20 files ({tmp_path}/dog)"
    )
    write_png(tmp_path / "dog" / "19.png", np.full((4, 4, 3), 9, np.uint8))  # the last file
    assert data.ImageSource(opts, 0, 2).class_counts.tolist() == [4, 20]


def test_sizes_that_cannot_fit_are_refused_before_anything_allocates(monkeypatch):
    from stagegan.config import memory
    from stagegan.data import prepare as preparing

    monkeypatch.setattr(memory, "physical_memory", lambda: 16 * 10**9)
    monkeypatch.setattr(memory, "cgroup_memory", lambda: None)
    monkeypatch.setattr(memory, "free_memory", lambda: None)
    cases = [
        ({"size": 1_000_000}, 32, "data.size", "1000000"),
        ({"count": 10**9}, 32, "data.count", "1000000000"),
        ({"size": 256, "count": 10**6}, 32, "data.size", "256"),  # would fit at 64 px
        ({}, 10**9, "batch_size", "1000000000"),
    ]
    for changes, batch_size, key, received in cases:
        with pytest.raises(ConfigError) as info:
            data.ImageSource(options(**changes), 0, batch_size)
        assert info.value.key == key, info.value
        assert info.value.message.startswith("would need about ")
        assert info.value.message.endswith(f"this machine has 16.0 GB. Received: {received}")
    data.check_memory(options(size=1024, count=1000), 32, 1000)  # 1024 px: 3.8 GB, fits
    with pytest.raises(ConfigError) as info:
        preparing.check_arguments(".", "unused", size=100_000)
    assert str(info.value) == (
        "--size: would need about 480.0 GB of memory (16 images of 100000 px decoded at a "
        "time); this machine has 16.0 GB. Received: 100000"
    )
    monkeypatch.setattr(memory, "physical_memory", lambda: 2 * 10**9)
    preparing.check_arguments(".", "unused", size=1024)  # 21 images at a time: 66 MB


def test_the_memory_limit_is_the_least_of_physical_cgroup_and_free(monkeypatch):
    """Hardening round 4: a process in a cgroup, or on a busy machine, may use less than the
    physical memory; the message says which limit it met."""
    from stagegan.config import memory

    monkeypatch.setattr(memory, "physical_memory", lambda: 16 * 10**9)
    monkeypatch.setattr(memory, "cgroup_memory", lambda: 4 * 10**9)
    monkeypatch.setattr(memory, "free_memory", lambda: 9 * 10**9)
    assert memory.memory_limit() == (4 * 10**9, "this process may use 4.0 GB (its cgroup's limit)")
    monkeypatch.setattr(memory, "cgroup_memory", lambda: None)
    assert memory.memory_limit() == (9 * 10**9, "9.0 GB is free")
    with pytest.raises(ConfigError) as info:  # 10 GB fits the machine, not what is free
        memory.check_memory([("data.count", 10 * 10**9, "ten")], {"data.count": 1})
    assert str(info.value) == (
        "data.count: would need about 10.0 GB of memory (ten); 9.0 GB is free. Received: 1"
    )
    # This machine's own readings: numbers, or None where the OS does not say.
    for reading in (memory.cgroup_memory(), memory.free_memory(), memory.physical_memory()):
        assert reading is None or reading > 0


def test_a_new_source_is_one_registered_class():
    """The registry: a class with its names and its images is a `data.source` that batches,
    reference pools and the checks all know."""

    class Stripes(data.Source):
        names = ("stripes",)

        def __init__(self, options):  # a source's own constructor takes its options only
            super().__init__(options)

        def load(self, seed, held_out=False):
            images = np.zeros((6, 4, 4, 1), np.uint8)
            images[:, ::2] = 255  # white even rows
            return images

    data.register(Stripes)
    try:
        opts = options(source="stripes", size=4, channels=1)
        data.check_options(opts)
        batch = data.ImageSource(opts, 0, 2).batch(2, tf.random.Generator.from_seed(0))
        np.testing.assert_array_equal(batch["x"].numpy()[0, :, 0, 0], [1.0, -1.0, 1.0, -1.0])
        assert data.reference_pool(opts, 0, 3).size == 6
        assert not data.has_held_out("stripes")
        with pytest.raises(ConfigError, match="data.labels"):
            data.check_options({**opts, "labels": "y"})  # a source without labels
    finally:
        del data.SOURCES["stripes"]
    with pytest.raises(ConfigError, match="unknown source 'stripes'"):
        data.check_options(opts)


def test_what_a_source_declares_is_what_the_option_checks_allow_and_say():
    """Labels, named classes and a holdout split are a source's declared capabilities: a
    source that declares them is allowed the options, and the errors of the others name it."""

    class Rows(data.Source):
        names = ("rows",)
        labels = "a column name"
        named_classes = True
        splits = True

    data.register(Rows)
    try:
        opts = options(source="rows", size=4, channels=1)
        data.check_options({**opts, "labels": "y", "classes": ["a", "b"], "holdout": 0.2})
        with pytest.raises(ConfigError, match="data.clusters: .*source folder only"):
            data.check_options({**opts, "labels": "y", "clusters": 3})
        shapes = options(source="shapes", size=4, channels=1)
        with pytest.raises(ConfigError, match="rows: a column name") as caught:
            data.check_options({**shapes, "labels": "y"})
        assert "(folder: 'subfolders' or 'clusters'; npz: an array name; rows" in str(caught.value)
        with pytest.raises(ConfigError, match="applies to sources folder and rows and tfrecord"):
            data.check_options({**shapes, "holdout": 0.2})
        folder = options(source="folder", size=4, channels=1, labels="subfolders")
        with pytest.raises(ConfigError, match="names the classes of npz or rows or tfrecord"):
            data.check_options({**folder, "classes": ["a"]})
    finally:
        del data.SOURCES["rows"]


def test_each_source_is_a_module_of_its_own():
    """A new source is one new module: every module of the package but `base` registers
    exactly the sources it defines."""
    import importlib
    import pkgutil

    package = importlib.import_module("stagegan.data.sources")
    found = {}
    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"stagegan.data.sources.{module.name}")
        kinds = {
            k
            for k in vars(loaded).values()
            if isinstance(k, type)
            and k.__module__ == loaded.__name__
            and issubclass(k, data.Source)
        }
        found[module.name] = sorted(n for k in kinds for n in k.names)
    assert found == {
        "base": [],
        "folder": ["folder"],
        "keras_sets": ["cifar10", "fashion_mnist", "mnist"],
        "npz": ["npz"],
        "shapes": ["shapes"],
        "tfrecord": ["tfrecord"],
    }
    assert sorted(data.SOURCES) == sorted(n for names in found.values() for n in names)


def test_a_streamed_folder_can_be_read_in_more_traces_than_tf_data_allows_nexts(tmp_path):
    """Each stage step traces its reads without AutoGraph; tf.data refuses a 33rd graph-mode
    `next` on one iterator (a 9-stage progressive run hit it). Forty traces, each its batch."""
    for i in range(6):
        write_png(tmp_path / f"{i}.png", np.full((4, 4, 3), 40 * i, np.uint8))
    source = data.ImageSource(
        options(source="folder", path=str(tmp_path), size=4, cache="none"), 0, 2
    )
    assert source.iterator is not None
    seen = []
    for _ in range(40):
        read = tf.function(lambda: source.draw(2, None)["x"], autograph=False)
        seen.append(read().numpy()[:, 0, 0, 0])
    values = np.concatenate(seen[:3])
    assert sorted(values) == [0, 40, 80, 120, 160, 200]  # one epoch: every image once
