"""Holes for completion (`stagegan.data.masks`): the users' mask files (fitted as images are,
refused by name when broken), LaMa's box and wide generators, the crop around a hole, and a
run that trains on a folder of masks."""

import numpy as np
import pytest
import tensorflow as tf

from stagegan.config.schema import parse_config
from stagegan.data import masks
from stagegan.errors import ConfigError
from stagegan.training.trainer import Trainer


def write(folder, name, array):
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(tf.io.encode_png(array[..., None].astype(np.uint8)).numpy())


def test_masks_are_fitted_as_images_are_and_thresholded(tmp_path):
    wide = np.zeros((24, 40), np.uint8)  # centre crop: columns 8 to 31
    wide[0:12, 8:20] = 255  # the crop's top-left quarter
    small = np.zeros((4, 4), np.uint8)
    small[2:, :] = 255  # the bottom half, upsampled
    grey = np.zeros((8, 8), np.uint8)
    grey[:, 6:], grey[:, 5] = 128, 127  # half brightness is a hole, just below it is not
    write(tmp_path, "b.png", wide)
    write(tmp_path, "a.png", small)
    write(tmp_path, "c.png", grey)
    bank, names = masks.load_masks(str(tmp_path), 8)
    assert names == ["a", "b", "c"] and bank.shape == (3, 8, 8, 1) and bank.dtype == np.float32
    expected = np.zeros((3, 8, 8), np.float32)
    expected[0, 4:, :], expected[1, :4, :4], expected[2, :, 6:] = 1, 1, 1
    np.testing.assert_array_equal(bank[..., 0], expected)


@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda d: None, "no such folder"),
        (lambda d: d.mkdir(), "no mask images (.png, .jpg, .jpeg) in"),
        (lambda d: (d.mkdir(), (d / "x.png").write_bytes(b"not a png")), "cannot read mask x.png"),
        (lambda d: write(d, "dark.png", np.full((8, 8), 100)), "mask dark.png in"),
        (lambda d: write(d, "white.png", np.full((8, 8), 255)), "has all hole at 8x8"),
    ],
)
def test_broken_mask_folders_are_refused_by_name(tmp_path, setup, words):
    folder = tmp_path / "masks"
    setup(folder)
    with pytest.raises(ConfigError) as error:
        masks.load_masks(str(folder), 8)
    assert error.value.key == "data.masks" and words in error.value.message


def test_boxes_respect_lamas_sizes_and_margin():
    batch = masks.box_masks(tf.random.Generator.from_seed(0), 400, 64).numpy()[..., 0]
    margin = round(10 * 64 / 256)  # 2 pixels
    assert batch[:, :margin].max() == 0 and batch[:, -margin:].max() == 0
    assert batch[:, :, :margin].max() == 0 and batch[:, :, -margin:].max() == 0
    share = batch.mean(axis=(1, 2))
    assert share.min() >= (8 / 64) ** 2 - 1e-6  # at least one box of side 30 / 4 rounded
    assert set(np.unique(batch)) == {0.0, 1.0}


def test_wide_masks_mix_strokes_and_boxes_and_are_never_empty():
    batch = masks.wide_masks(tf.random.Generator.from_seed(1), 200, 32).numpy()[..., 0]
    share = batch.mean(axis=(1, 2))
    assert share.min() > 0 and 0.2 < share.mean() < 0.5
    rows_full = (batch == 1).all(axis=2).any(axis=1)  # only strokes can cross the margin
    edge = batch[:, 0].max(axis=1) > 0
    assert edge.any() and not rows_full.all()


def test_the_crop_is_centred_on_the_holes_centre_of_mass():
    mask = np.zeros((3, 16, 16, 1), np.float32)
    mask[0, 2:6, 10:14] = 1  # centre (4, 12): corner (0, 8)
    mask[1, 14:16, 0:2] = 1  # centre (15, 1): corner clipped to (8, 0)
    corners = masks.crop_offsets(tf.constant(mask), 8).numpy()
    np.testing.assert_array_equal(corners, [[0, 8], [8, 0], [4, 4]])  # empty: the centre


def test_a_run_trains_on_the_users_masks(tmp_path):
    folder = tmp_path / "masks"
    first, second = np.zeros((16, 16)), np.zeros((16, 16))
    first[:8], second[4:12, 4:12] = 255, 255
    write(folder, "1.png", first)
    write(folder, "2.png", second)
    raw = {
        "name": "masks",
        "task": "completion",
        "batch_size": 8,
        "devices": {"towers": 1},
        "data": {"size": 16, "count": 16, "masks": str(folder)},
        "model": {"width": 4, "dilations": [2]},
        "stages": [
            {
                "name": "g",
                "steps": 1,
                "updates": [{"train": "generator/*", "loss": "reconstruction"}],
            }
        ],
    }
    trainer = Trainer(parse_config(raw))
    drawn = trainer.task.random_inputs(8)["mask"].numpy()[..., 0]
    bank = np.stack([first, second]) / 255
    matches = [(m == bank).all(axis=(1, 2)) for m in drawn]
    assert all(match.any() for match in matches) and len({int(np.argmax(m)) for m in matches}) == 2
    position = next(iter(trainer.schedule.positions(0)))
    assert np.isfinite(float(trainer.step(position).metrics["generator/reconstruction"]))
    raw["data"]["masks"] = str(tmp_path / "none")
    with pytest.raises(ConfigError, match="no such folder"):
        Trainer(parse_config(raw))
