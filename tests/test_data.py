"""Data sources on tiny fixtures written by the tests."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from stagegan import data
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
