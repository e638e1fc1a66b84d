"""`stagegan prepare`: a folder to TFRecord shards that a run reads as the folder's own pixels;
refusals and interruptions that leave nothing on disk; the command line."""

import io

import numpy as np
import pytest
import tensorflow as tf
import yaml
from clihelp import assert_user_error, inprocess
from PIL import Image

from stagegan.data import prepare as preparing
from stagegan.data import sources as data
from stagegan.errors import ConfigError, WriteError

# (class, name, height, width): other sizes and aspect ratios than the output's 8 x 8, one
# already 8 x 8 (stored as it is), a JPEG; and a file that is not an image.
IMAGES = [
    ("cat", "a.png", 20, 30),
    ("cat", "b.png", 8, 8),
    ("cat", "c.jpg", 17, 9),
    ("dog", "d.png", 40, 40),
    ("dog", "e.png", 11, 33),
    ("dog", "f.png", 13, 12),
]


def drawn_pixels():
    """The RGB pixels of each of IMAGES, as `write_folder` encodes them (random: every image,
    and every crop of one, is far from every other)."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _, _, h, w in IMAGES]


def write_folder(root):
    for (label, name, _, _), pixels in zip(IMAGES, drawn_pixels(), strict=True):
        (root / label).mkdir(parents=True, exist_ok=True)
        encode = tf.io.encode_jpeg if name.endswith(".jpg") else tf.io.encode_png
        (root / label / name).write_bytes(encode(tf.constant(pixels)).numpy())
    (root / "dog" / "broken.png").write_bytes(b"not a png")
    return root


def fitted_by_hand(pixels, size):
    """An independent reference of the fitting (`data.fit_image`) in numpy and PIL: the
    centred square crop, PIL's bilinear resize (antialiased when it shrinks, as
    `tf.image.resize(antialias=True)`), and grey as the rounded mean of R, G and B."""
    height, width = pixels.shape[:2]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    square = pixels[top : top + side, left : left + side]
    if side != size:
        square = np.asarray(Image.fromarray(square).resize((size, size), Image.BILINEAR))
    return np.round(square.astype(np.float64).mean(-1, keepdims=True))


def in_small_chunks(monkeypatch):
    """Decode 2 files at a time, so a shard is filled from several chunks."""
    monkeypatch.setattr(preparing, "_chunk_size", lambda size, channels: 2)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = write_folder(tmp_path_factory.mktemp("prepare") / "pets")
    output = folder.parent / "pets-8"
    with pytest.MonkeyPatch.context() as monkeypatch:
        in_small_chunks(monkeypatch)
        result = preparing.prepare(folder, output, size=8, channels=1, labels=True, shard_size=2)
    return folder, output, result


def test_shards_hold_the_folder_sources_pixels_and_labels(prepared):
    """The pixels in the shards are the written images' own, fitted as by hand (the PNGs from
    the pixels drawn, the JPEG as PIL decodes it), with each image's class index."""
    folder, _, result = prepared
    text = preparing.describe(result)
    options = {**data.DEFAULTS, **yaml.safe_load(text)["data"]}
    images, labels = data.take_stream_images(options, 100)
    assert images.shape == (len(IMAGES), 8, 8, 1) and images.dtype == np.uint8
    expected, tolerance = [], []
    for (label, name, _, _), pixels in zip(IMAGES, drawn_pixels(), strict=True):
        if name.endswith(".jpg"):  # lossy: decoded independently
            pixels = np.asarray(Image.open(folder / label / name).convert("RGB"))
        expected.append(fitted_by_hand(pixels, 8))
        # Rounding: PIL resizes in fixed point, TensorFlow in floats (at most 1 level apart,
        # measured). TensorFlow decodes JPEGs with libjpeg's fast integer IDCT, PIL with the
        # accurate one: at most 7 levels apart in this file's pixels, measured.
        tolerance.append(8 if name.endswith(".jpg") else 1)
    found = []
    for image, label in zip(images.astype(np.float64), labels, strict=True):
        # The records are shuffled: each is matched to the written image nearest to it.
        distances = [np.abs(image - e).max() for e in expected]
        nearest = int(np.argmin(distances))
        assert distances[nearest] <= tolerance[nearest], (IMAGES[nearest], distances)
        assert label == ["cat", "dog"].index(IMAGES[nearest][0]), IMAGES[nearest]
        found.append(nearest)
    assert sorted(found) == list(range(len(IMAGES)))  # each image once; broken.png skipped
    # Records are not written class by class (a shuffle buffer could not mix those).
    assert labels.tolist() != sorted(labels.tolist())
    source = data.ImageSource(options, seed=0, batch_size=2)  # a run accepts the block as it is
    assert source.classes == ["cat", "dog"]
    assert source.batch(2, None)["x"].shape == (2, 8, 8, 1)


def test_block_is_yaml_naming_the_shards_and_the_classes_in_order(prepared):
    _, output, result = prepared
    text = preparing.describe(result)
    assert yaml.safe_load(text) == {
        "data": {
            "source": "tfrecord",
            "path": f"{output}/*.tfrecord",
            "size": 8,
            "channels": 1,
            "labels": "label",
            "classes": ["cat", "dog"],
        }
    }
    lines = text.splitlines()
    assert lines[0] == f"# 6 images in 3 shards in {output}; 1 unreadable file skipped"
    assert lines[1] == "# per class: cat 3, dog 3"
    assert lines[4] == f"  path: {output}/*.tfrecord" and lines[-1] == "  classes: [cat, dog]"
    assert sorted(p.name for p in output.iterdir()) == [
        f"data-0000{i}-of-00003.tfrecord" for i in range(3)
    ]
    assert (result.images, result.shards, result.skipped, result.class_counts) == (6, 3, 1, (3, 3))


def test_class_names_are_quoted_where_yaml_needs_it():
    block = {"labels": "label", "classes": ["yes", "1", "a: b"]}
    result = preparing.Prepared("/d", block, images=3, shards=1, skipped=0, class_counts=(1, 1, 1))
    assert yaml.safe_load(preparing.describe(result))["data"]["classes"] == ["yes", "1", "a: b"]
    names = [f"c{k}" for k in range(25)]  # many classes: the range of the counts, not each
    many = preparing.Prepared("/d", {"classes": names}, 325, 1, 0, tuple(range(1, 26)))
    text = preparing.describe(many)
    assert text.splitlines()[1] == "# per class: 1 to 25 images"
    assert yaml.safe_load(text)["data"]["classes"] == names


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"output": "full"}, "--output", "already exists and is not empty"),
        ({"folder": "missing"}, "FOLDER", "no such folder"),
        ({"folder": "loose"}, "--labels", "outside any class subfolder"),
        ({"size": 3}, "--size", "at least 4"),
        ({"channels": 2}, "--channels", "1 or 3"),
        ({"shard_size": 0}, "--shard-size", "at least 1"),
    ],
)
def test_refusals_name_the_argument_and_leave_nothing(tmp_path, change, key, words):
    write_folder(tmp_path / "pets")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "x.png").write_bytes((tmp_path / "pets/cat/a.png").read_bytes())
    before = sorted(tmp_path.rglob("*"))
    arguments = {"folder": "pets", "output": "new/out", "size": 8, "channels": 3, "shard_size": 2}
    arguments.update(change)
    arguments.update(folder=tmp_path / arguments["folder"], output=tmp_path / arguments["output"])
    with pytest.raises(ConfigError) as refused:
        preparing.prepare(**arguments, labels=True)
    assert refused.value.key == key and words in refused.value.message
    assert sorted(tmp_path.rglob("*")) == before  # no output, partial folder or parent


@pytest.mark.parametrize(
    "failure, raised",
    [
        (KeyboardInterrupt(), KeyboardInterrupt),
        (OSError(28, "No space left on device"), WriteError),
    ],
)
def test_a_failed_prepare_leaves_no_output_partial_or_parent(
    tmp_path, monkeypatch, failure, raised
):
    folder = write_folder(tmp_path / "pets")
    in_small_chunks(monkeypatch)
    seen = []

    def fail_after_the_first_shard(done, total):
        partial = next(tmp_path.glob("new/out.partial-*"))
        seen.extend(p.name for p in partial.iterdir())
        if done >= 4:  # shard 0 (2 images) is complete, shard 1 open
            raise failure

    output = tmp_path / "new" / "out"
    with pytest.raises(raised) as stopped:
        preparing.prepare(folder, output, 8, shard_size=2, progress=fail_after_the_first_shard)
    if raised is WriteError:
        assert stopped.value.key == "--output" and "No space left" in stopped.value.message
    assert "data-00000.tfrecord" in seen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pets"]  # no new/, out, partial


def test_progress_lines_when_not_on_a_terminal():
    stream = io.StringIO()
    with preparing.ConsoleProgress(stream) as progress:
        for done in (3, 6, 16, 20):
            progress(done, 20)
    lines = stream.getvalue().splitlines()
    assert [line.split("  ")[1:3] for line in lines] == [
        ["3/20 images", "15%"],
        ["6/20 images", "30%"],
        ["16/20 images", "80%"],
        ["20/20 images", "100%"],
    ]
    assert lines[0].startswith("prepare  ") and "ETA " in lines[0] and "ETA" not in lines[-1]


def test_command_line(tmp_path):
    folder = write_folder(tmp_path / "pets")
    (tmp_path / "empty").mkdir()  # an empty output folder is filled
    result = inprocess(
        "prepare", str(folder / "dog"), "--output", str(tmp_path / "empty"), "--size", "16"
    )
    assert result.returncode == 0, result.stderr
    assert "\ndata:\n  source: tfrecord\n" in result.stdout  # a block, not {source: ...}
    assert yaml.safe_load(result.stdout)["data"] == {
        "source": "tfrecord",
        "path": f"{tmp_path / 'empty'}/*.tfrecord",
        "size": 16,
        "channels": 3,
    }
    assert "skipped unreadable image" in result.stderr and "Traceback" not in result.stderr
    assert [p.name for p in (tmp_path / "empty").iterdir()] == ["data-00000-of-00001.tfrecord"]
    refused = inprocess(
        "prepare", str(tmp_path / "nope"), "--output", str(tmp_path / "o"), "--size", "16"
    )
    assert_user_error(refused, "FOLDER: no such folder")
    assert not (tmp_path / "o").exists()


def test_sigterm_removes_the_partial_folder(tmp_path):
    """SIGTERM, as Ctrl-C, removes `OUTPUT.partial-<pid>` and ends with status 143."""
    import os
    import signal
    import sys
    import time

    import zygote
    from clihelp import ROOT

    folder = tmp_path / "many"  # 1,500 names of one 512 px image: seconds of decoding
    folder.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, (512, 512, 3), dtype=np.uint8)
    (folder / "0000.png").write_bytes(tf.io.encode_png(pixels).numpy())
    for i in range(1, 1500):
        os.link(folder / "0000.png", folder / f"{i:04d}.png")
    output = tmp_path / "out"
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "stagegan", "prepare", str(folder), "--output", str(output)]
    process = zygote.Process(
        [*command, "--size", "16"], env=environ, stdout=zygote.PIPE, stderr=zygote.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("out.partial-*")):
            assert process.poll() is None and time.monotonic() < deadline, "no partial folder"
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    lines = err.decode().strip().splitlines()
    assert process.returncode == 143, err.decode()
    assert lines[-1] == "stagegan: prepare stopped by SIGTERM; its partial output was removed"
    assert "Traceback" not in err.decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many"]  # no out, no partial
