"""Memorisation in `eval` (`stagegan.evaluation.memorisation`): the rules against distances
written out by hand, and `eval --nearest` on runs whose generators copy one known image."""

import json

import numpy as np
import pytest
from clihelp import assert_user_error, inprocess
from test_holdout import grey_folder, options, values
from test_outputs import png_size

from stagegan.data import sources
from stagegan.evaluation import memorisation as memo


def by_hand(samples, training, held):
    """The three rules of the module docstring, with a full distance matrix and loops."""

    def distance(a, b):
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    to_training, to_held = distance(samples, training), distance(samples, held)
    within_training, within_held = distance(training, training), distance(held, held)
    np.fill_diagonal(within_training, np.inf)
    np.fill_diagonal(within_held, np.inf)
    copies = held_copies = memorised = 0
    ratios = []
    for i in range(len(samples)):
        t, h = np.argmin(to_training[i]), np.argmin(to_held[i])
        copies += to_training[i, t] < within_training[t].min()
        held_copies += to_held[i, h] < within_held[h].min()
        memorised += to_training[i, t] < to_held[i, h]
        ratios.append(to_training[i, t] / within_training[t].min())
    n = len(samples)
    return copies / n, held_copies / n, memorised / n, float(np.median(ratios))


def test_the_rules_match_distances_written_out(monkeypatch):
    rng = np.random.default_rng(0)
    training = rng.integers(0, 256, (40, 4, 4, 1)).astype(np.uint8)
    held = rng.integers(0, 256, (25, 4, 4, 1)).astype(np.uint8)
    # Some samples copy training images (plus a little noise), the others are new.
    copies = training[:10].astype(np.float64) + rng.normal(0, 2, (10, 4, 4, 1))
    samples = np.concatenate([copies, rng.uniform(0, 255, (20, 4, 4, 1))]) / 127.5 - 1
    features = [rng.normal(size=(n, 3)) for n in (30, 40, 25)]
    monkeypatch.setattr(memo, "BLOCK_ELEMENTS", 48)  # 3 references a block: blocks meet
    numbers, found = memo.memorisation(
        samples, features[0], memo.References(training, features[1]),
        memo.References(held, features[2]),
    )  # fmt: skip
    flat = lambda x: np.asarray(x, np.float64).reshape(len(x), -1)
    pixels = by_hand(flat((samples + 1) * 127.5), flat(training), flat(held))
    in_features = by_hand(*features)
    names = ("copies", "held_out_copies", "memorised", "nearest_ratio")
    assert [numbers[f"{name}_pixels"] for name in names] == pytest.approx(pixels)
    assert [numbers[name] for name in names] == pytest.approx(in_features)
    assert numbers["copies_pixels"] >= 10 / 30  # the copies at least
    assert numbers["memorised_chance"] == 40 / 65
    assert found["pixels"][1][:10].tolist() == list(range(10))  # each copy's original


def test_a_copy_of_an_image_held_twice_is_a_copy_and_one_image_has_no_neighbour():
    training = np.array([[0.0], [0.0], [10.0], [12.0]])  # image 0 twice: its spacing is 0
    share, ratio, distance, index = memo.closer_than_neighbours(np.array([[0.0], [6.0]]), training)
    assert share == 0.5 and distance.tolist() == [0.0, 4.0] and index[1] == 2
    assert ratio == 1.0  # the median of 0 (a copy) and 4 / 2
    assert memo.closer_than_neighbours(np.array([[1.0]]), np.array([[0.0]]))[0] is None


def test_nearest_skips_the_excluded_index_across_blocks(monkeypatch):
    rng = np.random.default_rng(1)
    points = rng.normal(size=(23, 5))
    monkeypatch.setattr(memo, "BLOCK_ELEMENTS", 20)  # 4 points a block, of both sets
    distance, index = memo.nearest(points, points, exclude=np.arange(23))
    full = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    np.fill_diagonal(full, np.inf)
    np.testing.assert_allclose(distance, full.min(1))
    assert index.tolist() == full.argmin(1).tolist()


# Runs whose every sample is one image of a grey folder (image i: grey 4 i; with data.holdout
# 0.25, image 0 trains and image 2 is held out: tests/test_holdout.py) ---------------------


def copier_run(base, generator):
    run = base / generator
    result = inprocess(
        "train", "--config", "dcgan_folder", "--run-dir", run,
        "--set", f"data.path={base / 'images'}", "--set", "data.size=32",
        "--set", "data.channels=1", "--set", "data.holdout=0.25", "--set", "batch_size=4",
        "--set", f"model={{latent_dim: 4, width: 4, generator: 'custom_networks:{generator}'}}",
        "--set", "augment=null", "--set", "stages[0].steps=1", "--set", "stages[1].steps=1",
        "--set", "samples=null",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="module")
def copiers(tmp_path_factory):
    base = tmp_path_factory.mktemp("copiers")
    grey_folder(base / "images")
    return {name: copier_run(base, name) for name in ("copies_training_image",
                                                      "copies_held_out_image")}  # fmt: skip


def test_a_run_records_its_split(copiers):
    run = copiers["copies_training_image"]
    record = json.loads((run / "holdout.json").read_text())
    held = values(sources.load_images(options(run.parent / "images"), 0, held_out=True))
    assert [int(name[3:6]) for name in record["files"]] == held
    assert (record["training_files"], record["held_out_files"]) == (48, 12)


def evaluate(run, *more):
    result = inprocess(
        "eval", "--run", run, "--json", "--count", "8",
        "--features", "custom_networks:mean_colour_features", *more,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["metrics"]


def test_eval_finds_a_copy_of_a_training_image(copiers, tmp_path):
    numbers = evaluate(copiers["copies_training_image"], "--nearest", tmp_path / "near.png")
    # Grey 0 is training image 0 itself: nearer to it than anything (copies, memorised); its
    # nearest held-out image, grey 8, has its own nearest held-out image at grey 24: farther.
    assert numbers["memorisation/training_images"] == 48  # the split: tests/test_holdout.py
    assert numbers["memorisation/held_out_images"] == 12
    assert numbers["memorisation/memorised_chance"] == 48 / 60
    for space in ("", "_pixels"):
        assert numbers[f"memorisation/copies{space}"] == 1.0
        assert numbers[f"memorisation/memorised{space}"] == 1.0
        assert numbers[f"memorisation/held_out_copies{space}"] == 1.0
        assert numbers[f"memorisation/nearest_ratio{space}"] == 0.0  # distance 0
    # 8 rows (the samples) of 4 tiles of 64 px (32 px enlarged), 2 px apart, under a title
    assert png_size(tmp_path / "near.png") == (4 * 64 + 3 * 2, 18 + 8 * 64 + 7 * 2)


def test_eval_tells_a_held_out_image_from_a_memorised_one(copiers):
    numbers = evaluate(copiers["copies_held_out_image"])
    # Grey 8 is held-out image 2: a held-out image (itself) is nearer than any training one.
    # (`copies` is a tie here: its nearest training images, grey 4 and 12, are 4 from it and
    # 4 from their own neighbours, so rounding decides.)
    for space in ("", "_pixels"):
        assert numbers[f"memorisation/memorised{space}"] == 0.0
        assert numbers[f"memorisation/held_out_copies{space}"] == 1.0


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--nearest", "near.jpg"], "--nearest: must end in .png"),
        (["--nearest", "there.png"], "--nearest: {tmp}/there.png already exists"),
        (["--nearest", "there.png/x.png"], "--nearest: not a folder: {tmp}/there.png"),
        (["--nearest", "x.png", "--no-memorisation"], "--nearest: shows what --no-memorisation"),
        (["--memorisation", "--no-memorisation"], "not allowed with argument"),
    ],
)
def test_bad_memorisation_flags_are_refused_and_write_nothing(copiers, tmp_path, flags, expected):
    (tmp_path / "there.png").write_bytes(b"mine")
    run = copiers["copies_training_image"]
    before = (run / "eval.jsonl").read_text() if (run / "eval.jsonl").exists() else None
    flags = [str(tmp_path / f) if f.endswith((".png", ".jpg")) else f for f in flags]
    result = inprocess("eval", "--run", run, *flags)
    assert_user_error(result, expected.format(tmp=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there.png"]
    assert (tmp_path / "there.png").read_bytes() == b"mine"
    after = (run / "eval.jsonl").read_text() if (run / "eval.jsonl").exists() else None
    assert after == before
