"""`data.channels: auto`: a folder of colour images trains in colour, a grey one in grey; the
plan and the first log line say what was decided, the run's config.yaml records it, and
deciding starts no TensorFlow device (the towers are set up after it)."""

import numpy as np
import yaml
from clihelp import inprocess
from PIL import Image

from stagegan.data.sources import decide_channels

COMMON = [
    "--set", "data.size=28", "--set", "model.latent_dim=2", "--set", "model.width=2",
    "--set", "batch_size=4", "--set", "stages[0].steps=1", "--set", "stages[1].steps=1",
    "--set", "samples=null", "--set", "log={every: 1, tensorboard: false}",
]  # fmt: skip


def folder(path, colour_every=0, count=20):
    """`count` PNGs, grey, or every `colour_every`-th one tinted (saved as RGB either way)."""
    path.mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        grey = rng.integers(0, 256, (12, 12), np.uint8)
        rgb = np.stack([grey] * 3, axis=-1)
        if colour_every and i % colour_every == 0:
            rgb[..., 0] = np.minimum(255, rgb[..., 0].astype(int) + 40)
        Image.fromarray(rgb).save(path / f"{i:02d}.png")
    return str(path)


def options(path):
    return {"source": "folder", "path": path, "size": 8, "channels": "auto", "count": 1,
            "cache": "none", "labels": None, "classes": None, "clusters": None, "holdout": 0.0,
            "key": "images", "image_feature": "image"}  # fmt: skip


def test_grey_pixels_in_rgb_files_are_grey_and_one_tinted_image_is_colour(tmp_path):
    assert decide_channels(options(folder(tmp_path / "grey"))) == (
        1, "all 20 images looked at are grey"
    )  # fmt: skip
    assert decide_channels(options(folder(tmp_path / "one", colour_every=19))) == (
        3, "2 of the 20 images looked at are in colour"
    )  # fmt: skip


def test_a_colour_folder_trains_in_colour_on_two_towers_and_the_run_records_it(tmp_path):
    images = folder(tmp_path / "images", colour_every=3)
    run = tmp_path / "run"
    result = inprocess(
        "train", "--config", "dcgan_clusters", "--run-dir", str(run),
        "--set", f"data.path={images}", "--set", "data.clusters=2",
        "--set", "devices.towers=2", *COMMON,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = result.stdout + result.stderr
    assert "data.channels auto: 3 (7 of the 20 images looked at are in colour)" in said
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["data"]["channels"] == 3


def test_plan_says_grey_and_a_bad_value_names_the_key(tmp_path):
    images = folder(tmp_path / "images")
    result = inprocess("plan", "--config", "dcgan_folder", "--set", f"data.path={images}", *COMMON)
    assert result.returncode == 0, result.stderr
    words = "28 px, 1 channel (data.channels auto: all 20 images looked at are grey)"
    assert words in result.stdout
    for value in ("rgb", "2"):
        result = inprocess("plan", "--config", "dcgan_folder", "--set", f"data.path={images}",
                           "--set", f"data.channels={value}")  # fmt: skip
        assert result.returncode == 2
        assert result.stderr.startswith("stagegan: error: data.channels: must be 1, 3 or auto")


def test_tfrecords_are_looked_at_too(tmp_path):
    images = folder(tmp_path / "images", colour_every=4)
    result = inprocess("prepare", images, "--output", tmp_path / "records", "--size", "12")
    assert result.returncode == 0, result.stderr
    found = decide_channels({**options(str(tmp_path / "records" / "*.tfrecord")),
                             "source": "tfrecord"})  # fmt: skip
    assert found == (3, "5 of the 20 images looked at are in colour")
