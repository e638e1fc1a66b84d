"""`data.holdout`: a split of a folder (and of prepare's TFRecords of it) by file name that
training never reads, the same wherever the run is read."""

import numpy as np
import pytest
import tensorflow as tf
from clihelp import assert_user_error, inprocess

from stagegan.data import sources
from stagegan.data.prepare import prepare
from stagegan.errors import ConfigError

COUNT = 60  # images, each one grey level: 4 * index (an image is known by its value)


def grey_folder(path, count=COUNT, classes=None):
    for index in range(count):
        folder = path if classes is None else path / classes[index % len(classes)]
        folder.mkdir(parents=True, exist_ok=True)
        image = np.full((16, 16, 1), 4 * index, np.uint8)
        (folder / f"img{index:03d}.png").write_bytes(tf.io.encode_png(image).numpy())
    return path


def options(path, **more):
    base = {"source": "folder", "path": str(path), "size": 16, "channels": 1, "holdout": 0.25}
    return {**sources.DEFAULTS, **base, **more}


def values(images):
    return sorted({int(image.ravel()[0]) // 4 for image in images})


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return grey_folder(tmp_path_factory.mktemp("holdout") / "images")


def test_the_split_of_a_name_never_changes():
    # The promise behind resume, sample, eval and prepare's records agreeing: the split is a
    # function of the name alone. These indices are the split of 2026-11 (FarmHash
    # fingerprints): a change here moves users' images between training and held-out.
    names = [f"img{i:03d}.png".encode() for i in range(40)]
    held = sources.held_out_mask(names, 0.25).numpy()
    assert np.nonzero(held)[0].tolist() == [2, 6, 13, 16, 18, 21, 24, 34, 36]
    # More names (a folder that grew) leave the first ones where they were.
    more = sources.held_out_mask(names + [f"new{i}.png".encode() for i in range(500)], 0.25)
    np.testing.assert_array_equal(more.numpy()[:40], held)


def test_each_name_is_held_out_with_the_asked_probability():
    names = [f"photo-{i}.jpg".encode() for i in range(20000)]
    for fraction in (0.05, 0.1, 0.5):
        share = sources.held_out_mask(names, fraction).numpy().mean()
        spread = np.sqrt(fraction * (1 - fraction) / len(names))
        assert abs(share - fraction) < 4 * spread, (fraction, share)


def test_training_and_held_out_images_are_disjoint_and_cover_the_folder(folder):
    held = values(sources.load_images(options(folder), 0, held_out=True))
    training = values(sources.load_images(options(folder), 0))
    expected = sources.held_out_mask([f"img{i:03d}.png".encode() for i in range(COUNT)], 0.25)
    assert held == np.nonzero(expected.numpy())[0].tolist()
    assert sorted(held + training) == list(range(COUNT))


def test_training_never_draws_a_held_out_image_and_eval_draws_only_those(folder):
    held = set(values(sources.load_images(options(folder), 0, held_out=True)))
    for cache in ("none", "memory"):
        source = sources.ImageSource(options(folder, cache=cache), seed=3, batch_size=5)
        assert source.count == COUNT - len(held)
        drawn = set()
        for _ in range(40):  # 200 draws: every training image, most several times
            drawn |= set(values(source.draw(5, None)["x"].numpy()))
        assert drawn == set(range(COUNT)) - held
        assert source.split["held_out_files"] == len(held) == len(source.split["files"])
    pool = sources.reference_pool(options(folder), 0, 10)
    assert pool.held_out and pool.size == len(held)
    assert set(values(pool.load(np.arange(pool.size))[0])) == held


def test_prepares_records_split_as_the_folder_does(folder, tmp_path):
    prepare(str(folder), str(tmp_path / "records"), size=16, channels=1, shard_size=25)
    records = options(tmp_path / "records" / "*.tfrecord", source="tfrecord")
    held = values(sources.load_images(options(folder), 0, held_out=True))
    pool = sources.reference_pool(records, 0, COUNT)
    assert pool.held_out and values(pool.load(np.arange(pool.size))[0]) == held
    stream = sources.ImageSource(records, seed=1, batch_size=COUNT - len(held))
    first = values(stream.draw(None, None)["x"].numpy())  # one pass over the records
    assert first == sorted(set(range(COUNT)) - set(held))
    assert stream.split["held_out_files"] == len(held)
    assert [int(name[3:6]) for name in sorted(stream.split["files"])] == held
    with pytest.raises(ConfigError, match="data.holdout: 0.001 holds out none of the 60"):
        sources.ImageSource({**records, "holdout": 0.001}, seed=1, batch_size=4)


def test_each_class_keeps_images_to_train_on(tmp_path):
    grey_folder(tmp_path / "images", classes=("a", "b", "c"))
    listing = sources.list_folder(options(tmp_path / "images", labels="subfolders"))
    training, held = sources.split_listing(listing, 0.25)
    assert len(training.files) + len(held.files) == COUNT
    assert training.classes == held.classes == ["a", "b", "c"]
    for part in (training, held):  # labels travel with their files
        for name, label in zip(part.files, part.labels, strict=True):
            assert f"/{'abc'[label]}/" in name


@pytest.mark.parametrize(
    "setting, expected",
    [
        ("data.holdout=.nan", "data.holdout: must be a finite number"),
        ("data.holdout=1", "data.holdout: must be a share of the images in [0, 1)"),
        ("data.holdout=-0.1", "data.holdout: must be a share of the images in [0, 1)"),
        ("data.holdout=half", "data.holdout"),
        ("data.holdout=0.001", "data.holdout: 0.001 holds out none of the 60 images"),
    ],
)
def test_bad_holdouts_are_refused_before_a_run_folder_exists(folder, tmp_path, setting, expected):
    run = tmp_path / "run"
    result = inprocess(
        "train", "--config", "dcgan_folder", "--run-dir", run,
        "--set", f"data.path={folder}", "--set", "data.size=32", "--set", setting,
    )  # fmt: skip
    assert_user_error(result, expected)
    assert not run.exists()


def test_a_source_with_its_own_split_refuses_holdout(tmp_path):
    result = inprocess(
        "plan", "--config", "wgan_gp_shapes", "--set", "data.holdout=0.1",
    )  # fmt: skip
    assert_user_error(result, "data.holdout: applies to sources folder and tfrecord, not 'shapes'")


def test_records_without_names_are_refused(tmp_path):
    path = tmp_path / "old.tfrecord"
    png = tf.io.encode_png(np.zeros((4, 4, 1), np.uint8)).numpy()
    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(example.SerializeToString())
    with pytest.raises(ConfigError, match="data.holdout: splits records by their file"):
        sources.tfrecord_files(options(path, source="tfrecord"))


def test_evals_default_count_passes_over_an_unreadable_held_out_file(tmp_path):
    folder = grey_folder(tmp_path / "images")
    held = values(sources.load_images(options(folder), 0, held_out=True))
    (folder / f"img{held[0]:03d}.png").write_bytes(b"not a png")
    pool = sources.reference_pool(options(folder), 0, 10)
    assert (pool.size, pool.readable()) == (len(held), len(held) - 1)
    from stagegan.tasks.base import RandomStreams
    from stagegan.tasks.unconditional import Unconditional

    for name in held[1:]:  # no held-out image left to evaluate on
        (folder / f"img{name:03d}.png").write_bytes(b"not a png")
    task = Unconditional({"data": options(folder, size=32)}, RandomStreams(0))
    with pytest.raises(ConfigError, match=f"data.holdout: 0 of the {len(held)} held-out"):
        task.real.default_count(10000)  # the count an evaluation takes unless told
